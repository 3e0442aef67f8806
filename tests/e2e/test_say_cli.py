"""The try-it command line (``python -m tests.support.telegram say``, README "Try it")
against the real bot (in process): a reply is printed; a bot that stays silent, or no
fake Bot API at all, is one line on stderr and an exit status, never a traceback."""

from __future__ import annotations

import socket

import pytest

from tests.support.inprocess import AppFactory
from tests.support.telegram import FakeTelegram, _say, command_line


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_say_prints_a_reply_and_one_line_when_the_bot_stays_silent(
    app_factory: AppFactory,
    fake_telegram: FakeTelegram,
    bot_env: dict[str, str],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """/help is printed (status 0); a group message that does not address the bot gets
    no reply: "sent nothing … within 0.5 s" on one line, status 1; a port with no fake
    Bot API: one line, status 2; --help describes --port and --timeout."""
    bot = app_factory(env=bot_env)
    await bot.start()
    port = str(fake_telegram.base_url.rsplit(":", 1)[1])
    assert await _say(command_line().parse_args(["say", "--port", port, "/help"])) == 0
    out = capsys.readouterr()
    assert "/persona" in out.out and out.err == ""

    silent = ["say", "--port", port, "--timeout", "0.5", "--chat", "-1004242", "hello all"]
    assert await _say(command_line().parse_args(silent)) == 1
    out = capsys.readouterr()
    assert out.out == "" and out.err.count("\n") == 1 and "Traceback" not in out.err
    assert "sent nothing to chat -1004242 within 0.5 s" in out.err

    nobody = ["say", "--port", str(_free_port()), "--timeout", "0.5", "hi"]
    assert await _say(command_line().parse_args(nobody)) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no fake Bot API" in err
    await bot.stop()

    monkeypatch.setenv("COLUMNS", "200")  # argparse wraps help at the terminal's width
    with pytest.raises(SystemExit):
        command_line().parse_args(["say", "--help"])
    usage = capsys.readouterr().out
    assert "--port PORT" in usage and "fake Bot API's port" in usage
    assert "--timeout TIMEOUT" in usage and "seconds to wait for the bot's reply" in usage
