"""Provider keys' circuits and paced windows shared by processes on one PostgreSQL
(``llm.keys.admission`` over ``llm.keys.postgres``): two gates stand for two replicas — each with
its
own breaker and pacer (its memory) — sharing the rows of one real database, on one
manual clock."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime
from typing import Any, TypeVar

import pytest

from budget.config import LedgerConfig
from budget.storage.postgres.store import PgStore
from llm.keys.admission import KeyAdmission
from llm.keys.breaker import CircuitBreaker, CircuitState
from llm.keys.pacing import Pacer
from llm.keys.postgres import PgKeyStates
from llm.types import RateLimitInfo
from tests.support.clocks import ManualClock

Replica = Callable[[], Awaitable[KeyAdmission]]
T = TypeVar("T")


@pytest.fixture
def clock() -> ManualClock:
    """A manual clock at 2026-01-14 12:00 UTC."""
    return ManualClock(datetime(2026, 1, 14, 12, 0, tzinfo=UTC))


@pytest.fixture
async def replica(pg_migrated_url: str, clock: ManualClock) -> AsyncIterator[Replica]:
    """Make gates that share the database, each with its own store and memory."""
    stores: list[PgStore] = []

    async def make() -> KeyAdmission:
        store = PgStore(
            pg_migrated_url, LedgerConfig(), f"r{len(stores)}", clock, run_heartbeat=False
        )
        await store.open()
        stores.append(store)
        breaker = CircuitBreaker(clock, cooldown_s=600.0, cooldown_max_s=3600.0)
        return KeyAdmission(
            breaker, Pacer(clock), clock, PgKeyStates(store, clock), trial_lease_s=90
        )

    yield make
    for store in stores:
        await store.close()


async def test_a_429_seen_by_one_replica_closes_the_key_for_the_others(
    replica: Replica, clock: ManualClock
) -> None:
    """Replica 1's 429 (Retry-After 30 s) is written through: replica 2's next call is
    refused without a request, read at the call (no refresh needed); a longer cooldown
    is never shortened by a later, shorter 429. When it ends one replica gets the single
    half-open trial, the other is refused until the trial's success closes the circuit
    for both."""
    one, two = await replica(), await replica()
    assert await two.begin("groq", 100) == ""
    until = await one.rate_limited("groq", 30.0)
    assert until == pytest.approx(clock.monotonic() + 30.0)
    assert await two.begin("groq", 100) == "open"
    assert await two.rate_limited("groq", 5.0) is None  # a shorter wait changes nothing
    clock.advance(29.0)
    assert await two.begin("groq", 100) == "open"
    await two.refresh(["groq"])
    assert two._breaker.state("groq") is CircuitState.OPEN
    assert two._breaker.cooldown_remaining_s("groq") == pytest.approx(1.0)
    clock.advance(1.0)
    assert await two.begin("groq", 100) == ""  # the trial
    assert await one.begin("groq", 100) == "open"  # held by replica 2
    await two.succeeded("groq", None)
    assert await one.begin("groq", 100) == ""
    await one.refresh(["groq"])
    assert one._breaker.state("groq") is CircuitState.CLOSED


async def test_a_trial_whose_holder_died_is_taken_over_after_its_lease(
    replica: Replica, clock: ManualClock
) -> None:
    """A replica that took the half-open trial and died never reports it: the others are
    refused for the trial's lease (90 s), then one of them gets the trial."""
    one, two = await replica(), await replica()
    await one.rate_limited("groq2", None)  # COOLDOWN_SECONDS: 600 s
    clock.advance(600.0)
    assert await one.begin("groq2", None) == ""  # replica 1 holds the trial, then dies
    clock.advance(89.0)
    assert await two.begin("groq2", None) == "open"
    clock.advance(1.0)
    assert await two.begin("groq2", None) == ""


async def test_a_success_does_not_close_a_cooldown_another_replica_opened_since(
    replica: Replica, clock: ManualClock
) -> None:
    """A call that was sent before replica 2's 429 and answers afterwards does not reopen
    the key: the running cooldown stays; a failing trial reopens it for everyone."""
    one, two = await replica(), await replica()
    assert await one.begin("mistral", 10) == ""
    await two.rate_limited("mistral", 60.0)
    await one.succeeded("mistral", None)
    assert await one.begin("mistral", 10) == "open"
    clock.advance(60.0)
    assert await one.begin("mistral", 10) == ""  # trial
    opened = await one.failed("mistral")
    assert opened == pytest.approx(clock.monotonic() + 600.0)  # trial failed: COOLDOWN
    assert await two.begin("mistral", 10) == "open"


async def test_paced_windows_are_one_budget_for_every_replica(
    replica: Replica, clock: ManualClock
) -> None:
    """Replica 1 reads 3,000 tokens left (reset in 7.66 s) from a response's headers;
    replica 2 sends 2,000 and the window is consumed for both: replica 1's next 2,000
    would go past the free tier and is refused; after the reset both may send again."""
    one, two = await replica(), await replica()
    headers = RateLimitInfo(
        remaining_tokens=3000, reset_tokens_s=7.66, raw={"x-ratelimit-remaining-tokens": "3000"}
    )
    await one.succeeded("cerebras", headers)
    assert await two.begin("cerebras", 2000) == ""
    assert await one.begin("cerebras", 2000) == "paced"
    await one.refresh(["cerebras"])
    assert one._pacer.remaining_tokens("cerebras") == 1000
    assert one._pacer.last_headers("cerebras") == {"x-ratelimit-remaining-tokens": "3000"}
    clock.advance(7.66)
    assert await one.begin("cerebras", 2000) == ""


async def test_a_disabled_key_is_disabled_everywhere_until_enabled(replica: Replica) -> None:
    """An auth failure seen by replica 1 disables the key in the shared row; replica 2
    reads it; an enable from replica 2 clears it for both (True once, then False)."""
    one, two = await replica(), await replica()
    await one.disable("deepseek", "auth")
    await two.refresh(["deepseek", "groq"])
    assert two.shared_disabled() == {"deepseek": "auth"}
    assert await two.enable("deepseek") is True
    assert await two.enable("deepseek") is False
    await one.refresh(["deepseek"])
    assert one.shared_disabled() == {}


class _WriteBetween:
    """The ledger's store with ``between`` run once right before the first compare and set
    (another replica's change landing between the read and the write)."""

    def __init__(self, store: PgStore, between: Callable[[], Awaitable[object]]) -> None:
        self._store = store
        self._between: Callable[[], Awaitable[object]] | None = between

    async def tx(
        self, now: datetime, body: Callable[[Any], Awaitable[T]], *, single: bool = False
    ) -> T:
        outer = self

        class Conn:
            def __init__(self, conn: Any) -> None:
                self._conn = conn

            def __getattr__(self, name: str) -> Any:
                return getattr(self._conn, name)

            async def fetchrow(self, sql: str, *args: Any) -> Any:
                if outer._between is not None and "IS NOT DISTINCT FROM" in sql:
                    between, outer._between = outer._between, None
                    await between()
                return await self._conn.fetchrow(sql, *args)

        async def wrapped(conn: Any) -> T:
            return await body(Conn(conn))

        return await self._store.tx(now, wrapped, single=single)


async def test_a_change_written_by_another_replica_between_read_and_write_is_kept(
    pg_migrated_url: str, replica: Replica, clock: ManualClock
) -> None:
    """Replica 1 reads the key's row to record a success with its headers; replica 2's 429
    lands before replica 1 writes: replica 1's write finds the row changed, and applies
    its success to the row as it is now — the cooldown stays open for
    both (a success does not close it) and the headers are recorded."""
    one, two = await replica(), await replica()
    assert await one.begin("groq", 100) == ""  # the row exists
    store = PgStore(pg_migrated_url, LedgerConfig(), "r9", clock, run_heartbeat=False)
    await store.open()
    try:
        breaker = CircuitBreaker(clock, cooldown_s=600.0, cooldown_max_s=3600.0)
        between = _WriteBetween(store, lambda: two.rate_limited("groq", 30.0))
        late = KeyAdmission(breaker, Pacer(clock), clock, PgKeyStates(between, clock))
        headers = RateLimitInfo(remaining_tokens=3000, raw={"x-ratelimit-remaining-tokens": "3000"})
        await late.succeeded("groq", headers)
        assert between._between is None  # it ran
        assert await one.begin("groq", 100) == "open"
        await one.refresh(["groq"])
        assert one._pacer.last_headers("groq") == {"x-ratelimit-remaining-tokens": "3000"}
    finally:
        await store.close()
