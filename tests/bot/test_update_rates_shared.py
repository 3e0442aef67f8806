"""USER_MAX_UPDATES_PER_MINUTE shared by processes on one PostgreSQL
(:class:`bot.storage.pg_rates.PgUpdateRates`): two stores stand for two replicas sharing
the rows of one real database, on one manual clock."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime

import pytest

from bot.storage.pg_rates import PgUpdateRates
from budget.config import LedgerConfig
from budget.storage.postgres.store import PgStore
from tests.support.clocks import ManualClock

Replica = Callable[[], Awaitable[PgUpdateRates]]


@pytest.fixture
def clock() -> ManualClock:
    """A manual clock at 2026-01-14 12:00 UTC."""
    return ManualClock(datetime(2026, 1, 14, 12, 0, tzinfo=UTC))


@pytest.fixture
async def replica(pg_migrated_url: str, clock: ManualClock) -> AsyncIterator[Replica]:
    """Make windows that share the database, each on its own store."""
    stores: list[PgStore] = []

    async def make() -> PgUpdateRates:
        store = PgStore(
            pg_migrated_url, LedgerConfig(), f"r{len(stores)}", clock, run_heartbeat=False
        )
        await store.open()
        stores.append(store)
        return PgUpdateRates(store, clock)

    yield make
    for store in stores:
        await store.close()


async def test_the_window_is_one_across_replicas_and_slides(
    replica: Replica, clock: ManualClock
) -> None:
    """Limit 3 a minute: two replicas let 3 updates of a payer through between them, at the
    same instant too, the 4th is refused by either; 60 s after the first the window has
    room for one more, not for two; another payer is counted apart."""
    one, two = await replica(), await replica()
    assert await one.allow(7, 3) is True
    clock.advance(1.0)
    assert await two.allow(7, 3) is True
    assert await one.allow(7, 3) is True  # same instant as the one before
    assert await two.allow(7, 3) is False
    assert await one.allow(7, 3) is False
    assert await one.allow(8, 3) is True
    clock.advance(59.0)  # the first update is 60 s old: out of the window
    assert await two.allow(7, 3) is True
    assert await one.allow(7, 3) is False


async def test_a_new_payer_counted_by_replicas_at_once_is_counted_exactly(
    replica: Replica,
) -> None:
    """Ten updates of a payer never seen, from two replicas at once (both inserting its row):
    exactly the limit of them are let through."""
    one, two = await replica(), await replica()
    results = await asyncio.gather(*(r.allow(9, 4) for r in (one, two) * 5))
    assert sorted(results) == [False] * 6 + [True] * 4


async def test_a_limit_of_zero_lets_nothing_through(replica: Replica) -> None:
    """Limit 0: nothing, for a new payer and a known one."""
    one = await replica()
    assert await one.allow(5, 0) is False
    assert await one.allow(5, 0) is False
