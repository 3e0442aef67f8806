"""Smaller settings errors: ``LOG_LEVEL=LOUD`` was a traceback and exit 1;
``delete-webhook`` demanded a provider key; run as ``kopek`` the usage said
``python -m bot`` and ``--help`` pointed to ``.env.example``, which the wheel does not
ship; ``BOT_TOKEN=`` (as in ``.env.example``) "did not look like a token",
``ADMIN_IDS=0`` was "a group or channel id", ids beyond 64 bits and non-ASCII digits were
accepted; the health check's settings error named no setting."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from bot.__main__ import main as bot_main
from bot.ops.health import main as healthcheck
from bot.settings import MAX_USER_ID, BotApiSettings, Settings
from tests.support.harness import free_port

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


# --- delete-webhook reads BOT_TOKEN and TELEGRAM_API_BASE only ----------------------


def test_delete_webhook_needs_no_provider_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without any provider key it goes to the Bot API (here nothing listens: exit 1,
    "cannot remove"), where it used to stop at "no provider key set" (exit 2)."""
    api = f"http://127.0.0.1:{free_port()}"
    env = {"BOT_TOKEN": _TOKEN, "TELEGRAM_API_BASE": api}
    code, err = _run_bot(env, tmp_path, monkeypatch, capsys, ("delete-webhook",))
    assert code == 1
    [line] = err.strip().splitlines()
    assert line.startswith(f"kopek: cannot remove the webhook at {api}: "), line
    assert _TOKEN.partition(":")[2] not in err


@pytest.mark.parametrize(
    ("env", "says"),
    [
        ({}, "kopek: BOT_TOKEN is not set."),
        ({"BOT_TOKEN": "not-a-token"}, "kopek: configuration error in BOT_TOKEN: does not look"),
        (
            {"BOT_TOKEN": _TOKEN, "TELEGRAM_API_BASE": "ftp://x"},
            "kopek: configuration error in TELEGRAM_API_BASE: must be an http(s) URL",
        ),
    ],
)
def test_delete_webhook_checks_what_it_reads(
    env: dict[str, str],
    says: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, err = _run_bot(env, tmp_path, monkeypatch, capsys, ("delete-webhook",))
    assert code == 2
    [line] = err.strip().splitlines()
    assert line.startswith(says), line


def test_bot_api_settings_redact_the_token_and_a_proxy_password() -> None:
    api = BotApiSettings(
        _env_file=None, bot_token="1:x", telegram_api_base="https://u:proxy-pw@bot.example/"
    )
    assert api.telegram_api_base == "https://u:proxy-pw@bot.example"
    assert api.secret_values() == ["1:x", "proxy-pw"]
    full = Settings(_env_file=None, bot_token="1:x", groq_api_key="k")
    assert isinstance(full, BotApiSettings)


# --- the program's own name, and no pointer to a file the wheel lacks -----------------


def test_export_config_usage_names_kopek_when_run_as_kopek(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code, err = _run_bot({}, tmp_path, monkeypatch, capsys, ("export-config",))
    assert code == 2
    assert err.strip() == "usage: kopek export-config FILE"


def test_help_points_to_the_readme_and_shows_file(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sys, "argv", ["/venv/bin/kopek", "--help"])
    with pytest.raises(SystemExit) as exc:
        bot_main()
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: kopek [-h] [COMMAND [FILE]]")
    assert ".env.example" not in out
    assert "README" in out


# --- BOT_TOKEN= and ADMIN_IDS -----------------------------------------------------------


@pytest.mark.parametrize("token", ["", "   "])
def test_an_empty_bot_token_is_not_set(
    token: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``cp .env.example .env`` leaves ``BOT_TOKEN=``: the same line as no BOT_TOKEN."""
    code, err = _run_bot({"BOT_TOKEN": token}, tmp_path, monkeypatch, capsys)
    assert code == 2
    assert err.strip() == (
        "kopek: BOT_TOKEN is not set. Get a token from @BotFather in Telegram (/newbot) "
        "and put BOT_TOKEN=... in .env"
    )


def test_admin_ids_zero_is_no_user_id() -> None:
    with pytest.raises(ValidationError) as info:
        Settings(_env_file=None, bot_token="1:x", groq_api_key="k", admin_ids="42, 0")
    msg = str(info.value.errors()[0]["msg"])
    assert "0, which is no Telegram user id" in msg
    assert "group or channel" not in msg


@pytest.mark.parametrize(
    ("ids", "says"),
    [
        ("99999999999999999999999", "larger than any Telegram user id"),
        (str(MAX_USER_ID + 1), "larger than any Telegram user id"),
        (str(2**64), "larger than any Telegram user id"),
        ("9" * 5000, "comma-separated Telegram user ids (digits 0-9)"),
        ("٤٢", "comma-separated Telegram user ids (digits 0-9)"),
        ("42, ４２", "comma-separated Telegram user ids (digits 0-9)"),
        ("4_2", "comma-separated Telegram user ids (digits 0-9)"),
        ("42x", "comma-separated Telegram user ids (digits 0-9)"),
    ],
)
def test_admin_ids_beyond_telegram_or_not_ascii_digits_are_refused(ids: str, says: str) -> None:
    with pytest.raises(ValidationError) as info:
        Settings(_env_file=None, bot_token="1:x", groq_api_key="k", admin_ids=ids)
    [error] = info.value.errors()
    assert error["loc"] == ("admin_ids",)
    assert says in str(error["msg"])
    assert len(str(error["msg"])) < 200


def test_the_largest_telegram_user_id_is_accepted() -> None:
    ids = f"42, {MAX_USER_ID}"
    settings = Settings(_env_file=None, bot_token="1:x", groq_api_key="k", admin_ids=ids)
    assert settings.admin_ids == frozenset({42, MAX_USER_ID})


# --- the health check names the setting ---------------------------------------------------


def test_healthcheck_names_the_unreadable_setting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("METRICS_PORT", "abc")
    assert healthcheck() == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("kopek healthcheck: configuration error in METRICS_PORT: "), line


# --- DIGEST_DEFAULT_TIME: read at start like every other setting ---------------------------


@pytest.mark.parametrize("value", ["25:99", "9", "nine", "09:60"])
def test_an_unreadable_digest_default_time_is_refused_at_settings(value: str) -> None:
    """It was only parsed by the profile store, once the bot was built after migrating."""
    with pytest.raises(ValidationError) as info:
        Settings(_env_file=None, bot_token="1:x", groq_api_key="k", digest_default_time=value)
    [error] = info.value.errors()
    assert error["loc"] == ("digest_default_time",)
    assert "HH:MM" in str(error["msg"])


def test_a_digest_default_time_is_read() -> None:
    settings = Settings(
        _env_file=None, bot_token="1:x", groq_api_key="k", digest_default_time="7:05"
    )
    assert settings.digest_default_time == "7:05"
