"""The money promise in the cascade: provider lies about usage, errors inside
a 200, empty completions, 402, Retry-After clamping, oversized answers, calibration and
zero overshoot on the real ledger."""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from budget.config import LedgerConfig
from budget.errors import HoldRefused
from budget.ledger import Ledger
from budget.pricing.tokens import input_bound
from budget.storage.tables import create_schema
from budget.types import Level, Origin, RefusalReason, Usage, Window
from llm.cascade.cascade import MAX_CHARS_PER_TOKEN
from llm.errors import AllProvidersFailed, EmptyCompletion, ProviderRejected
from llm.providers.ratelimits import parse_retry_after_s
from llm.types import LLMRequest, Message
from tests.llm.test_llm_budget import real_card
from tests.llm.test_llm_cascade import COOLDOWN, Harness, ask, key
from tests.support.clocks import ManualClock
from tests.support.ledger import FakeLedger, FakePrices
from tests.support.providers import FakeProviders


@pytest.fixture
async def make(fake: FakeProviders, ledger: FakeLedger, clock: ManualClock) -> AsyncIterator[Any]:
    """``make(names, **config) -> Harness``; cascades closed afterwards."""
    made: list[Harness] = []

    def build(names: Sequence[str], **config: Any) -> Harness:
        h = Harness(fake, ledger, clock, names, **config)
        made.append(h)
        return h

    yield build
    for h in made:
        await h.cascade.aclose()


def anomalies(h: Harness, provider: str, kind: str) -> float:
    """The usage-anomaly counter of ``provider``/``kind``."""
    value = h.registry.get_sample_value(
        "kopek_llm_usage_anomalies_total", {"provider": provider, "kind": kind}
    )
    return value or 0.0


# -- errors inside a 200 -------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "reason"),
    [
        (429, "rate_limited"),
        (502, "unavailable"),
        (503, "unavailable"),
        (401, "auth"),
        (403, "auth"),
    ],
)
async def test_error_in_200_is_classified_like_its_status(
    make: Any, fake: FakeProviders, ledger: FakeLedger, code: int, reason: str
) -> None:
    """``{"error": {"code": N}}`` in a 200 falls back exactly like HTTP N."""
    h = make(("groq", "mistral"))
    fake.script(key("groq"), {"error_in_200": code})
    done = await h.ask()
    assert done.provider == "mistral"
    assert done.fallbacks == (f"groq:{reason}",)
    assert h.cascade.is_enabled("groq") is (reason != "auth")


async def test_error_in_200_400_is_a_rejection(make: Any, fake: FakeProviders) -> None:
    """An error object with code 400 is our request's fault: no fallback."""
    h = make(("groq", "mistral"))
    fake.script(key("groq"), {"error_in_200": 400, "message": "invalid messages"})
    with pytest.raises(ProviderRejected):
        await h.ask()
    assert h.hits("mistral") == 0


async def test_error_in_200_without_usage_releases_the_hold(
    make: Any, fake: FakeProviders, ledger: FakeLedger
) -> None:
    """``{"error": {"code": 502, "message": "upstream overloaded"}}`` at the paid anchor:
    nothing was generated → the hold is released, 0 µUSD (was: 446 at the ceiling)."""
    h = make(("deepseek",))
    fake.script(key("deepseek"), {"error_in_200": 502, "message": "upstream overloaded"})
    with pytest.raises(AllProvidersFailed):
        await h.ask()
    [hold] = ledger.holds_for("deepseek")
    assert hold.state == "released"
    assert ledger.spent_musd == 0


async def test_no_choices_and_no_usage_releases(
    make: Any, fake: FakeProviders, ledger: FakeLedger
) -> None:
    """A 200 JSON body with neither choices nor usage: released, never the ceiling."""
    h = make(("deepseek",))
    fake.script(key("deepseek"), {"raw_body": {"id": "x", "object": "chat.completion"}})
    with pytest.raises(AllProvidersFailed):
        await h.ask()
    assert [x.state for x in ledger.holds_for("deepseek")] == ["released"]
    assert ledger.spent_musd == 0


@pytest.mark.parametrize(
    "step",
    [
        {"raw_body": {"id": "x", "usage": {"prompt_tokens": 100, "completion_tokens": 50}}},
        {"error_in_200": 502, "usage": {"prompt_tokens": 100, "completion_tokens": 50}},
    ],
)
async def test_usage_without_choices_is_settled_as_reported(
    make: Any, fake: FakeProviders, ledger: FakeLedger, prices: FakePrices, step: dict[str, Any]
) -> None:
    """Usage but no choices → settled at the reported usage (100 × 0.28 + 50 × 0.42)."""
    h = make(("deepseek",))
    fake.script(key("deepseek"), step)
    with pytest.raises(AllProvidersFailed):
        await h.ask()
    [hold] = ledger.holds_for("deepseek")
    assert hold.state == "settled"
    assert hold.usage == Usage(input_tokens=100, output_tokens=50)
    assert hold.actual_musd == 49


# -- unreadable and implausible usage ---------------------------------------------------


@pytest.mark.parametrize(
    "usage",
    [
        {"prompt_tokens": -100000, "completion_tokens": -100000},
        {"prompt_tokens": 12.5, "completion_tokens": 3},
        {"prompt_tokens": "many", "completion_tokens": 3},
        {"prompt_tokens": True, "completion_tokens": 3},
        {"prompt_tokens": None, "completion_tokens": None},
        {"completion_tokens": 3},
    ],
)
async def test_unreadable_usage_is_settled_at_the_ceiling(
    make: Any, fake: FakeProviders, ledger: FakeLedger, usage: dict[str, Any]
) -> None:
    """Usage that is not a set of non-negative integers counts as missing: the answer
    is delivered, the hold settled at its ceiling, flagged estimated, counted."""
    h = make(("deepseek",))
    fake.script(key("deepseek"), {"text": "an answer", "usage": usage})
    done = await h.ask()
    assert done.text == "an answer"
    [hold] = ledger.holds_for("deepseek")
    assert hold.estimated is True
    assert hold.actual_musd == hold.ticket.ceiling_musd > 0
    assert anomalies(h, "deepseek", "invalid") == 1


async def test_numeric_strings_are_coerced(
    make: Any, fake: FakeProviders, ledger: FakeLedger
) -> None:
    """``"12"`` and ``"3"`` are read as 12 and 3 (not an anomaly)."""
    h = make(("deepseek",))
    fake.script(key("deepseek"), {"usage": {"prompt_tokens": "12", "completion_tokens": "3"}})
    await h.ask()
    [hold] = ledger.holds_for("deepseek")
    assert hold.usage == Usage(input_tokens=12, output_tokens=3)
    assert hold.estimated is False
    assert hold.actual_musd == math.ceil(12 * 0.28 + 3 * 0.42)


async def test_missing_usage_with_an_answer_is_delivered_at_the_ceiling(
    make: Any, fake: FakeProviders, ledger: FakeLedger
) -> None:
    """Choices but no usage at all: delivered, settled at the ceiling (estimated)."""
    h = make(("deepseek",))
    body = {"choices": [{"message": {"content": "hi"}, "finish_reason": "stop"}]}
    fake.script(key("deepseek"), {"raw_body": body})
    done = await h.ask()
    assert done.text == "hi"
    [hold] = ledger.holds_for("deepseek")
    assert hold.estimated and hold.actual_musd == hold.ticket.ceiling_musd
    assert anomalies(h, "deepseek", "missing") == 1


async def test_implausible_usage_is_booked_at_the_ceiling_and_cools_the_key(
    make: Any, fake: FakeProviders, ledger: FakeLedger
) -> None:
    """10¹² reported tokens (more than the model's context window + max_tokens): booked
    at the ceiling, flagged, the paid key cooled down, admins told once (twice reported,
    one event)."""
    h = make(("mistral", "deepseek"))
    for _ in range(2):
        fake.script(key("deepseek"), {"prompt_tokens": 10**12, "completion_tokens": 5})
    fake.script(key("mistral"), {"status": 503}, {"status": 503})
    for _ in range(2):
        await h.ask()
    holds = ledger.holds_for("deepseek")
    assert [x.actual_musd == x.ticket.ceiling_musd and x.estimated for x in holds] == [True] * 2
    assert h.cascade.breaker.cooldown_remaining_s("deepseek") == pytest.approx(COOLDOWN)
    assert [e.kind for e in h.events if e.kind == "usage_anomaly"] == ["usage_anomaly"]
    assert anomalies(h, "deepseek", "implausible") == 2


@pytest.mark.parametrize(("name", "cooled"), [("groq", False), ("deepseek", True)])
async def test_output_above_max_tokens_is_billed_and_told_once_and_cools_a_paid_key(
    make: Any, fake: FakeProviders, ledger: FakeLedger, name: str, cooled: bool
) -> None:
    """A provider billing 1,000 output tokens for max_tokens 256: settled as billed,
    one admin event, counted; the key cooled down only when it is paid (a free key's
    cooldown would send its users to the paid anchor)."""
    h = make((name,))
    fake.script(key(name), {"completion_tokens": 1000, "prompt_tokens": 10})
    done = await h.ask(ask(max_tokens=256))
    assert done.provider == name
    remaining = h.cascade.breaker.cooldown_remaining_s(name)
    assert remaining == (pytest.approx(COOLDOWN) if cooled else 0)
    [event] = [e for e in h.events if e.kind == "usage_anomaly"]
    assert "1000" in event.detail and "256" in event.detail
    assert ("cooling down" in event.detail) is cooled
    assert anomalies(h, name, "output_over_max_tokens") == 1
    usage = ledger.holds_for(name)[0].usage
    assert usage is not None and (usage.input_tokens, usage.output_tokens) == (10, 1000)


# -- empty completions, 402 -------------------------------------------------------------------


@pytest.mark.parametrize(
    "step",
    [
        {"text": "", "finish_reason": "length", "completion_tokens": 256, "reasoning_tokens": 256},
        {"text": "   \n", "finish_reason": "stop", "completion_tokens": 3},
        {"text": "\u200b", "finish_reason": "length", "completion_tokens": 256},
    ],
)
async def test_empty_completion_is_a_billed_failed_attempt(
    make: Any, fake: FakeProviders, ledger: FakeLedger, step: dict[str, Any]
) -> None:
    """Blank content (a reasoning model spent max_tokens thinking): EmptyCompletion,
    the spend settled as reported (it was billed), never an answer."""
    h = make(("deepseek",))
    fake.script(key("deepseek"), {**step, "prompt_tokens": 20})
    with pytest.raises(EmptyCompletion) as info:
        await h.ask(ask(max_tokens=256))
    [hold] = ledger.holds_for("deepseek")
    assert hold.state == "settled" and not hold.estimated
    assert hold.usage is not None and hold.usage.output_tokens == step["completion_tokens"]
    assert info.value.cost_musd == hold.actual_musd > 0


@pytest.mark.parametrize(
    "step",
    [
        {"status": 402, "body": {"error": {"message": "Insufficient Balance", "type": "x"}}},
        {
            "status": 429,
            "body": {
                "error": {
                    "message": "You exceeded your current quota, please check your plan.",
                    "type": "insufficient_quota",
                }
            },
        },
        {"error_in_200": "insufficient_balance", "message": "balance is not enough"},
    ],
)
async def test_no_balance_disables_the_key_until_enabled(
    make: Any, fake: FakeProviders, step: dict[str, Any]
) -> None:
    """402 / a balance error in any body: the key is disabled like an auth failure,
    one notice, the cascade goes on without it; /providers enable brings it back."""
    h = make(("groq", "mistral"))
    fake.script(key("groq"), step)
    done = await h.ask()
    assert done.provider == "mistral" and done.fallbacks == ("groq:balance",)
    done = await h.ask()
    assert done.fallbacks == ("groq:disabled",)
    assert h.hits("groq") == 1
    assert [e.kind for e in h.events if e.kind.startswith("key_disabled")] == [
        "key_disabled_balance"
    ]
    assert h.cascade.enable("groq")
    assert (await h.ask()).provider == "groq"


# -- cooldowns ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("retry_after", "expected"),
    [("2592000", 3600.0), ("inf", COOLDOWN), ("nan", COOLDOWN), ("30", 30.0), ("0", 1.0)],
)
async def test_retry_after_is_obeyed_within_bounds(
    make: Any, fake: FakeProviders, retry_after: str, expected: float
) -> None:
    """Retry-After 30 days → COOLDOWN_MAX_SECONDS (3600); inf/nan → COOLDOWN_SECONDS;
    30 → 30 s (not 600); 0 → 1 s."""
    h = make(("groq", "mistral"), cooldown_max_s=3600.0)
    fake.script(key("groq"), {"status": 429, "retry_after": retry_after})
    assert (await h.ask()).provider == "mistral"
    assert h.cascade.breaker.cooldown_remaining_s("groq") == pytest.approx(expected)
    parked = [e for e in h.events if e.kind == "key_parked"]
    assert len(parked) == (1 if expected >= 3600 else 0)


async def test_a_later_429_never_shortens_a_cooldown(
    make: Any, fake: FakeProviders, clock: ManualClock
) -> None:
    """Open 3600 s; 100 s later a half-open trial is impossible, and a 429 with
    Retry-After 5 recorded then keeps the longer end."""
    h = make(("groq", "mistral"))
    fake.script(key("groq"), {"status": 429, "retry_after": "2592000"})
    await h.ask()
    end = h.cascade.breaker.open_until("groq")
    clock.advance(100)
    assert h.cascade.breaker.record_rate_limited("groq", 5.0) == end


def test_retry_after_parsing_rejects_non_finite() -> None:
    """inf, nan and 1e400 are not a wait; 30 days is (clamped later)."""
    assert parse_retry_after_s("inf") is None
    assert parse_retry_after_s("nan") is None
    assert parse_retry_after_s("1e400") is None
    assert parse_retry_after_s("-5") is None
    assert parse_retry_after_s("2592000") == 2_592_000.0


# -- oversized answers, calibration -----------------------------------------------------------


async def test_oversized_answer_is_cut(make: Any, fake: FakeProviders) -> None:
    """~300 KB claiming 1,024 tokens: cut to max_tokens × 8 characters, flagged."""
    h = make(("groq",))
    fake.script(key("groq"), {"text": "x" * 300_000, "completion_tokens": 256})
    done = await h.ask(ask(max_tokens=256))
    assert done.cut is True
    assert len(done.text) == 256 * MAX_CHARS_PER_TOKEN


async def test_estimate_is_calibrated_from_reported_usage(
    make: Any, fake: FakeProviders, ledger: FakeLedger
) -> None:
    """The fake bills 3× what we count: after 3 samples the held estimate is
    counted × 3 × 1.1 (never above the provable bound); the ratio is persisted."""
    h = make(("deepseek",))
    request = ask("q" * 40)  # counted 14 tokens, bound 72
    counted = 14
    fake.default(key("deepseek"), {"prompt_tokens": 3 * counted, "completion_tokens": 5})
    for i in range(4):
        await h.ask(
            LLMRequest(request.messages, max_tokens=64, fingerprint=f"f{i}")  # new request
        )
    holds = ledger.holds_for("deepseek")
    assert [x.input_tokens for x in holds] == [14, 14, 14, math.ceil(14 * 3 * 1.1)]
    assert ledger.calibrations[("deepseek", "deepseek-chat")] == (3_000_000, 4)
    assert all(x.input_bound_tokens == input_bound(request.messages) for x in holds)


# -- the scenario on the real ledger --------------------------------------------------


CHAT_SYSTEM = (
    "You are Kopek, a concise and helpful assistant in a Telegram chat. "
    "Answer in the language of the user's message. Use Markdown sparingly."
)


@pytest.fixture
async def limited_ledger(tmp_path: Path) -> AsyncIterator[tuple[Ledger, ManualClock]]:
    """The real SQLite ledger, shipped card, global day limit 5,000 µUSD."""
    clock = ManualClock(datetime(2026, 1, 14, 12, 0, tzinfo=UTC))
    path = tmp_path / "ledger.db"
    create_schema(path)
    config = LedgerConfig(
        global_daily_musd=5_000,
        max_call_s=5.0,
        hold_ttl_s=60.0,
        user_max_inflight=10,
        user_max_per_minute=1000,
        auto_kill_fraction=Decimal(0),  # the burn-rate switch would stop the test early
    )
    ledger = Ledger.open(f"sqlite+aiosqlite:///{path}", config, real_card(), clock)
    await ledger.start(run_sweeper=False)
    try:
        yield ledger, clock
    finally:
        await ledger.close()


@pytest.mark.parametrize("completion_tokens", [None, 1000])
async def test_sixty_users_never_overshoot_the_global_limit(
    fake: FakeProviders,
    limited_ledger: tuple[Ledger, ManualClock],
    completion_tokens: int | None,
) -> None:
    """DeepSeek only, global day 5,000 µUSD, 60 users at once; the provider reports
    prompt_tokens 120 where we count far fewer (was: 5,204 µUSD settled). With
    max_tokens honoured the settled spend stays ≤ 5,000; a provider billing 1,000
    output tokens whatever max_tokens was is flagged whenever it exceeds it."""
    ledger, clock = limited_ledger
    h = Harness(fake, ledger, clock, ("deepseek",), global_max_inflight_calls=60)
    # the fake bills min(max_tokens, 1,024) output tokens for 4,096 characters:
    # every call uses its whole max_tokens, as the worst honest provider would
    step: dict[str, Any] = {"prompt_tokens": 120, "delay_s": 0.05, "text": "y" * 4096}
    if completion_tokens is not None:
        step["completion_tokens"] = completion_tokens
    fake.default(key("deepseek"), step)

    refusals: list[RefusalReason] = []

    async def user(uid: int) -> None:
        op = await ledger.begin_operation(uid, Origin.CHAT)
        try:
            messages = (Message("system", CHAT_SYSTEM), Message("user", f"Question {uid}?"))
            await h.cascade.complete(op, LLMRequest(messages, max_tokens=1024))
        except HoldRefused as refused:  # expected once the limit is reached
            refusals.append(refused.refusal.reason)
        finally:
            await ledger.end_operation(op)

    try:
        await asyncio.gather(*(user(uid) for uid in range(1, 61)))
    finally:
        await h.cascade.aclose()
    status = await ledger.status()
    [day] = [b for b in status.buckets if b.level is Level.GLOBAL and b.window is Window.DAY]
    settled = day.settled_musd
    assert status.outstanding_holds == 0
    calls = len(fake.requests)
    assert calls >= 5
    assert refusals and set(refusals) <= {RefusalReason.BUSY, RefusalReason.LIMIT}
    over = [r for r in fake.requests if (completion_tokens or 0) > r.body["max_tokens"]]
    if not over:
        assert settled <= 5_000
    else:
        assert anomalies(h, "deepseek", "output_over_max_tokens") == len(over)
        assert [e.kind for e in h.events if e.kind == "usage_anomaly"] == ["usage_anomaly"]
