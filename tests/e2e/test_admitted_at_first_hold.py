"""A chat message's operation and request are values until their first hold
(``docs/decisions/306-an-operation-is-a-value-until-its-first-hold.md``), through the
real bot: a request no key was asked for is still counted as a message and leaves
nothing open or held, on both stores; on PostgreSQL an admission refusal (kill switch,
USER_MAX_PER_MINUTE, USER_DAILY_MESSAGES) now comes from the first hold, and still
holds nothing, asks no provider and says the refusal's own template."""

from __future__ import annotations

import pytest

from budget.status import UserStatus
from tests.e2e.conftest import EnvWith
from tests.support.inprocess import AppFactory, InProcessBot
from tests.support.providers import FakeProviders
from tests.support.telegram import FakeTelegram, SentMessage

ADMIN = 1
GROQ_KEYS = ("gsk_fake_groq_key_1", "gsk_fake_groq_key_2")


async def _ask(tg: FakeTelegram, user: int, text: str) -> SentMessage:
    mark = tg.mark()
    tg.inject_message(user, text)
    [reply] = await tg.wait_sent(user, since=mark, timeout=30)
    return reply


async def _status(bot: InProcessBot, user: int) -> UserStatus:
    assert bot.app is not None
    return await bot.app.ledger.user_status(user)


async def _nothing_open(bot: InProcessBot, user: int) -> tuple[int, int, int]:
    """(messages counted today, operations in flight, holds outstanding) of ``user``."""
    status = await _status(bot, user)
    return status.messages_today, status.inflight, status.outstanding_holds


@pytest.fixture(params=["sqlite", "postgres"])
def store_env(request: pytest.FixtureRequest) -> dict[str, str]:
    """Extra settings putting the bot on one store: its SQLite file, or a fresh
    PostgreSQL database of the suite's server."""
    if request.param == "sqlite":
        return {}
    return {"DATABASE_URL": request.getfixturevalue("pg_url")}


async def test_a_message_no_key_was_asked_for_is_counted_and_leaves_nothing_open(
    app_factory: AppFactory,
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
    env_with: EnvWith,
    store_env: dict[str, str],
) -> None:
    """Both Groq keys answer 429 for ten minutes: the first message asks both (two
    requests, the "no model answered" template); the second is passed over by every key
    (cooling down: no request, no hold asked), is counted as the first was, gets the
    same template, and leaves no operation in flight and no hold."""
    for key in GROQ_KEYS:
        fake_providers.script(key, {"status": 429, "retry_after": "600"})
    env = env_with("groq", USER_DAILY_MESSAGES="10", **store_env)
    bot = app_factory(env=env)
    await bot.start()
    first = await _ask(fake_telegram, 7, "first")
    assert len(fake_providers.requests) == 2
    assert await _nothing_open(bot, 7) == (1, 0, 0)
    second = await _ask(fake_telegram, 7, "second")
    assert len(fake_providers.requests) == 2, "a cooling key was asked"
    assert await _nothing_open(bot, 7) == (2, 0, 0)
    assert second.text == first.text
    assert "Nothing was charged." in second.text, second.text
    assert await bot.stop() == 0


async def test_on_postgres_an_admission_refusal_comes_from_the_first_hold(
    app_factory: AppFactory,
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
    bot_env: dict[str, str],
    pg_url: str,
) -> None:
    """USER_MAX_PER_MINUTE=1, USER_DAILY_MESSAGES=2: a user's second message of the
    minute is refused ``rate`` (counted, as the counter ran first before too); the third
    is refused ``messages`` (not counted); under /kill another user is refused as
    paused (counted). Each refusal asks no provider and leaves nothing held or in
    flight; /budget shows no outstanding hold."""
    env = dict(
        bot_env,
        DATABASE_URL=pg_url,
        ADMIN_IDS=str(ADMIN),
        USER_MAX_PER_MINUTE="1",
        USER_DAILY_MESSAGES="2",
    )
    bot = app_factory(env=env)
    await bot.start()
    assert (await _ask(fake_telegram, 7, "first")).text.endswith("first")
    asked = len(fake_providers.requests)
    assert asked == 1

    rate = await _ask(fake_telegram, 7, "second")
    assert rate.text.startswith("✋ Too many messages per minute."), rate.text
    assert await _nothing_open(bot, 7) == (2, 0, 0)
    daily = await _ask(fake_telegram, 7, "third")
    assert daily.text.startswith("📭 You have used today's messages"), daily.text
    assert await _nothing_open(bot, 7) == (2, 0, 0)

    assert "Kill switch ON" in (await _ask(fake_telegram, ADMIN, "/kill drill")).text
    paused = await _ask(fake_telegram, 8, "while killed")
    assert paused.text.startswith("⏸ The bot is paused by its administrators."), paused.text
    assert await _nothing_open(bot, 8) == (1, 0, 0)

    assert len(fake_providers.requests) == asked
    budget = await _ask(fake_telegram, ADMIN, "/budget")
    assert "Outstanding holds: 0" in budget.text, budget.text
    assert await bot.stop() == 0
