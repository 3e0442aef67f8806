"""``python -m bot`` / ``kopek``: the command line front (bot/__main__.py).

A misspelt subcommand used to start the bot silently (``delete-webhok`` ran polling);
now argparse refuses it with exit 2 before any setting is read or aiogram imported. A
misspelt setting that limits money refuses the start too.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from bot.__main__ import COMMANDS, _parse, main
from bot.settings.typos import limits_money


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        ([], ("run", [])),
        (["run"], ("run", [])),
        (["healthcheck"], ("healthcheck", [])),
        (["delete-webhook"], ("delete-webhook", [])),
        (["export-config", "conf.json"], ("export-config", ["conf.json"])),
        (["import-config", "conf.json"], ("import-config", ["conf.json"])),
    ],
)
def test_known_commands_parse(argv: list[str], expected: tuple[str, list[str]]) -> None:
    assert _parse(argv) == expected


@pytest.mark.parametrize(
    "argv",
    [["delete-webhok"], ["serve"], ["run", "extra"], ["healthcheck", "x"], ["--port", "1"]],
)
def test_unknown_command_or_stray_argument_exits_2_without_starting(
    argv: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # no BOT_TOKEN: had main() gone on to read settings it would print the token hint
    monkeypatch.delenv("BOT_TOKEN", raising=False)
    monkeypatch.setattr(sys, "argv", ["python -m bot", *argv])
    with pytest.raises(SystemExit) as exc:
        main()
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: python -m bot")
    assert "BOT_TOKEN" not in err


def test_help_lists_every_command(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sys, "argv", ["/venv/bin/kopek", "--help"])
    with pytest.raises(SystemExit) as exc:
        main()
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: kopek")
    for command in COMMANDS:
        assert f"  {command} " in out


def test_a_misspelt_limit_stops_the_start_in_one_line(tmp_path: Path) -> None:
    """``BUGDET_GLOBAL_DAILY_USD=5`` (meant ``BUDGET_GLOBAL_DAILY_USD``) would start a bot
    with no global limit: ``python -m bot`` exits 2 with one line naming both; a typo of
    a setting that limits no money is only logged."""
    env = {
        "PATH": os.environ.get("PATH", ""),
        "BOT_TOKEN": "123456:" + "A" * 35,
        "GROQ_API_KEY": "gsk_test",
        "DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'k.db'}",
        "BUGDET_GLOBAL_DAILY_USD": "5",
    }
    done = subprocess.run(
        [sys.executable, "-m", "bot"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "kopek: configuration error: BUGDET_GLOBAL_DAILY_USD is not a setting: did you mean "
        "BUDGET_GLOBAL_DAILY_USD? (a misspelt limit would leave the bot without it)"
    ]


def test_a_limit_under_a_name_no_setting_has_stops_the_start(tmp_path: Path) -> None:
    """``USER_DAILY_LIMIT_USD=1`` in ``.env`` (meant ``BUDGET_USER_DAILY_USD``, and too far
    from it for a "did you mean") would start a bot with no user limit: exit 2, one line."""
    (tmp_path / ".env").write_text("USER_DAILY_LIMIT_USD=1\n", encoding="utf-8")
    env = {
        "PATH": os.environ.get("PATH", ""),
        "BOT_TOKEN": "123456:" + "A" * 35,
        "GROQ_API_KEY": "gsk_test",
        "DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'k.db'}",
    }
    done = subprocess.run(
        [sys.executable, "-m", "bot"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "kopek: configuration error: USER_DAILY_LIMIT_USD is not a setting (a limit under a"
        " wrong name would leave the bot without it; the limits are in docs/configuration.md)"
    ]


@pytest.mark.parametrize(
    ("setting", "limits"),
    [
        ("BUDGET_GLOBAL_DAILY_USD", True),
        ("OPERATION_MAX_USD", True),
        ("OPERATION_MAX_REQUESTS", True),
        ("DEEPSEEK_DAILY_CAP_USD", True),
        ("WEBHOOK_URL", False),
        ("STREAM_EDIT_INTERVAL_MS", False),
    ],
)
def test_which_settings_limit_money(setting: str, limits: bool) -> None:
    assert limits_money(setting) is limits
