"""A group upgraded to a supergroup while the bot answers in it, through the real bot:
the paid answer reaches the supergroup once, nothing goes to the dead id, and the chat's
history follows it."""

from __future__ import annotations

import contextlib
import logging
import sqlite3
from pathlib import Path

import pytest

from bot.handlers.chat import TYPING_DELAY_S
from tests.e2e.test_stream import until
from tests.support.inprocess import AppFactory
from tests.support.providers import FakeProviders
from tests.support.telegram import FakeTelegram

BOT = "kopek_test_bot"
OLD = -400000001  # the basic group (teloxide's sample ids)
NEW = -1001000000002  # the supergroup it became
USER = 30


def _ask_in(tg: FakeTelegram, chat_id: int, chat_type: str, text: str) -> None:
    tg.inject_message(
        USER, f"@{BOT} {text}", chat_id=chat_id, chat_type=chat_type, chat_title="Test Group",
        entities=[{"type": "mention", "offset": 0, "length": len(BOT) + 1}],
    )  # fmt: skip


def _turns(db: Path, chat_id: int) -> int:
    with contextlib.closing(sqlite3.connect(db)) as conn:
        row = conn.execute("SELECT COUNT(*) FROM chat_turns WHERE chat_id = ?", (chat_id,))
        return int(row.fetchone()[0])


async def test_an_answer_for_an_upgraded_group_goes_to_its_supergroup_with_the_history(
    app_factory: AppFactory,
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
    bot_env: dict[str, str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A member upgrades the group while the bot's answer is being written (typing
    shown): the answer's send and the typing renewals meet Telegram's "group chat was
    migrated" 400 and go to the supergroup — one provider call, nothing delivered to or
    templated at the old id, no task dying with the error. After the service messages
    the history is the supergroup's: its next question carries the group's turns."""
    caplog.set_level(logging.ERROR)
    db = Path(bot_env["DATABASE_URL"].split("///", 1)[1])
    bot = app_factory()
    await bot.start()
    mark = fake_telegram.mark()
    _ask_in(fake_telegram, OLD, "group", "My name is Ada.")
    await fake_telegram.wait_sent(OLD, since=mark, timeout=20)
    await until(lambda: _turns(db, OLD) == 2)  # stored after its delivery

    fake_providers.script("groq", {"text": "Noted, and answered.", "gate": "upgrade"})
    mark = fake_telegram.mark()
    _ask_in(fake_telegram, OLD, "group", "Remember that.")
    await fake_telegram.wait_request("sendChatAction", timeout=TYPING_DELAY_S + 20)
    fake_telegram.migrate_group(OLD, NEW, USER, announce=False)
    fake_providers.open_gate("upgrade")
    [answer] = await fake_telegram.wait_sent(NEW, since=mark, timeout=20)
    assert answer.text == "Noted, and answered."
    to_old = [r.status for r in fake_telegram.requests("sendMessage") if r.chat_id == OLD]
    assert to_old == [200, 400]  # the first answer; the refused one, and no template after it
    assert len(fake_providers.requests) == 2

    mark = fake_telegram.mark()
    fake_telegram.migrate_group(OLD, NEW, USER)  # the two service messages arrive
    _ask_in(fake_telegram, NEW, "supergroup", "What is my name?")
    await fake_telegram.wait_sent(NEW, since=mark, timeout=20)
    asked = [m["content"] for m in fake_providers.requests[-1].body["messages"]]
    assert any("My name is Ada." in text for text in asked)
    assert any("Remember that." in text for text in asked)
    await until(lambda: _turns(db, NEW) == 6)  # the last turn is stored after its delivery
    assert _turns(db, OLD) == 0
    assert await bot.stop() == 0
    assert not [r for r in caplog.records if "never retrieved" in r.getMessage()]
