"""GLOBAL_MAX_INFLIGHT_CALLS across processes sharing one PostgreSQL (``llm.keys.slots.
DeploymentSlots`` over ``llm.keys.claims``): each "process" is its own ledger store
(registered in ``budget_processes``) with its own leases and slots, on one real
database."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime

import pytest

from budget.config import LedgerConfig
from budget.kernel.clock import Clock, SystemClock
from budget.storage.postgres.store import PgStore
from llm.keys.claims import CallClaims
from llm.keys.slots import DeploymentSlots, PrioritySlots
from tests.support.clocks import ManualClock

Process = Callable[[Clock], Awaitable[tuple[PgStore, CallClaims]]]


@pytest.fixture
async def process(pg_migrated_url: str) -> AsyncIterator[Process]:
    """Open stores that share the database (each registered with a heartbeat row)."""
    stores: list[PgStore] = []

    async def make(clock: Clock) -> tuple[PgStore, CallClaims]:
        pid = f"p{len(stores)}"
        store = PgStore(pg_migrated_url, LedgerConfig(), pid, clock, run_heartbeat=False)
        await store.open()
        stores.append(store)
        return store, CallClaims(store, pid, clock, ttl_s=300.0, dead_after_s=60.0)

    yield make
    for store in stores:
        await store.close()


async def test_the_limit_holds_across_processes_exactly(process: Process) -> None:
    """Three processes, limit 3 each and for the deployment, 15 calls at once spread
    over them: never more than 3 in flight anywhere, and every call gets its turn."""
    clock = SystemClock()
    slots = []
    for _ in range(3):
        _store, leases = await process(clock)
        slots.append(DeploymentSlots(PrioritySlots(3), leases, clock))
    running = 0
    peak = 0
    done = 0
    changed = asyncio.Condition()

    async def call(i: int) -> None:
        nonlocal running, peak, done
        async with slots[i % 3].slot(0):
            async with changed:
                running += 1
                peak = max(peak, running)
                changed.notify_all()
                # stay until three run at once, or all that are left run: the peak then
                # shows the limit, not how fast leases were taken on a loaded machine (a
                # fixed 30 ms stay gave a peak of 2 under load average 15)
                await changed.wait_for(lambda: running >= min(3, 15 - done))
            await asyncio.sleep(0.005)
            async with changed:
                running -= 1
                done += 1
                changed.notify_all()

    await asyncio.wait_for(asyncio.gather(*(call(i) for i in range(15))), timeout=60)
    assert (peak, done) == (3, 15)
    assert await leases.held() == 0


async def test_leases_of_a_dead_process_stop_counting_after_dead_after(
    process: Process,
) -> None:
    """Process A holds both leases (limit 2) and dies (no more heartbeats, no give-back).
    Process B, beating, is refused while A's heartbeat is younger than 60 s and gets a
    lease once it is older; A's rows are gone then."""
    clock = ManualClock(datetime(2026, 1, 14, 12, 0, tzinfo=UTC))
    _a_store, a = await process(clock)
    b_store, b = await process(clock)
    assert await a.try_take("a1", 0, 2) and await a.try_take("a2", 0, 2)
    assert not await b.try_take("b1", 0, 2)
    clock.advance(59.0)
    await b_store.beat()
    assert not await b.try_take("b1", 0, 2)
    clock.advance(2.0)
    await b_store.beat()
    assert await b.try_take("b1", 0, 2)
    assert await b.held() == 1


async def test_a_lease_never_given_back_lapses_at_its_ttl(process: Process) -> None:
    """A live process that lost a give-back (storage failed) keeps beating: its lease
    still counts until its TTL (300 s), then no longer; a given-back lease frees its
    place at once."""
    clock = ManualClock(datetime(2026, 1, 14, 12, 0, tzinfo=UTC))
    store, leases = await process(clock)
    assert await leases.try_take("lost", 0, 2)
    assert await leases.try_take("kept", 0, 2)
    assert not await leases.try_take("x", 0, 2)
    await leases.give_back("kept")
    assert await leases.try_take("x", 0, 2)
    for _ in range(5):
        clock.advance(60.0)
        await store.beat()
    assert await leases.held() == 0
    assert await leases.try_take("y", 0, 2) and await leases.try_take("z", 0, 2)
