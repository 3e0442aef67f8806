"""The cheap-model router, through the bot built by create_app and the provider fakes:
a one-line greeting goes to the small model, a 3,000-token code question to the main
one — each held and settled on the model it went to — and ``CHAT_ROUTER=off`` sends
the greeting to the main model; ``/budget`` counts the calls per model."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from tests.support.inprocess import AppFactory
from tests.support.providers import FakeProviders
from tests.support.telegram import FakeTelegram

USER = 701
SMALL, MAIN = "llama-3.1-8b-instant", "llama-3.3-70b-versatile"
#: a code question of about 3,000 tokens (raw count; ~3,750 with the safety factor)
CODE = "\n".join(f"def step_{n}(x):\n    return x * {n} + step_{n + 1}(x - 1)" for n in range(142))


async def _ask(tg: FakeTelegram, providers: FakeProviders, text: str) -> str:
    """The model the one provider request for ``text`` asked for."""
    before = len(providers.requests)
    mark = tg.mark()
    tg.inject_message(USER, text)
    await tg.wait_sent(USER, since=mark, timeout=20)
    [request] = providers.requests[before:]
    return str(request.body["model"])


def _held_models(env: dict[str, str]) -> list[str]:
    db = Path(env["DATABASE_URL"].split("///", 1)[1])
    with sqlite3.connect(db) as conn:
        rows = conn.execute(
            "SELECT model FROM budget_holds WHERE state = 'settled' ORDER BY granted_at"
        ).fetchall()
    return [r[0] for r in rows]


async def test_greeting_goes_small_code_goes_main_and_budget_counts_per_model(
    app_factory: AppFactory,
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
    bot_env: dict[str, str],
) -> None:
    bot_env.update({"ADMIN_IDS": str(USER), "CHAT_MAX_INPUT_TOKENS": "8000"})
    bot = app_factory()
    await bot.start()
    assert await _ask(fake_telegram, fake_providers, "hi there!") == SMALL
    question = f"Why does this recurse forever?\n```python\n{CODE}\n```"
    assert await _ask(fake_telegram, fake_providers, question) == MAIN
    assert _held_models(bot_env) == [SMALL, MAIN], "each hold is on the model asked"

    mark = fake_telegram.mark()
    fake_telegram.inject_message(USER, "/budget")
    [report] = await fake_telegram.wait_sent(USER, since=mark, timeout=20)
    assert f"calls by model: {SMALL} 1, {MAIN} 1" in report.text
    assert await bot.stop() == 0


async def test_routing_off_sends_the_greeting_to_the_main_model(
    app_factory: AppFactory,
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
    bot_env: dict[str, str],
) -> None:
    bot = app_factory(env={**bot_env, "CHAT_ROUTER": "off"})
    await bot.start()
    assert await _ask(fake_telegram, fake_providers, "hi there!") == MAIN
    assert await bot.stop() == 0
