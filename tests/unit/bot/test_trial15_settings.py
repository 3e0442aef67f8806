"""Trial 15, the smaller settings findings: ``LOG_LEVEL=LOUD`` was a traceback and
exit 1 (F4)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from bot.__main__ import main as bot_main
from bot.settings import Settings

_TOKEN = "123456:ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghi"


def _run_bot(
    env: dict[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    argv: tuple[str, ...] = (),
) -> tuple[int, str]:
    """``kopek`` in this process with only ``env`` set; (exit code, stderr)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["/venv/bin/kopek", *argv])
    for name in Settings.model_fields:
        monkeypatch.delenv(name.upper(), raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    code = bot_main()
    return code, capsys.readouterr().err


@pytest.mark.parametrize("level", ["LOUD", "verbose", "10", "INFO,DEBUG"])
def test_an_unknown_log_level_is_one_line_and_exit_2(
    level: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    env = {"BOT_TOKEN": _TOKEN, "GROQ_API_KEY": "gsk_x", "LOG_LEVEL": level}
    code, err = _run_bot(env, tmp_path, monkeypatch, capsys)
    assert code == 2
    [line] = err.strip().splitlines()
    assert line == (
        "kopek: configuration error in LOG_LEVEL: "
        "Input should be 'DEBUG', 'INFO', 'WARNING', 'ERROR' or 'CRITICAL'"
    )


@pytest.mark.parametrize(
    ("level", "read"),
    [("debug", "DEBUG"), (" Warning ", "WARNING"), ("error", "ERROR"), ("", "INFO")],
)
def test_log_levels_are_read_in_any_case(level: str, read: str) -> None:
    settings = Settings(_env_file=None, bot_token="1:x", groq_api_key="k", log_level=level)
    assert settings.log_level == read
