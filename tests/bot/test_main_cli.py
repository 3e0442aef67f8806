"""``python -m bot`` / ``kopek``: the command line front (bot/__main__.py).

A misspelt subcommand used to start the bot silently (``delete-webhok`` ran polling);
now argparse refuses it with exit 2 before any setting is read or aiogram imported. A
misspelt setting that limits money refuses the start too.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from bot.__main__ import COMMANDS, _parse, main
from bot.settings.typos import limits_money
from tests.support.bot_cli import start_bot_with_env


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
    done = start_bot_with_env(tmp_path, {"BUGDET_GLOBAL_DAILY_USD": "5"})
    assert done.returncode == 2
    assert done.stderr_lines == [
        "kopek: configuration error: BUGDET_GLOBAL_DAILY_USD is not a setting: did you mean "
        "BUDGET_GLOBAL_DAILY_USD? (a misspelt limit would leave the bot without it)"
    ]


def test_a_limit_under_a_name_no_setting_has_stops_the_start(tmp_path: Path) -> None:
    """``USER_DAILY_LIMIT_USD=1`` in ``.env`` (meant ``BUDGET_USER_DAILY_USD``, and too far
    from it for a "did you mean") would start a bot with no user limit: exit 2, one line."""
    (tmp_path / ".env").write_text("USER_DAILY_LIMIT_USD=1\n", encoding="utf-8")
    done = start_bot_with_env(tmp_path, {})
    assert done.returncode == 2
    assert done.stderr_lines == [
        "kopek: configuration error: USER_DAILY_LIMIT_USD is not a setting (a limit under a"
        " wrong name would leave the bot without it; the limits are in docs/configuration.md)"
    ]


@pytest.mark.parametrize(("value", "named"), [("42", "42"), ("-1001234567890, 77", "77")])
def test_a_user_id_among_the_chat_ids_stops_the_start_in_one_line(
    tmp_path: Path, value: str, named: str
) -> None:
    """A group, supergroup or channel id is negative (docs/configuration.md): a positive
    id in ``ALLOWED_CHAT_IDS`` is a person's, and would let that person in privately in
    allowlist mode. Refused like ``ALLOWED_USER_IDS=-5``: exit 2, one line."""
    done = start_bot_with_env(tmp_path, {"ACCESS_MODE": "allowlist", "ALLOWED_CHAT_IDS": value})
    assert done.returncode == 2, done.output
    [line] = done.stderr_lines
    assert "ALLOWED_CHAT_IDS" in line and f" {named}," in line and "ALLOWED_USER_IDS" in line
    assert not done.database.exists()


def test_a_chat_id_among_the_user_ids_stops_the_start_in_one_line(tmp_path: Path) -> None:
    done = start_bot_with_env(tmp_path, {"ALLOWED_USER_IDS": "-5"})
    assert done.returncode == 2
    [line] = done.stderr_lines
    assert "ALLOWED_USER_IDS" in line and "-5" in line


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
