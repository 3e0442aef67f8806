"""A paid answer kept across a flood wait goes back to the forum topic it answers; a
group's anonymous admins count toward the update rate as one payer."""

from __future__ import annotations

import pytest

from tests.support.groups import BOT, mention
from tests.support.inprocess import AppFactory
from tests.support.providers import FakeProviders
from tests.support.telegram import FakeTelegram


@pytest.mark.parametrize("database", ["sqlite", "postgresql"])
async def test_a_kept_answer_is_delivered_in_its_topic(
    app_factory: AppFactory,
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
    bot_env: dict[str, str],
    database: str,
    request: pytest.FixtureRequest,
) -> None:
    """A mention in topic 7 whose answer meets a 429 (retry_after 2): the outbox sends it
    when the wait ends, still in topic 7 (not General), with one provider request — with
    the outbox row in a SQLite file and in PostgreSQL."""
    env = dict(bot_env)
    if database == "postgresql":
        env["DATABASE_URL"] = request.getfixturevalue("pg_migrated_url")
    bot = app_factory(env=env)
    await bot.start()
    forum = -1007100
    fake_providers.script("groq", {"text": "kept topic answer"})
    fake_telegram.fail_next("sendMessage", 429, retry_after=2, chat_id=forum)
    mark = fake_telegram.mark()
    text = f"@{BOT} question in a topic"
    fake_telegram.inject_message(
        31,
        text,
        chat_id=forum,
        chat_type="supergroup",
        thread_id=7,
        entities=mention(f"@{BOT}"),
    )
    [answer] = await fake_telegram.wait_sent(forum, since=mark, timeout=30)
    assert answer.text == "kept topic answer"
    assert answer.message_thread_id == 7
    to_forum = [r for r in fake_telegram.requests("sendMessage") if r.chat_id == forum]
    assert [r.status for r in to_forum] == [429, 200]
    assert fake_telegram.flood_violations() == []
    assert len(fake_providers.requests) == 1
    assert await bot.stop() == 0


async def test_anonymous_admins_count_toward_the_update_rate_per_group(
    app_factory: AppFactory,
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
    bot_env: dict[str, str],
) -> None:
    """USER_MAX_UPDATES_PER_MINUTE=5: group A's anonymous admins (GroupAnonymousBot,
    ``is_bot``, ``sender_chat`` = the group) send 12 mentions — 5 reach the bot, the rest
    are dropped in silence; group B's anonymous admin is counted apart and answered."""
    bot = app_factory(env={**bot_env, "USER_MAX_UPDATES_PER_MINUTE": "5"})
    await bot.start()
    group_a, group_b = -1002001, -1002002

    def anonymous(chat: int, text: str) -> None:
        fake_telegram.inject_message(
            1087968824,
            text,
            entities=mention(f"@{BOT}"),
            chat_id=chat,
            chat_type="supergroup",
            sender_chat={"id": chat, "type": "supergroup", "title": f"G{chat}"},
            user_is_bot=True,
            username="GroupAnonymousBot",
            first_name="Group",
        )

    mark = fake_telegram.mark()
    for i in range(12):
        anonymous(group_a, f"@{BOT} question {i}")
    anonymous(group_b, f"@{BOT} question from B")
    await fake_telegram.wait_sent(group_b, since=mark, timeout=30)
    await fake_telegram.wait_until(lambda: True if len(fake_providers.requests) >= 6 else None, 30)
    await fake_telegram.wait_sent(group_a, since=mark, timeout=30, count=5)
    # the queue's refusals for group A would have been sent at arrival, before B's answer
    sent_a = fake_telegram.sent_events(group_a, since=mark)
    assert len(sent_a) == 5, [m.text for m in sent_a]
    assert len(fake_providers.requests) == 6  # 5 from group A, 1 from group B
    assert await bot.stop() == 0
