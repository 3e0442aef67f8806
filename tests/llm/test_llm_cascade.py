"""The free-first cascade against the loopback fake providers and the in-memory ledger."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from dataclasses import replace
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from budget.errors import HoldRefused
from budget.protocol import LedgerPort, OperationTicket
from budget.types import Origin, RefusalReason
from llm.cascade.cascade import Cascade, CascadeConfig, CascadeEvent
from llm.cascade.factory import build_cascade
from llm.errors import AllProvidersFailed, ContextTooLong, ProviderRejected
from llm.types import LLMRequest, Message, Priority
from tests.llm.llm_helpers import KEYS, count_tokens, spec, tls
from tests.support.clocks import ManualClock
from tests.support.ledger import FakeLedger
from tests.support.providers import FakeProviders

ALL = ("groq", "groq2", "mistral", "cerebras", "deepseek")
COOLDOWN = 600.0


def key(name: str) -> str:
    """The API key the fake sees for provider key ``name``."""
    return KEYS[name][2]


def ask(text: str = "Hello there", *, max_tokens: int = 256, **kw: Any) -> LLMRequest:
    """A one-message request."""
    return LLMRequest(messages=(Message("user", text),), max_tokens=max_tokens, **kw)


class Harness:
    """A cascade on the fake with its ledger, clock, events and registry."""

    def __init__(
        self,
        fake: FakeProviders,
        ledger: LedgerPort,
        clock: ManualClock,
        names: Sequence[str] = ALL,
        **config: Any,
    ) -> None:
        self.fake = fake
        self.ledger = ledger
        self.clock = clock
        self.events: list[CascadeEvent] = []
        self.registry = CollectorRegistry()
        # a real deadline only where a test sets one: on a loaded machine (the suite on
        # two workers) a fake answer can take over 5 s, and a 400 would become a timeout
        cfg = CascadeConfig(**{"cooldown_s": COOLDOWN, "timeout_s": 60.0, **config})
        self.cascade: Cascade = build_cascade(
            [spec(n, fake) for n in names],
            ledger=ledger,
            clock=clock,
            config=cfg,
            token_counter=count_tokens,
            on_event=self.events.append,
            registry=self.registry,
            tls=tls(),
        )
        self._ops = 0

    async def op(self) -> OperationTicket:
        """A fresh chat operation."""
        self._ops += 1
        return await self.ledger.begin_operation(self._ops, Origin.CHAT)

    async def ask(self, request: LLMRequest | None = None) -> Any:
        """Run one request in a fresh operation."""
        op = await self.op()
        try:
            return await self.cascade.complete(op, request or ask(f"q{self._ops}"))
        finally:
            await self.ledger.end_operation(op)

    def hits(self, name: str) -> int:
        """Requests the fake received with ``name``'s key."""
        return len(self.fake.requests_for(key=key(name)))


@pytest.fixture
async def make(fake: FakeProviders, ledger: FakeLedger, clock: ManualClock) -> AsyncIterator[Any]:
    """``make(names=ALL, **config) -> Harness``; cascades closed afterwards."""
    made: list[Harness] = []

    def build(names: Sequence[str] = ALL, **config: Any) -> Harness:
        h = Harness(fake, ledger, clock, names, **config)
        made.append(h)
        return h

    yield build
    for h in made:
        await h.cascade.aclose()


async def test_first_free_provider_answers_at_zero_cost(make: Any, ledger: FakeLedger) -> None:
    """With everything healthy Groq key 1 answers, free, one hold settled."""
    h = make()
    done = await h.ask()
    assert done.provider == "groq"
    assert done.paid is False and done.cost_musd == 0
    assert done.fallbacks == ()
    assert [x.state for x in ledger.holds.values()] == ["settled"]
    assert h.cascade.stats().calls == {"groq": 1}


async def test_groq_429_falls_back_then_skipped_then_half_open(
    make: Any, fake: FakeProviders, clock: ManualClock
) -> None:
    """Groq 429 → Mistral answers; Groq skipped without a request during the cooldown;
    after it one half-open trial goes to Groq and closes the circuit."""
    h = make(("groq", "mistral", "cerebras", "deepseek"))
    fake.script(key("groq"), {"status": 429})  # no Retry-After: COOLDOWN_SECONDS
    done = await h.ask()
    assert done.provider == "mistral"
    assert done.fallbacks == ("groq:rate_limited",)
    assert h.cascade.breaker.cooldown_remaining_s("groq") == pytest.approx(COOLDOWN)

    clock.advance(COOLDOWN - 1)
    done = await h.ask()
    assert done.provider == "mistral"
    assert done.fallbacks == ("groq:open",)
    assert h.hits("groq") == 1

    clock.advance(1)
    done = await h.ask()
    assert done.provider == "groq"
    assert h.hits("groq") == 2
    kinds = [(e.key, e.kind) for e in h.cascade.breaker.events]
    assert kinds == [("groq", "opened"), ("groq", "half_open"), ("groq", "closed")]
    assert h.cascade.stats().cooldowns_opened == {"groq": 1}
    assert h.cascade.stats().fallbacks == {"groq": {"rate_limited": 1}}


async def test_retry_after_longer_than_cooldown_wins(
    make: Any, fake: FakeProviders, clock: ManualClock
) -> None:
    """A Retry-After above COOLDOWN_SECONDS sets the cooldown."""
    h = make(("groq", "mistral"))
    fake.script(key("groq"), {"status": 429, "retry_after": "2m59.56s"})
    h.cascade.breaker.cooldown_s = 10.0
    await h.ask()
    assert h.cascade.breaker.cooldown_remaining_s("groq") == pytest.approx(179.56)


async def test_second_shorter_429_does_not_shorten_cooldown(make: Any, fake: FakeProviders) -> None:
    """Two concurrent requests both get a 429; the later, shorter Retry-After keeps
    the longer cooldown. Both reach Groq before either is answered, the longer first
    (gates: on a loaded machine the second request used to find the breaker already
    open and skip Groq)."""
    h = make(("groq", "mistral"), cooldown_s=5.0)
    fake.script(
        key("groq"),
        {"status": 429, "retry_after": "900", "gate": "long"},
        {"status": 429, "retry_after": "30", "gate": "short"},
    )
    asks = asyncio.gather(h.ask(), h.ask())
    for _ in range(1000):  # until both requests reached the fake (bounded)
        if h.hits("groq") == 2:
            break
        await asyncio.sleep(0.01)
    fake.open_gate("long")
    for _ in range(1000):  # until the long 429 opened the breaker (bounded)
        if h.cascade.breaker.cooldown_remaining_s("groq") > 30:
            break
        await asyncio.sleep(0.01)
    fake.open_gate("short")
    first, second = await asks
    assert {first.provider, second.provider} == {"mistral"}
    assert h.hits("groq") == 2
    assert h.cascade.breaker.cooldown_remaining_s("groq") == pytest.approx(900.0)
    opened = [e for e in h.cascade.breaker.events if e.kind in ("opened", "extended")]
    assert len(opened) == 1


async def test_auth_failure_disables_key_once_and_key2_answers(
    make: Any, fake: FakeProviders, clock: ManualClock
) -> None:
    """401 on Groq key 1 → key disabled, key 2 answers, admins told once; key 1 gets no
    request (even after the cooldown) until re-enabled."""
    h = make()
    fake.script(key("groq"), {"status": 401})
    done = await h.ask()
    assert done.provider == "groq2"
    assert done.fallbacks == ("groq:auth",)
    for _ in range(3):
        clock.advance(COOLDOWN * 2)
        assert (await h.ask()).provider == "groq2"
    assert h.hits("groq") == 1
    disabled = [e for e in h.events if e.kind == "key_disabled"]
    assert [(e.provider, e.detail) for e in disabled] == [("groq", "HTTP 401")]
    assert key("groq") not in repr(h.events)
    status = {s.name: s for s in h.cascade.provider_status()}
    assert status["groq"].enabled is False and status["groq2"].enabled is True

    assert h.cascade.enable("groq") is True
    assert h.cascade.enable("groq") is False
    assert (await h.ask()).provider == "groq"
    assert h.hits("groq") == 2


async def test_400_on_mistral_stops_without_fallback(
    make: Any, fake: FakeProviders, ledger: FakeLedger
) -> None:
    """400 on Mistral → ProviderRejected; Cerebras and DeepSeek get nothing; hold released."""
    h = make(("mistral", "cerebras", "deepseek"))
    fake.script(key("mistral"), {"status": 400, "body": {"message": "Invalid model"}})
    with pytest.raises(ProviderRejected) as info:
        await h.ask()
    assert info.value.provider == "mistral"
    assert h.hits("cerebras") == 0 and h.hits("deepseek") == 0
    assert [x.state for x in ledger.holds.values()] == ["released"]


async def test_all_free_rate_limited_paid_anchor_answers_and_counts(
    make: Any, fake: FakeProviders, ledger: FakeLedger
) -> None:
    """All free keys 429 → DeepSeek answers, counted as a paid-anchor call and charged."""
    h = make()
    for name in ("groq", "groq2", "mistral", "cerebras"):
        fake.script(key(name), {"status": 429})
    done = await h.ask()
    assert done.provider == "deepseek"
    assert done.paid is True
    assert done.cost_musd > 0
    assert done.fallbacks == tuple(
        f"{n}:rate_limited" for n in ("groq", "groq2", "mistral", "cerebras")
    )
    stats = h.cascade.stats()
    assert stats.paid_anchor_calls == 1
    assert [e.kind for e in h.events].count("paid_anchor_call") == 1
    assert h.registry.get_sample_value("kopek_llm_paid_anchor_calls_total") == 1.0
    assert ledger.spent_musd == done.cost_musd


async def test_all_providers_down_one_error_nothing_charged(
    make: Any, fake: FakeProviders, ledger: FakeLedger
) -> None:
    """Every provider 5xx → AllProvidersFailed with each failure; every hold released."""
    h = make()
    for name in ALL:
        fake.script(key(name), {"status": 503})
    with pytest.raises(AllProvidersFailed) as info:
        await h.ask()
    assert [e.provider for e in info.value.attempts] == list(ALL)
    assert len(ledger.holds) == 5
    assert all(x.state == "released" for x in ledger.holds.values())
    assert ledger.spent_musd == 0 and not ledger.outstanding


async def test_global_inflight_limit_holds_at_the_providers(make: Any, fake: FakeProviders) -> None:
    """20 concurrent requests with GLOBAL_MAX_INFLIGHT_CALLS=8: never more than 8 at once."""
    h = make(global_max_inflight_calls=8)
    fake.script(key("groq"), *[{"delay_s": 0.05} for _ in range(20)])
    results = await asyncio.gather(*(h.ask() for _ in range(20)))
    assert len(results) == 20
    assert fake.max_concurrent == 8
    assert h.cascade.slots.max_in_use == 8


async def test_trickle_past_deadline_is_cut_and_next_answers(
    make: Any, fake: FakeProviders, ledger: FakeLedger
) -> None:
    """A provider trickling bytes past PROVIDER_TIMEOUT_SECONDS is cut; the next answers;
    the cut attempt is settled as estimated (free: 0 µUSD)."""
    h = make(("groq", "mistral"), timeout_s=0.3)
    fake.script(key("groq"), {"trickle_s": 3.0})
    done = await h.ask()
    assert done.provider == "mistral"
    assert done.fallbacks == ("groq:unavailable",)
    groq_hold = ledger.holds_for("groq")[0]
    assert groq_hold.state == "settled" and groq_hold.estimated is True


async def test_paid_anchor_cut_is_settled_at_the_ceiling(
    make: Any, fake: FakeProviders, ledger: FakeLedger
) -> None:
    """An interrupted paid call with no reported usage is settled at its ceiling, estimated."""
    h = make(("deepseek",), timeout_s=0.3)
    fake.script(key("deepseek"), {"trickle_s": 3.0})
    with pytest.raises(AllProvidersFailed):
        await h.ask(ask("x" * 40, max_tokens=1000))
    hold = ledger.holds_for("deepseek")[0]
    assert hold.state == "settled" and hold.estimated
    assert hold.actual_musd == hold.ticket.ceiling_musd > 0


async def test_unknown_model_at_one_provider_falls_through(make: Any, fake: FakeProviders) -> None:
    """Groq answers 404 model_not_found (a retired model): Mistral answers instead."""
    h = make(("groq", "mistral"))
    body = {"error": {"message": "The model does not exist", "code": "model_not_found"}}
    fake.script(key("groq"), {"status": 404, "body": body})
    done = await h.ask()
    assert done.provider == "mistral"
    assert h.hits("groq") == 1


async def test_pacing_skips_groq_without_a_request(make: Any, fake: FakeProviders) -> None:
    """Groq's headers say 100 tokens remain → a 2,000-token request goes to Mistral
    without touching Groq."""
    h = make(("groq", "mistral", "cerebras", "deepseek"))
    fake.script(
        key("groq"),
        {"headers": {"x-ratelimit-remaining-tokens": "100", "x-ratelimit-reset-tokens": "7.66s"}},
    )
    assert (await h.ask()).provider == "groq"
    done = await h.ask(ask("big", max_tokens=2_000))
    assert done.provider == "mistral"
    assert done.fallbacks == ("groq:paced",)
    assert h.hits("groq") == 1
    cap = {c.provider: c for c in h.cascade.capacity()}
    assert cap["groq"].remaining_tokens is not None and cap["groq"].remaining_tokens <= 100
    assert cap["groq"].reset_at is not None


async def test_free_share_keeps_room_for_chat(make: Any, fake: FakeProviders) -> None:
    """Groq has 1,000 tokens left: a digest-style request allowed 0.8 of it skips Groq
    when it needs 900, while the same request at share 1.0 goes to Groq."""
    h = make(("groq", "mistral"))
    fake.script(
        key("groq"),
        {"headers": {"x-ratelimit-remaining-tokens": "1000", "x-ratelimit-reset-tokens": "30s"}},
    )
    assert (await h.ask()).provider == "groq"
    shared = replace(ask("digest", max_tokens=880), free_share=0.8)
    assert (await h.ask(shared)).provider == "mistral"
    whole = replace(ask("chat", max_tokens=880), free_share=1.0)
    assert (await h.ask(whole)).provider == "groq"


async def test_pacing_window_resets(make: Any, fake: FakeProviders, clock: ManualClock) -> None:
    """After the reset time the paced key is tried again."""
    h = make(("groq", "mistral"))
    fake.script(
        key("groq"),
        {"headers": {"x-ratelimit-remaining-tokens": "100", "x-ratelimit-reset-tokens": "7.66s"}},
    )
    await h.ask()
    clock.advance(7.66)
    assert (await h.ask(ask("big", max_tokens=2_000))).provider == "groq"


async def test_paid_not_allowed_skips_the_anchor(make: Any, fake: FakeProviders) -> None:
    """allow_paid=False (a digest that can wait) never reaches DeepSeek."""
    h = make(("mistral", "deepseek"))
    fake.script(key("mistral"), {"status": 429})
    with pytest.raises(AllProvidersFailed) as info:
        await h.ask(ask(allow_paid=False, priority=Priority.DIGEST))
    assert ("deepseek", "paid_not_allowed") in info.value.skipped
    assert h.hits("deepseek") == 0


async def test_anchor_tried_while_cooling_as_last_resort(make: Any, fake: FakeProviders) -> None:
    """The paid anchor is tried even while its breaker is open, when it is the last resort."""
    h = make(("mistral", "deepseek"))
    fake.script(key("deepseek"), {"status": 429})
    fake.script(key("mistral"), {"status": 429}, {"status": 429})
    with pytest.raises(AllProvidersFailed):
        await h.ask()
    assert h.cascade.breaker.state("deepseek").value == "open"
    done = await h.ask()
    assert done.provider == "deepseek"
    assert h.cascade.breaker.state("deepseek").value == "closed"


async def test_context_too_long_moves_only_to_a_larger_window(
    make: Any, fake: FakeProviders
) -> None:
    """ContextTooLong on Cerebras (8k) skips nothing smaller and reaches DeepSeek (128k)."""
    h = make(("cerebras", "mistral", "deepseek"))
    body = {
        "message": "Please reduce the length of the messages",
        "code": "context_length_exceeded",
    }
    fake.script(key("cerebras"), {"status": 400, "body": body})
    done = await h.ask()
    assert done.provider == "mistral"  # 32k > 8k

    fake.script(key("cerebras"), {"status": 400, "body": body})
    fake.script(key("mistral"), {"status": 400, "body": body})
    done = await h.ask()
    assert done.provider == "deepseek"
    assert done.fallbacks == ("cerebras:context", "mistral:context")


async def test_context_too_long_with_no_larger_window_raises_it(
    make: Any, fake: FakeProviders
) -> None:
    """With no larger window left, the ContextTooLong itself is raised (a rejection)."""
    h = make(("mistral", "cerebras"))
    body = {"message": "maximum context length exceeded"}
    fake.script(key("mistral"), {"status": 400, "body": body})
    with pytest.raises(ContextTooLong):
        await h.ask()
    assert h.hits("cerebras") == 0


async def test_prompt_larger_than_window_is_skipped_without_request(make: Any) -> None:
    """A prompt whose counted tokens exceed a key's window skips that key."""
    h = make(("cerebras", "mistral"))
    done = await h.ask(ask("x" * 40_000, max_tokens=16))
    assert done.provider == "mistral"
    assert done.fallbacks == ("cerebras:context",)
    assert h.hits("cerebras") == 0


async def test_kill_refusal_propagates_unwrapped(make: Any, ledger: FakeLedger) -> None:
    """A budget refusal is raised as HoldRefused, unchanged, and no provider is called."""
    h = make()
    op = await h.op()
    ledger.killed = True
    with pytest.raises(HoldRefused) as info:
        await h.cascade.complete(op, ask())
    assert info.value.refusal.reason is RefusalReason.KILL
    assert h.fake.requests == []


async def test_loop_is_refused_by_the_ledger(make: Any) -> None:
    """The same prompt twice in one operation is a loop (fingerprint from the messages)."""
    h = make()
    op = await h.op()
    await h.cascade.complete(op, ask("same"))
    with pytest.raises(HoldRefused) as info:
        await h.cascade.complete(op, ask("same"))
    assert info.value.refusal.reason is RefusalReason.LOOP


async def test_max_tokens_is_mandatory(make: Any) -> None:
    """max_tokens ≤ 0 is a programming error (no ceiling without it)."""
    h = make()
    with pytest.raises(ValueError, match="max_tokens"):
        await h.ask(ask(max_tokens=0))


async def test_provider_status_and_metrics_shapes(make: Any, fake: FakeProviders) -> None:
    """/providers data: present/enabled/state/cooldown/headers/calls today; absent keys listed."""
    h = make(("groq", "mistral", "deepseek"))
    fake.script(key("groq"), {"status": 429, "retry_after": "5"})
    await h.ask()
    rows = {s.name: s for s in h.cascade.provider_status()}
    assert set(rows) == set(ALL)
    assert rows["groq2"].present is False and rows["cerebras"].present is False
    assert rows["groq"].state == "open"
    assert rows["groq"].cooldown_remaining_s == pytest.approx(5.0)  # its own Retry-After
    assert rows["groq"].last_rate_limits.get("retry-after") == "5"
    assert rows["mistral"].calls_today == 1
    assert "x-ratelimit-remaining-tokens-minute" in rows["mistral"].last_rate_limits
    assert (
        h.registry.get_sample_value(
            "kopek_llm_fallbacks_total", {"provider": "groq", "reason": "rate_limited"}
        )
        == 1.0
    )
    assert h.registry.get_sample_value("kopek_llm_calls_total", {"provider": "mistral"}) == 1.0


async def test_repeated_failures_open_the_breaker(
    make: Any, fake: FakeProviders, clock: ManualClock
) -> None:
    """3 failures within 60 s open Groq's breaker; the 4th request skips it."""
    h = make(("groq", "mistral"))
    for _ in range(3):
        fake.script(key("groq"), {"status": 500})
        assert (await h.ask()).provider == "mistral"
        clock.advance(10)
    assert h.cascade.breaker.state("groq").value == "open"
    await h.ask()
    assert h.hits("groq") == 3
    assert any(e.kind == "cooldown_opened" and e.provider == "groq" for e in h.events)


async def test_cancellation_settles_estimated_and_frees_the_slot(
    make: Any, fake: FakeProviders, ledger: FakeLedger
) -> None:
    """A request cancelled mid-call settles its hold as estimated and returns its slot."""
    h = make(("deepseek",), global_max_inflight_calls=1)
    fake.script(key("deepseek"), {"delay_s": 0.5})
    task = asyncio.create_task(h.ask())
    for _ in range(500):  # until the request reached the fake (bounded)
        if fake.requests:
            break
        await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    hold = ledger.holds_for("deepseek")[0]
    assert hold.state == "settled" and hold.estimated
    assert h.cascade.slots.in_use == 0
