"""What a provider sends, through the real bot (in process, against the provider fakes):
a stream running past ``max_tokens``, usage above Kopek's bound or beyond what the model
can do, self-contradictory usage, a usage block that is not final, and a long-context
price tier. Each is booked as the provider will bill it, or — when its word cannot be
used — at the ceiling, estimated, and counted."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from budget.pricing.prices import PriceCard, ProviderModel
from budget.pricing.tokens import TokenCounter
from budget.types import Usage
from llm.types import Message
from tests.e2e.test_stream import until
from tests.support.inprocess import AppFactory, InProcessBot
from tests.support.providers import FakeProviders
from tests.support.telegram import FakeTelegram

ADMIN = 1
USER = 42
DEEPSEEK_KEY = "fake_deepseek_key"
GROQ_KEY = "fake_groq_key"
#: Streamed answers in a private chat (drafts), as ``tests/e2e/test_stream.py`` has them.
STREAMING = {"STREAM_MODE_PRIVATE": "draft", "STREAM_DRAFT_INTERVAL_MS": "200"}


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


# -- self-contradictory usage --------------------------------------------------------------


@pytest.mark.parametrize(
    "usage",
    [
        {
            "prompt_tokens": 100,
            "completion_tokens": 10,
            "prompt_tokens_details": {"cached_tokens": 5_000},
            "completion_tokens_details": {"reasoning_tokens": 900},
        },
        {"prompt_tokens": 100, "completion_tokens": 10, "prompt_cache_hit_tokens": 101},
        {
            "prompt_tokens": 100,
            "completion_tokens": 10,
            "prompt_cache_hit_tokens": 20,
            "prompt_cache_miss_tokens": 20,
        },
        {
            "prompt_tokens": 100,
            "completion_tokens": 10,
            "completion_tokens_details": {"reasoning_tokens": 11},
        },
    ],
    ids=["cached_and_reasoning", "cache_hits_over_prompt", "hits_plus_misses", "reasoning"],
)
@pytest.mark.parametrize("streamed", [False, True], ids=["one_piece", "streamed"])
async def test_self_contradictory_usage_is_settled_at_the_ceiling_and_counted(
    usage: dict[str, Any],
    streamed: bool,
    app_factory: AppFactory,
    bot_env: dict[str, str],
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
) -> None:
    """Cached tokens above the prompt, cache hits and misses that do not add up to it,
    reasoning above the completion: the report contradicts itself, so it is not read at
    its cheapest (5,000 cached of 100 prompt tokens was booked as 100 cached, 30 µUSD):
    the answer is delivered, the hold settled at its ceiling, estimated, and an
    ``inconsistent`` usage anomaly counted."""
    env = only(bot_env, fake_providers, "deepseek", **(STREAMING if streamed else {}))
    fake_providers.script(DEEPSEEK_KEY, {"text": "an answer", "usage": usage})
    bot = await started(app_factory, env)
    assert await ask(fake_telegram, "A question?") == "an answer"
    assert anomalies(bot, "deepseek", "inconsistent") == 1
    assert await bot.stop() == 0
    [hold] = holds(env)
    assert hold["estimated"] == 1
    assert (hold["usage_input"], hold["usage_output"]) == (hold["input_tokens"], hold["max_tokens"])
    # the ceiling's tokens, priced as an actual (rounded to nearest, the ceiling up)
    assert 0 <= hold["ceiling_musd"] - hold["actual_musd"] <= 1 and hold["actual_musd"] > 0


# -- usage above Kopek's bound ----------------------------------------------------------------


def calibration(env: dict[str, str], provider: str) -> tuple[int, int] | None:
    """The stored (ratio ppm, samples) of ``provider``'s model, ``None`` when none."""
    with contextlib.closing(sqlite3.connect(db_of(env))) as conn:
        row = conn.execute(
            "SELECT ratio_ppm, samples FROM budget_calibration WHERE provider = ?", (provider,)
        ).fetchone()
    return None if row is None else (int(row[0]), int(row[1]))


async def test_a_free_key_over_reporting_its_input_is_booked_as_reported_and_not_cooled(
    app_factory: AppFactory,
    bot_env: dict[str, str],
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
) -> None:
    """A free Groq answer reporting 20,000 prompt tokens for a short prompt (far above
    Kopek's provable bound, within the model's 131,072-token context window): what a
    provider reports is what it bills, so it is booked as reported (not estimated; its
    list-price equivalent that of 20,000 tokens), flagged ``input_over_bound``, admins
    told once (it happens twice), the model's calibration raised — and the free key is
    not cooled: the next question is answered by Groq again, nobody is sent to the paid
    anchor. Before, it was settled at the ceiling, estimated, and Groq cooled 600 s."""
    env = only(bot_env, fake_providers, "groq", "deepseek")
    for _ in range(2):
        fake_providers.script(GROQ_KEY, {"text": "free answer", "prompt_tokens": 20_000})
    bot = await started(app_factory, env)
    assert await ask(fake_telegram, "Hi there") == "free answer"
    assert await ask(fake_telegram, "Hi again") == "free answer"
    assert len(fake_providers.requests_for(key=GROQ_KEY)) == 2
    assert not fake_providers.requests_for(key=DEEPSEEK_KEY)
    assert anomalies(bot, "groq", "input_over_bound") == 2
    assert metric(bot, "kopek_llm_cooldowns_total", {"provider": "groq"}) == 0
    await until(lambda: len(admin_notes(fake_telegram)) >= 1)
    assert await bot.stop() == 0
    [note] = admin_notes(fake_telegram)
    assert "groq" in note and "20000" in note and "not cooled" in note
    first, second = holds(env)
    # a greeting goes to the small model (llm/router.py): priced as the model it went to
    models = ("llama-3.3-70b-versatile", "llama-3.1-8b-instant")
    card = PriceCard([ProviderModel("groq", m, "free") for m in models])
    for hold in (first, second):
        assert (hold["usage_input"], hold["estimated"], hold["actual_musd"]) == (20_000, 0, 0)
        billed = Usage(20_000, 0, hold["usage_output"])
        at = datetime.fromtimestamp(hold["granted_at"], UTC)
        assert hold["model"] == "llama-3.1-8b-instant"
        listed = card.list_actual_musd("groq", hold["model"], billed, at)
        assert hold["list_actual_musd"] == listed and listed is not None and listed >= 1_000
    ratio = calibration(env, "groq")
    assert ratio is not None and ratio[0] > 10_000_000 and ratio[1] == 2  # × 10+, 2 samples


async def test_a_paid_key_over_reporting_is_booked_as_reported_and_cooled(
    app_factory: AppFactory,
    bot_env: dict[str, str],
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
) -> None:
    """The paid anchor reporting 20,000 prompt tokens for a short prompt: booked as
    reported (20,000 × 0.28 + output × 0.42 µUSD), flagged, admins told — and, being
    paid, its key cooled down (COOLDOWN_SECONDS)."""
    env = only(bot_env, fake_providers, "deepseek", OPERATION_MAX_USD="1")
    fake_providers.script(
        DEEPSEEK_KEY, {"text": "paid answer", "prompt_tokens": 20_000, "completion_tokens": 5}
    )
    bot = await started(app_factory, env)
    assert await ask(fake_telegram, "Hi there") == "paid answer"
    assert anomalies(bot, "deepseek", "input_over_bound") == 1
    assert metric(bot, "kopek_llm_cooldowns_total", {"provider": "deepseek"}) == 1
    await until(lambda: any("does not trust" in t for t in admin_notes(fake_telegram)))
    assert await bot.stop() == 0
    [hold] = holds(env)
    assert (hold["usage_input"], hold["estimated"]) == (20_000, 0)
    assert hold["actual_musd"] == round(20_000 * 0.28 + 5 * 0.42)
    [note] = [t for t in admin_notes(fake_telegram) if "does not trust" in t]
    assert "cooling down" in note


async def test_usage_beyond_what_the_model_can_do_is_garbage_at_the_ceiling(
    app_factory: AppFactory,
    bot_env: dict[str, str],
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
) -> None:
    """10⁹ prompt tokens — more than the model's context window plus the max_tokens sent:
    no provider can bill that, so it is garbage: settled at the ceiling, estimated,
    flagged ``implausible``, admins told; calibration untouched; the free key not cooled."""
    env = only(bot_env, fake_providers, "groq")
    fake_providers.script(GROQ_KEY, {"text": "answer", "prompt_tokens": 10**9})
    bot = await started(app_factory, env)
    assert await ask(fake_telegram, "Hi there") == "answer"
    assert anomalies(bot, "groq", "implausible") == 1
    assert metric(bot, "kopek_llm_cooldowns_total", {"provider": "groq"}) == 0
    await until(lambda: len(admin_notes(fake_telegram)) >= 1)
    assert await bot.stop() == 0
    [hold] = holds(env)
    assert hold["estimated"] == 1
    assert (hold["usage_input"], hold["usage_output"]) == (hold["input_tokens"], hold["max_tokens"])
    assert calibration(env, "groq") is None


# -- a stream past max_tokens ------------------------------------------------------------------

CUT_NOTE = "✂️ The answer was longer than its limit allows and was cut here."


async def test_a_stream_past_max_tokens_is_closed_and_booked_as_received(
    app_factory: AppFactory,
    bot_env: dict[str, str],
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
) -> None:
    """DeepSeek ignores max_tokens (100) while streaming and would send ~3,000 words for
    half a minute: the bot closes the stream as soon as the text received is certainly
    past 100 tokens (well within the 8 s deadline; the provider stops generating), books
    what it received as counted — above max_tokens, never cut down to it —, delivers the
    text with the cut note, flags ``output_over_max_tokens``, cools the paid key and tells
    admins once (it happens twice). Before, it read on until PROVIDER_TIMEOUT_SECONDS
    and settled max_tokens."""
    env = only(
        bot_env,
        fake_providers,
        "deepseek",
        CHAT_MAX_OUTPUT_TOKENS="100",
        PROVIDER_TIMEOUT_SECONDS="8",
        **STREAMING,
    )
    words = " ".join(f"word{i}" for i in range(3_000))
    for _ in range(2):
        fake_providers.script(DEEPSEEK_KEY, {"text": words, "interval_s": 0.002, "no_usage": True})
    bot = await started(app_factory, env)
    counter = TokenCounter()
    for n in range(2):
        loop = asyncio.get_running_loop()
        asked = loop.time()
        answer = await ask(fake_telegram, f"Write a lot, please ({n})")
        assert loop.time() - asked < 6
        stream = fake_providers.streams[n]
        assert stream.closed_at is not None and not stream.finished
        assert stream.chunks_sent < 1_000  # of ~4,000
        text, _, note = answer.rpartition("\n\n")
        assert note == CUT_NOTE and words.startswith(text) and len(text) > 400
        hold = holds(env)[n]
        assert hold["estimated"] == 1 and hold["max_tokens"] == 100
        received = counter.messages([Message("assistant", text)])
        assert hold["usage_output"] == received > 100
    assert anomalies(bot, "deepseek", "output_over_max_tokens") == 2
    assert metric(bot, "kopek_llm_cooldowns_total", {"provider": "deepseek"}) >= 1
    await until(lambda: any("does not trust" in t for t in admin_notes(fake_telegram)))
    assert await bot.stop() == 0
    [note] = [t for t in admin_notes(fake_telegram) if "does not trust" in t]
    assert "max_tokens 100" in note and "cooling down" in note


async def test_a_stream_at_max_tokens_by_another_tokenizer_is_read_to_its_end(
    app_factory: AppFactory,
    bot_env: dict[str, str],
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
) -> None:
    """A provider honouring max_tokens 100 whose tokenizer is coarser than o200k: its
    100 tokens are 120 by Kopek's count — within the tokenizers' head-room
    (TOKEN_SAFETY_FACTOR), so not certainly past max_tokens: the stream is read to its
    finish, booked as reported, no anomaly, no cooldown."""
    env = only(bot_env, fake_providers, "deepseek", CHAT_MAX_OUTPUT_TOKENS="100", **STREAMING)
    text = " ".join(f"word{i}" for i in range(60))
    assert TokenCounter().raw_text(text) == 120
    fake_providers.script(
        DEEPSEEK_KEY,
        {"text": text, "interval_s": 0.002, "prompt_tokens": 30, "completion_tokens": 100},
    )
    bot = await started(app_factory, env)
    assert await ask(fake_telegram, "Write exactly enough") == text
    assert fake_providers.streams[0].finished
    assert anomalies(bot, "deepseek", "output_over_max_tokens") == 0
    assert metric(bot, "kopek_llm_cooldowns_total", {"provider": "deepseek"}) == 0
    assert await bot.stop() == 0
    [hold] = holds(env)
    assert (hold["usage_input"], hold["usage_output"], hold["estimated"]) == (30, 100, 0)


# -- usage that is not final -------------------------------------------------------------------


@pytest.mark.parametrize("ending", ["cut", "finished"])
async def test_an_early_usage_block_is_not_taken_as_final(
    ending: str,
    app_factory: AppFactory,
    bot_env: dict[str, str],
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
) -> None:
    """A gateway sends a usage block with 0 output tokens on the first chunk; then the
    text, then either a dropped connection (no finish chunk) or a proper finish without
    another report. That block is not final — the stream did not end properly, or its
    output is below what was received — so the text received is counted and booked
    (estimated), not 0 output tokens."""
    env = only(bot_env, fake_providers, "deepseek", **STREAMING)
    text = " ".join(f"token{i}" for i in range(60))
    step: dict[str, Any] = {
        "text": text,
        "interval_s": 0.03,
        "early_usage": {"prompt_tokens": 40, "completion_tokens": 0, "total_tokens": 40},
        "no_usage": True,
    }
    if ending == "cut":
        step["cut_after"] = 50
    fake_providers.script(DEEPSEEK_KEY, step)
    bot = await started(app_factory, env)
    answer = await ask(fake_telegram, "Tell me something")
    received = answer.partition("\n\n")[0]
    assert text.startswith(received) and len(received) > 100
    assert await bot.stop() == 0
    [hold] = holds(env)
    assert hold["estimated"] == 1
    assert hold["usage_output"] == TokenCounter().messages([Message("assistant", received)])
    assert hold["usage_input"] == hold["input_tokens"]
