"""The cascade's money side: the degradation ladder, exact cost from the real price
card, and the cascade on the real SQLite ledger."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from budget.config import LedgerConfig
from budget.errors import HoldRefused
from budget.ledger import Ledger
from budget.pricing.prices import PriceCard, ProviderModel
from budget.storage.tables import create_schema
from budget.types import Origin, RefusalReason
from llm.cascade.cascade import Cascade, CascadeConfig, CascadeEvent
from llm.cascade.factory import build_cascade
from llm.errors import AllProvidersFailed
from llm.types import LLMRequest, Message
from tests.llm.llm_helpers import KEYS, count_tokens, spec, tls
from tests.support.clocks import ManualClock
from tests.support.ledger import FakeLedger, FakePrices
from tests.support.providers import FakeProviders

FREE = ("groq", "groq2", "mistral", "cerebras")
LONG = (Message("system", "s" * 2000), Message("user", "u" * 2000))  # 1,008 counted tokens
SHORT = (Message("user", "u" * 40),)  # 14 counted tokens
#: a prompt for which a 10,000-token report is plausible (bound 4,032 tokens)
MID = (Message("user", "u" * 4000),)


def key(name: str) -> str:
    """The API key the fake sees for ``name``."""
    return KEYS[name][2]


async def make_cascade(
    fake: FakeProviders, ledger: Any, clock: ManualClock, names: tuple[str, ...]
) -> tuple[Cascade, list[CascadeEvent]]:
    """A cascade on the fake, events collected."""
    events: list[CascadeEvent] = []
    cascade = build_cascade(
        [spec(n, fake) for n in names],
        ledger=ledger,
        clock=clock,
        config=CascadeConfig(cooldown_s=600, timeout_s=5.0),
        token_counter=count_tokens,
        on_event=events.append,
        registry=CollectorRegistry(),
        tls=tls(),
    )
    return cascade, events


@pytest.fixture
async def anchor_only(
    fake: FakeProviders, prices: FakePrices, clock: ManualClock
) -> AsyncIterator[Any]:
    """``build(limit_musd) -> (cascade, ledger, events)`` with only DeepSeek configured."""
    made: list[Cascade] = []

    async def build(limit_musd: int) -> tuple[Cascade, FakeLedger, list[CascadeEvent]]:
        ledger = FakeLedger(prices, clock, global_limit_musd=limit_musd)
        cascade, events = await make_cascade(fake, ledger, clock, ("deepseek",))
        made.append(cascade)
        return cascade, ledger, events

    yield build
    for c in made:
        await c.aclose()


async def run(cascade: Cascade, ledger: Any, request: LLMRequest) -> Any:
    """One request in its own operation."""
    op = await ledger.begin_operation(1, Origin.CHAT)
    try:
        return await cascade.complete(op, request)
    finally:
        await ledger.end_operation(op)


async def test_ladder_step0_cheaper_messages(anchor_only: Any, fake: FakeProviders) -> None:
    """Full prompt refused (702 µUSD > 500) → the cheaper variant (424 µUSD) is sent."""
    cascade, _ledger, events = await anchor_only(500)
    done = await run(cascade, _ledger, LLMRequest(LONG, max_tokens=1000, cheaper_messages=SHORT))
    assert done.degraded == ("cheaper_messages",)
    sent = fake.requests_for(key=key("deepseek"))
    assert len(sent) == 1
    assert sent[0].body["messages"] == [{"role": "user", "content": SHORT[0].content}]
    assert sent[0].body["model"] == "deepseek-chat"
    assert [e.kind for e in events if e.kind.startswith("degraded")] == ["degraded"]


async def test_ladder_step1_cheap_model(anchor_only: Any, fake: FakeProviders) -> None:
    """Cheaper prompt still refused (424 > 200) → the anchor's cheap model (111 µUSD)."""
    cascade, ledger, _ = await anchor_only(200)
    done = await run(cascade, ledger, LLMRequest(LONG, max_tokens=1000, cheaper_messages=SHORT))
    assert done.degraded == ("cheaper_messages", "cheap_model")
    assert fake.requests_for(key=key("deepseek"))[0].body["model"] == "deepseek-chat-lite"
    assert cascade.stats().degraded_steps == {"cheaper_messages": 1, "cheap_model": 1}


async def test_ladder_step2_shrinks_max_tokens(anchor_only: Any, fake: FakeProviders) -> None:
    """No cheaper prompt, cheap model still too dear (its provable bound, 4,048 input
    tokens + 1,000 output = 394 µUSD > 350) → max_tokens shrunk to the largest whose
    *bound* fits the free 350 µUSD (605 tokens ≥ 128)."""
    cascade, ledger, _ = await anchor_only(350)
    done = await run(cascade, ledger, LLMRequest(LONG, max_tokens=1000))
    assert done.degraded == ("cheap_model", "shrunk_max_tokens")
    sent = fake.requests_for(key=key("deepseek"))[0].body
    assert sent["max_tokens"] == 605
    hold = ledger.holds_for("deepseek")[0]
    assert hold.ticket.ceiling_musd + hold.margin_musd <= 350


async def test_ladder_step3_refuses_without_a_request(
    anchor_only: Any, fake: FakeProviders
) -> None:
    """Nothing fits even shrunk (< 128 tokens) → the ledger's refusal, no provider request."""
    cascade, ledger, events = await anchor_only(10)
    with pytest.raises(HoldRefused) as info:
        await run(cascade, ledger, LLMRequest(LONG, max_tokens=1000, cheaper_messages=SHORT))
    assert info.value.refusal.reason is RefusalReason.LIMIT
    assert fake.requests == []
    assert not ledger.holds
    refused = [e for e in events if e.kind == "degraded_refused"]
    assert refused and refused[0].detail == "cheaper_messages → cheap_model → refused"


async def test_free_providers_pass_when_paid_would_be_refused(
    fake: FakeProviders, prices: FakePrices, clock: ManualClock
) -> None:
    """A spent global budget does not stop free providers (their hold is 0 µUSD)."""
    ledger = FakeLedger(prices, clock, global_limit_musd=0)
    cascade, _ = await make_cascade(fake, ledger, clock, ("mistral", "deepseek"))
    try:
        done = await run(cascade, ledger, LLMRequest(LONG, max_tokens=1000))
        assert done.provider == "mistral" and done.cost_musd == 0
    finally:
        await cascade.aclose()


def real_card() -> PriceCard:
    """The shipped price card: DeepSeek paid (shipped override), the rest free."""
    return PriceCard(
        [
            ProviderModel("deepseek", "deepseek-chat", "paid"),
            *(ProviderModel(n, "llama-3.3-70b-versatile", "free") for n in ("groq", "groq2")),
            ProviderModel("mistral", "mistral-small-latest", "free"),
            ProviderModel("cerebras", "llama-3.3-70b", "free"),
        ],
        max_call_seconds=5.0,
    )


async def test_cost_is_exact_at_cached_uncached_output_rates(
    fake: FakeProviders, clock: ManualClock
) -> None:
    """DeepSeek: 10,000 prompt tokens (8,000 cached) + 200 output are charged exactly at
    the real card's rates: 2,000 × in + 8,000 × cached + 200 × out."""
    card = real_card()
    rates = card.rates("deepseek", "deepseek-chat", clock.now())
    assert rates is not None
    expected = Decimal(2000) * rates.input + Decimal(8000) * rates.cached + 200 * rates.output
    assert expected == Decimal(868)  # $0.28 / $0.028 / $0.42 per 1M tokens
    ledger = FakeLedger(card, clock)
    cascade, _ = await make_cascade(fake, ledger, clock, ("deepseek",))
    fake.script(
        key("deepseek"), {"prompt_tokens": 10_000, "cached_tokens": 8_000, "completion_tokens": 200}
    )
    try:
        done = await run(cascade, ledger, LLMRequest(MID, max_tokens=300))
    finally:
        await cascade.aclose()
    assert done.cost_musd == 868
    assert done.usage.cached_input_tokens == 8_000


@pytest.fixture
async def real_ledger(tmp_path: Path) -> AsyncIterator[tuple[Ledger, ManualClock]]:
    """The real SQLite ledger with the shipped price card and a $1/day global limit."""
    clock = ManualClock(datetime(2026, 1, 14, 12, 0, tzinfo=UTC))
    path = tmp_path / "ledger.db"
    create_schema(path)
    config = LedgerConfig(global_daily_musd=1_000_000, max_call_s=5.0, hold_ttl_s=60.0)
    ledger = Ledger.open(f"sqlite+aiosqlite:///{path}", config, real_card(), clock)
    await ledger.start(run_sweeper=False)
    try:
        yield ledger, clock
    finally:
        await ledger.close()


async def test_cascade_on_the_real_ledger(
    fake: FakeProviders, real_ledger: tuple[Ledger, ManualClock]
) -> None:
    """Against budget.ledger.Ledger: free 429s are released, DeepSeek is settled at the
    exact cost, and nothing stays held."""
    ledger, clock = real_ledger
    cascade, _ = await make_cascade(fake, ledger, clock, (*FREE, "deepseek"))
    for name in FREE:
        fake.script(key(name), {"status": 429})
    fake.script(
        key("deepseek"), {"prompt_tokens": 10_000, "cached_tokens": 8_000, "completion_tokens": 200}
    )
    try:
        done = await run(cascade, ledger, LLMRequest(MID, max_tokens=300))
    finally:
        await cascade.aclose()
    assert done.provider == "deepseek" and done.cost_musd == 868
    status = await ledger.status()
    assert status.outstanding_holds == 0
    assert status.spend_by_origin_musd.get("chat") == 868


async def test_all_down_on_the_real_ledger_charges_nothing(
    fake: FakeProviders, real_ledger: tuple[Ledger, ManualClock]
) -> None:
    """Every provider 503 → AllProvidersFailed; the real ledger holds and spent nothing."""
    ledger, clock = real_ledger
    cascade, _ = await make_cascade(fake, ledger, clock, (*FREE, "deepseek"))
    for name in (*FREE, "deepseek"):
        fake.script(key(name), {"status": 503})
    try:
        with pytest.raises(AllProvidersFailed):
            await run(cascade, ledger, LLMRequest(SHORT, max_tokens=300))
    finally:
        await cascade.aclose()
    status = await ledger.status()
    assert status.outstanding_holds == 0 and status.exposure_musd == 0
    assert sum(status.spend_by_origin_musd.values()) == 0
