"""``python -m bot`` / ``kopek``: the command line front (bot/__main__.py).

A misspelt subcommand used to start the bot silently (``delete-webhok`` ran polling);
now argparse refuses it with exit 2 before any setting is read or aiogram imported.
"""

from __future__ import annotations

import sys

import pytest

from bot.__main__ import COMMANDS, _parse, main


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
