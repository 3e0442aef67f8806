"""The harness proven against real aiogram long polling (``tests/support/echo_bot.py``, run
as ``python tests/support/echo_bot.py`` forked from the fork server, ``tests/support/zygote.py``),
and the fork server's children shown to be processes of their own."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import pytest

from tests.support.harness import BotExited, BotFactory
from tests.support.telegram import FakeTelegram

ECHO = [sys.executable, str(Path(__file__).parents[1] / "support" / "echo_bot.py")]


async def test_start_answers_sigterm_exits_zero_restart_redelivers_nothing_kill_is_a_crash(
    bot_factory: BotFactory, fake_telegram: FakeTelegram
) -> None:
    """/start is answered per language_code; an echo sent with an entities list is stored
    as text plus a bold entity; SIGTERM ends the run with 0; no token in logs. After a
    restart the old /start is not answered again; a message sent while the bot was down
    is answered once it polls again. kill() then ends the process without a clean
    shutdown (SIGKILL)."""
    bot = bot_factory(ECHO)
    await bot.start()
    hooks = fake_telegram.webhook_calls
    assert hooks == [{"method": "deleteWebhook", "drop_pending_updates": False}]

    mark = fake_telegram.mark()
    fake_telegram.inject_message(42, "/start", language_code="en")
    fake_telegram.inject_message(43, "/start", language_code="ru")
    [en] = await fake_telegram.wait_sent(42, since=mark)
    [ru] = await fake_telegram.wait_sent(43, since=mark)
    assert en.text == "Hello! I am an echo bot."
    assert ru.text.startswith("Привет")

    fake_telegram.inject_message(7, "a < b & 🏟")
    reply = await fake_telegram.wait_for(lambda m: m.chat_id == 7)
    assert reply.text == "a < b & 🏟"
    assert [(e.type, e.offset, e.length) for e in reply.entities] == [("bold", 0, 10)]
    assert reply.parse_mode is None

    # let the bot confirm those updates with its next getUpdates offset
    first = fake_telegram.requests("getUpdates")[-1].seq
    await fake_telegram.wait_request(
        "getUpdates", lambda r: int(r.params.get("offset", 0)) > 0, since=first
    )
    assert await bot.stop(signal.SIGTERM) == 0
    assert bot.logs(), "the run's output was captured"
    assert fake_telegram.token not in bot.logs()
    assert fake_telegram.token.split(":")[1] not in bot.logs()

    fake_telegram.inject_message(42, "while you were away")
    mark = fake_telegram.mark()
    await bot.start()
    [reply] = await fake_telegram.wait_sent(42, since=mark)
    assert reply.text == "while you were away"
    assert [m.text for m in fake_telegram.sent_messages(42)] == [
        "Hello! I am an echo bot.",
        "while you were away",
    ]
    assert bot.runs == 2
    await bot.kill()
    assert bot.returncode == -signal.SIGKILL


async def test_early_exit_is_reported_with_its_code(
    bot_factory: BotFactory, bot_env: dict[str, str]
) -> None:
    """A bot that exits before polling raises BotExited carrying code and output."""
    env = {k: v for k, v in bot_env.items() if k != "BOT_TOKEN"}
    bot = bot_factory(ECHO, env=env)
    with pytest.raises(BotExited) as caught:
        await bot.start()
    assert caught.value.returncode == 2
    assert "BOT_TOKEN is not set" in bot.stderr()


async def test_a_forked_bot_is_a_process_of_its_own(
    bot_factory: BotFactory, bot_env: dict[str, str], fake_telegram: FakeTelegram, tmp_path: Path
) -> None:
    """``python -m bot`` forked from the fork server (``tests/support/zygote.py``) is a
    process of its own: another pid than the test's, the environment and working
    directory it was given (not the server's), its output in its run's files; SIGTERM
    ends it with 0, SIGKILL with -9, and an exit before polling gives the code."""
    database = tmp_path / "forked.db"
    bot = bot_factory(env=dict(bot_env, DATABASE_URL=f"sqlite+aiosqlite:///{database}"))
    assert bot.forked
    await bot.start()  # polled with the given BOT_TOKEN (the fake answers no other)
    assert bot.pid is not None and bot.pid != os.getpid()
    assert os.readlink(f"/proc/{bot.pid}/cwd") == str(bot.cwd)
    assert database.exists()  # migrated where its DATABASE_URL says
    assert await bot.stop(signal.SIGTERM) == 0
    assert "getWebhookInfo" in [r.method for r in fake_telegram.requests()]

    await bot.start()
    await bot.kill()
    assert bot.returncode == -signal.SIGKILL

    alone = bot_factory(env={k: v for k, v in bot_env.items() if k != "BOT_TOKEN"})
    with pytest.raises(BotExited) as caught:
        await alone.start()
    assert caught.value.returncode == 2
    assert "BOT_TOKEN is not set" in alone.stderr()
