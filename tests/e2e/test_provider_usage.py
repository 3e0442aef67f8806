"""What a provider sends, through the real bot (in process, against the provider fakes):
a stream running past ``max_tokens``, usage above Kopek's bound or beyond what the model
can do, self-contradictory usage, a usage block that is not final, and a long-context
price tier. Each is booked as the provider will bill it, or — when its word cannot be
used — at the ceiling, estimated, and counted."""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path
from typing import Any

from tests.support.inprocess import AppFactory, InProcessBot
from tests.support.providers import FakeProviders
from tests.support.telegram import FakeTelegram

ADMIN = 1
USER = 42
DEEPSEEK_KEY = "fake_deepseek_key"
GROQ_KEY = "fake_groq_key"


def only(
    bot_env: dict[str, str], fake_providers: FakeProviders, *names: str, **extra: str
) -> dict[str, str]:
    """The bot's environment with only ``names`` configured (one key each) and one admin."""
    env = {
        k: v
        for k, v in bot_env.items()
        if not k.startswith(("GROQ_", "MISTRAL_", "CEREBRAS_", "DEEPSEEK_"))
    }
    for name in names:
        env[f"{name.upper()}_API_KEY"] = f"fake_{name}_key"
        env[f"{name.upper()}_BASE_URL"] = fake_providers.base_urls[name]
    env["ADMIN_IDS"] = str(ADMIN)
    env.update(extra)
    return env


def db_of(env: dict[str, str]) -> Path:
    """The bot's SQLite file."""
    return Path(env["DATABASE_URL"].split("///", 1)[1])


def holds(env: dict[str, str]) -> list[dict[str, Any]]:
    """Every ledger hold, oldest first, as stored."""
    with contextlib.closing(sqlite3.connect(db_of(env))) as conn:
        conn.row_factory = sqlite3.Row
        rows = conn.execute("SELECT * FROM budget_holds ORDER BY granted_at").fetchall()
    return [dict(r) for r in rows]


def metric(bot: InProcessBot, name: str, labels: dict[str, str]) -> float:
    """One sample of the bot's Prometheus registry (0.0 when absent)."""
    assert bot.app is not None
    return bot.app.registry.get_sample_value(name, labels) or 0.0


def anomalies(bot: InProcessBot, provider: str, kind: str) -> float:
    """The usage-anomaly counter of ``provider``/``kind``."""
    return metric(bot, "kopek_llm_usage_anomalies_total", {"provider": provider, "kind": kind})


async def ask(telegram: FakeTelegram, text: str, user: int = USER) -> str:
    """``user`` writes ``text``; the bot's one reply."""
    mark = telegram.mark()
    telegram.inject_message(user, text)
    [reply] = await telegram.wait_sent(user, since=mark, timeout=30)
    return reply.text


async def started(app_factory: AppFactory, env: dict[str, str]) -> InProcessBot:
    """A started in-process bot."""
    bot = app_factory(env=env)
    await bot.start()
    return bot


def admin_notes(telegram: FakeTelegram) -> list[str]:
    """The texts the admin was sent."""
    return [m.text for m in telegram.sent_events(ADMIN)]


# -- long-context price tiers ------------------------------------------------------------

#: A gateway model with a long-context tier: 10 / 1 / 20 µUSD a token, and 30 / 3 / 40
#: for every token of a call whose prompt is above 300 tokens.
TIERED_CARD = (
    '{"deepseek:deepseek-chat": {"input": "10", "cached_input": "1", "output": "20",'
    ' "tiers": [{"above_input_tokens": 300, "input": "30", "cached_input": "3",'
    ' "output": "40"}]}}'
)


async def test_a_prompt_above_the_tier_threshold_is_held_and_settled_at_the_upper_rate(
    app_factory: AppFactory,
    bot_env: dict[str, str],
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
) -> None:
    """Hold and settle price the tier the prompt falls in: a short question is held and
    settled at 10 / 20 µUSD a token; a long one (held at more than 300 input tokens, and
    reported so) at 30 / 3 / 40, exactly — the ceiling rounded up as always. Before,
    every prompt was priced at the base rate."""
    env = only(
        bot_env, fake_providers, "deepseek", PRICE_OVERRIDES=TIERED_CARD, OPERATION_MAX_USD="1"
    )
    fake_providers.script(
        DEEPSEEK_KEY,
        {"text": "short answer", "prompt_tokens": 40, "completion_tokens": 5},
        {"text": "long answer", "prompt_tokens": 900, "cached_tokens": 100, "completion_tokens": 7},
    )
    bot = await started(app_factory, env)
    assert await ask(fake_telegram, "A short question?") == "short answer"
    assert await ask(fake_telegram, "A long question. " * 80) == "long answer"
    assert await bot.stop() == 0
    short, long = holds(env)
    assert short["input_tokens"] <= 300 < long["input_tokens"]
    assert short["ceiling_musd"] == short["input_tokens"] * 10 + short["max_tokens"] * 20
    assert short["actual_musd"] == 40 * 10 + 5 * 20
    assert long["ceiling_musd"] == long["input_tokens"] * 30 + long["max_tokens"] * 40
    assert long["actual_musd"] == 800 * 30 + 100 * 3 + 7 * 40
    assert long["estimated"] == 0
