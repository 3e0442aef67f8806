"""A chat Telegram has closed to the bot for long gets no paid answer, through the real
bot: its messages are recorded deferred, cost nothing, and the chat is told once."""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path

from tests.support.inprocess import AppFactory
from tests.support.providers import FakeProviders
from tests.support.telegram import FakeTelegram

USER = 42


def _statuses(db: Path) -> list[str]:
    with contextlib.closing(sqlite3.connect(db)) as conn:
        rows = conn.execute(
            "SELECT status FROM seen_messages WHERE chat_id = ? ORDER BY id", (USER,)
        )
        return [str(r[0]) for r in rows.fetchall()]


def _holds(db: Path) -> int:
    with contextlib.closing(sqlite3.connect(db)) as conn:
        return int(conn.execute("SELECT COUNT(*) FROM budget_holds").fetchone()[0])


async def test_messages_under_a_long_flood_wait_start_no_call_and_get_one_notice(
    app_factory: AppFactory,
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
    bot_env: dict[str, str],
) -> None:
    """The first answer meets a 429 longer than FLOOD_DEFER_SECONDS and is kept (it is
    paid). The two messages sent during the wait make no hold and no provider call and
    are recorded deferred; when the wait ends the kept answer arrives, then one notice
    saying they were not answered and cost nothing. After the wait, messages are
    answered again."""
    db = Path(bot_env["DATABASE_URL"].split("///", 1)[1])
    bot = app_factory(env=dict(bot_env, FLOOD_DEFER_SECONDS="1"))
    await bot.start()
    fake_telegram.fail_next("sendMessage", 429, retry_after=3, chat_id=USER)
    fake_providers.default(
        "groq", {"text": "An answer.", "prompt_tokens": 20, "completion_tokens": 3}
    )
    mark = fake_telegram.mark()
    fake_telegram.inject_message(USER, "first")
    await fake_telegram.wait_request("sendMessage", timeout=20)
    for text in ("second", "third"):
        fake_telegram.inject_message(USER, text)
    answer, notice = await fake_telegram.wait_sent(USER, 2, since=mark, timeout=20)
    assert answer.text == "An answer."
    assert "not answered and cost nothing" in notice.text and "about 1 min" in notice.text
    assert len(fake_providers.requests) == 1 and _holds(db) == 1
    assert _statuses(db) == ["answered", "deferred", "deferred"]
    assert fake_telegram.flood_violations() == []

    mark = fake_telegram.mark()
    fake_telegram.inject_message(USER, "fourth")
    [again] = await fake_telegram.wait_sent(USER, since=mark, timeout=20)
    assert again.text == "An answer." and len(fake_providers.requests) == 2
    assert await bot.stop() == 0
