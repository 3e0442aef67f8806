"""Rate-limit parsing, the breaker, pacing and the priority slots (pure, clock-driven)."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime

import pytest

from llm.keys.breaker import CircuitBreaker, CircuitState
from llm.keys.pacing import Pacer
from llm.keys.slots import PrioritySlots
from llm.providers.ratelimits import parse_duration_s, parse_rate_limits, parse_retry_after_s
from llm.types import RateLimitInfo
from tests.llm.llm_helpers import CORPUS
from tests.support.clocks import ManualClock


@pytest.mark.parametrize(
    ("raw", "seconds"),
    [
        ("6", 6.0),
        ("6s", 6.0),
        ("1.559999999s", 1.559999999),
        ("250ms", 0.25),
        ("2m59.56s", 179.56),
        ("7.66s", 7.66),
        ("1h0m1s", 3601.0),
        ("11.382867097854614", 11.382867097854614),
        ("", None),
        ("soon", None),
        (None, None),
    ],
)
def test_duration_forms(raw: str | None, seconds: float | None) -> None:
    """Every observed duration form parses exactly (2m59.56s is 179.56 s, not 2 s)."""
    assert parse_duration_s(raw) == seconds


def test_retry_after_ms_wins_and_http_date() -> None:
    """retry-after-ms is preferred; an HTTP-date Retry-After needs ``now``."""
    assert parse_retry_after_s("30", "1500") == 1.5
    now = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)
    assert parse_retry_after_s("Thu, 01 Jan 2026 12:00:45 GMT", now=now) == 45.0
    assert parse_retry_after_s("Thu, 01 Jan 2026 12:00:45 GMT") is None


def test_groq_headers() -> None:
    """Groq's documented headers: tokens per minute and requests per day."""
    info = parse_rate_limits(
        {
            "Retry-After": "2",
            "x-ratelimit-limit-requests": "14400",
            "x-ratelimit-limit-tokens": "18000",
            "x-ratelimit-remaining-requests": "14370",
            "x-ratelimit-remaining-tokens": "17997",
            "x-ratelimit-reset-requests": "2m59.56s",
            "x-ratelimit-reset-tokens": "7.66s",
            "Authorization": "Bearer secret",
        }
    )
    assert info.remaining_tokens == 17997
    assert info.reset_tokens_s == 7.66
    assert info.remaining_requests == 14370
    assert info.reset_requests_s == 179.56
    assert info.retry_after_s == 2.0
    assert info.limit_tokens == 18000 and info.limit_requests == 14400
    assert "authorization" not in info.raw


def test_mistral_headers() -> None:
    """Mistral's per-minute headers (no reset header)."""
    info = parse_rate_limits(
        {
            "x-ratelimit-limit-tokens-minute": "5000000",
            "x-ratelimit-remaining-tokens-minute": "4999911",
            "x-ratelimit-tokens-query-cost": "52",
            "x-ratelimit-limit-req-minute": "720",
            "x-ratelimit-remaining-req-minute": "717",
        }
    )
    assert (info.remaining_tokens, info.remaining_requests) == (4999911, 717)
    assert info.reset_tokens_s is None and info.limit_tokens == 5_000_000


def test_cerebras_headers() -> None:
    """Cerebras: tokens per minute and requests per day, resets as float seconds."""
    info = parse_rate_limits(
        {
            "x-ratelimit-limit-requests-day": "1000000000",
            "x-ratelimit-limit-tokens-minute": "1000000000",
            "x-ratelimit-remaining-requests-day": "999997455",
            "x-ratelimit-remaining-tokens-minute": "999998298",
            "x-ratelimit-reset-requests-day": "33011.382867097855",
            "x-ratelimit-reset-tokens-minute": "11.382867097854614",
        }
    )
    assert info.remaining_tokens == 999998298
    assert info.reset_tokens_s == pytest.approx(11.382867097854614)
    assert info.remaining_requests == 999997455
    assert info.reset_requests_s == pytest.approx(33011.382867097855)


@pytest.mark.skipif(not CORPUS.exists(), reason="../shared corpus not present")
@pytest.mark.parametrize(
    "name",
    [
        "groq_response_headers_observed.groq-ruby-9.json",
        "groq_ratelimit_headers_documented.json",
        "mistral_response_headers_observed.client-ts-169.json",
        "cerebras_ratelimit_headers_documented.json",
    ],
)
def test_real_observed_headers_from_corpus(name: str) -> None:
    """Headers observed in public issues/docs (read in place, not copied) all parse."""
    headers = json.loads((CORPUS / "errors_and_headers" / name).read_text(encoding="utf-8"))
    info = parse_rate_limits(headers)
    assert info.remaining_tokens is not None
    assert info.remaining_requests is not None


# -- breaker ---------------------------------------------------------------------


def test_breaker_429_cooldown_never_shortens() -> None:
    """Open for the provider's own Retry-After (cooldown only when none); a shorter
    second cooldown keeps the first."""
    clock = ManualClock()
    b = CircuitBreaker(clock, cooldown_s=10)
    t0 = clock.monotonic()
    assert b.record_rate_limited("g", 900) == t0 + 900
    clock.advance(100)
    assert b.record_rate_limited("g", 30) == t0 + 900
    assert b.record_rate_limited("g", None) == t0 + 900
    assert b.record_rate_limited("g", 1000) == t0 + 100 + 1000
    assert [(e.kind, e.until) for e in b.events] == [
        ("opened", t0 + 900),
        ("extended", t0 + 1100),
    ]
    clock.advance(1)
    assert CircuitBreaker(clock, cooldown_s=600).record_rate_limited("h", 2) == (
        clock.monotonic() + 2
    )


def test_breaker_half_open_single_trial() -> None:
    """After the cooldown exactly one trial is granted; success closes, failure re-opens."""
    clock = ManualClock()
    b = CircuitBreaker(clock, cooldown_s=10)
    b.record_rate_limited("g", None)
    assert not b.try_acquire("g")
    clock.advance(10)
    assert b.state("g") is CircuitState.HALF_OPEN
    assert b.try_acquire("g")
    assert not b.try_acquire("g")
    b.record_failure("g")
    assert b.state("g") is CircuitState.OPEN
    clock.advance(10)
    assert b.try_acquire("g")
    b.record_success("g")
    assert b.state("g") is CircuitState.CLOSED
    assert [e.kind for e in b.events] == ["opened", "half_open", "opened", "half_open", "closed"]


def test_breaker_failures_in_window() -> None:
    """3 failures within 60 s open it; failures spread wider do not."""
    clock = ManualClock()
    b = CircuitBreaker(clock, cooldown_s=100, failure_threshold=3, failure_window_s=60)
    for _ in range(2):
        assert not b.record_failure("g")
        clock.advance(31)
    assert not b.record_failure("g")  # the first fell out of the window
    clock.advance(1)
    assert b.record_failure("g")
    assert b.state("g") is CircuitState.OPEN
    assert b.events[-1].reason == "failures"


def test_breaker_cancel_returns_the_trial() -> None:
    """A trial that sent nothing can be handed back for the next caller."""
    clock = ManualClock()
    b = CircuitBreaker(clock, cooldown_s=1)
    b.record_rate_limited("g", None)
    clock.advance(1)
    assert b.try_acquire("g")
    b.cancel("g")
    assert b.try_acquire("g")


# -- pacing ----------------------------------------------------------------------


def test_pacer_would_exceed_until_reset() -> None:
    """100 tokens left → a 2,000-token request would exceed until the reset time."""
    clock = ManualClock()
    p = Pacer(clock)
    p.observe("g", RateLimitInfo(remaining_tokens=100, reset_tokens_s=7.66, raw={"x": "1"}))
    assert p.would_exceed("g", 2_000)
    assert not p.would_exceed("g", 100)
    assert p.reset_at("g") == pytest.approx(clock.monotonic() + 7.66)
    clock.advance(7.66)
    assert not p.would_exceed("g", 2_000)


def test_pacer_share_of_remaining() -> None:
    """With 1,000 tokens left, 800 fit a 0.8 share and 801 do not."""
    p = Pacer(ManualClock())
    p.observe("g", RateLimitInfo(remaining_tokens=1000, reset_tokens_s=10.0))
    assert not p.would_exceed("g", 800, 0.8)
    assert p.would_exceed("g", 801, 0.8)
    assert not p.would_exceed("g", 1000)


def test_pacer_consume_and_limit_refill() -> None:
    """In-flight requests are subtracted; after the reset the full limit is assumed."""
    clock = ManualClock()
    p = Pacer(clock)
    p.observe(
        "g",
        RateLimitInfo(
            remaining_tokens=3_000, reset_tokens_s=10, limit_tokens=12_000, raw={"a": "b"}
        ),
    )
    p.consume("g", 2_500)
    assert p.remaining_tokens("g") == 500
    assert p.would_exceed("g", 600)
    clock.advance(10)
    assert p.remaining_tokens("g") == 12_000


def test_pacer_requests_exhausted() -> None:
    """0 requests left (e.g. Groq's per-day count) paces the key until that reset."""
    clock = ManualClock()
    p = Pacer(clock)
    p.observe("g", RateLimitInfo(remaining_requests=0, reset_requests_s=179.56, raw={"a": "b"}))
    assert p.would_exceed("g", 1)
    assert p.reset_at("g") == pytest.approx(clock.monotonic() + 179.56)


def test_pacer_mistral_default_window() -> None:
    """Without a reset header (Mistral) the minute window is assumed."""
    clock = ManualClock()
    p = Pacer(clock, default_window_s=60)
    p.observe("m", RateLimitInfo(remaining_tokens=10, raw={"a": "b"}))
    assert p.would_exceed("m", 11)
    clock.advance(60)
    assert not p.would_exceed("m", 11)


# -- slots ----------------------------------------------------------------------


async def test_slots_serve_chat_before_digest() -> None:
    """Waiting chat requests get the next slot before earlier-queued digest requests."""
    slots = PrioritySlots(1)
    order: list[str] = []
    await slots.acquire(0)

    async def take(name: str, priority: int) -> None:
        async with slots.slot(priority):
            order.append(name)

    tasks = [asyncio.create_task(take("digest1", 1)), asyncio.create_task(take("digest2", 1))]
    await asyncio.sleep(0)
    tasks.append(asyncio.create_task(take("chat", 0)))
    await asyncio.sleep(0)
    assert slots.waiting == 3
    slots.release()
    await asyncio.gather(*tasks)
    assert order == ["chat", "digest1", "digest2"]
    assert slots.in_use == 0


async def test_slots_cancelled_waiter_takes_nothing() -> None:
    """Cancelling a waiter leaves no slot taken and does not block the others."""
    slots = PrioritySlots(1)
    await slots.acquire(0)
    waiter = asyncio.create_task(slots.acquire(0))
    await asyncio.sleep(0)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    slots.release()
    assert slots.in_use == 0
    await asyncio.wait_for(slots.acquire(1), timeout=1)
    assert slots.in_use == 1


def test_slots_limit_must_be_positive() -> None:
    """A limit below 1 is refused."""
    with pytest.raises(ValueError, match="limit"):
        PrioritySlots(0)
