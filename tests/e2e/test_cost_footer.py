"""``/cost on``: each answer ends with what it cost, equal to the µUSD its settled hold
booked (the export row of its answering attempt) — for a paid answer ("This answer
cost"), a free one ("Free tier" with the list-price equivalent), streamed and not;
``/cost off`` removes it. Through the bot built by create_app and the provider fakes."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from budget.policy.money import usd
from tests.support.harness import bot_environment, paid_only_environment
from tests.support.inprocess import AppFactory
from tests.support.providers import FakeProviders
from tests.support.telegram import FakeTelegram

USER = 801


async def _send(tg: FakeTelegram, text: str) -> str:
    mark = tg.mark()
    tg.inject_message(USER, text)
    [reply] = await tg.wait_sent(USER, since=mark, timeout=20)
    return reply.text


def _last_hold(db: Path) -> tuple[int, int | None, str]:
    """(actual µUSD, list µUSD, model) of the newest settled hold."""
    with sqlite3.connect(db) as conn:
        row = conn.execute(
            "SELECT actual_musd, list_actual_musd, model FROM budget_holds"
            " WHERE state = 'settled' ORDER BY granted_at DESC LIMIT 1"
        ).fetchone()
    return int(row[0]), None if row[1] is None else int(row[1]), str(row[2])


async def test_paid_answers_streamed_and_not_end_with_their_settled_cost(
    app_factory: AppFactory,
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
    tmp_path: Path,
) -> None:
    db = tmp_path / "paid.db"
    env = paid_only_environment(
        fake_telegram, fake_providers, db, {"prompt_tokens": 1234, "completion_tokens": 567}
    )
    bot = app_factory(env=env)
    await bot.start()
    assert "off" in await _send(fake_telegram, "/cost")
    assert "now ends with what it cost" in await _send(fake_telegram, "/cost on")
    text = await _send(fake_telegram, "what is a kopek?")
    actual, _, _ = _last_hold(db)
    assert actual > 0
    assert text.startswith("echo: what is a kopek?")
    assert text.endswith(f"💰 This answer cost {usd(actual)}.")
    assert "no longer" in await _send(fake_telegram, "/cost off")
    assert "💰" not in await _send(fake_telegram, "and a rouble?")
    assert await bot.stop() == 0

    streamed = app_factory(env={**env, "STREAM_MODE_PRIVATE": "draft"})
    await streamed.start()
    await _send(fake_telegram, "/cost on")
    text = await _send(fake_telegram, "tell me about the rouble")
    actual, _, _ = _last_hold(db)
    assert text.endswith(f"💰 This answer cost {usd(actual)}.")
    assert await streamed.stop() == 0


async def test_free_answers_show_the_free_tier_with_its_list_price(
    app_factory: AppFactory,
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
    tmp_path: Path,
) -> None:
    db = tmp_path / "free.db"
    env = bot_environment(
        telegram=fake_telegram,
        database_path=db,
        provider_base_urls={"groq": fake_providers.base_urls["groq"]},
        extra={"STREAM_MODE_PRIVATE": "draft"},
    )
    bot = app_factory(env=env)
    await bot.start()
    await _send(fake_telegram, "/cost on")
    text = await _send(fake_telegram, "hello there")
    actual, listed, _ = _last_hold(db)
    assert actual == 0 and listed is not None and listed > 0
    assert text.endswith(f"💰 Free tier: {usd(listed)} at list prices.")
    assert await bot.stop() == 0
