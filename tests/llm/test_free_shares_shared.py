"""FREE_SHARE_MAX across replicas sharing one PostgreSQL (``llm.keys.shares`` over
``llm.keys.share_counts``): each "replica" is its own ledger store (registered in
``budget_processes``) with its own :class:`FreeShares`, on one real database. A flooder
asking both replicas has one share, not one on each."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime

import pytest

from budget.config import LedgerConfig
from budget.protocol import OperationTicket
from budget.storage.postgres.store import PgStore
from budget.types import Origin, Usage
from llm.keys.share_counts import PgShareCounts
from llm.keys.shares import FreeShares
from llm.providers.ratelimits import parse_rate_limits
from llm.types import Completion
from tests.support.clocks import ManualClock

#: Groq's requests header is per day: 8 a day, so a quarter is 2 requests.
GROQ = {"x-ratelimit-limit-requests": "8", "x-ratelimit-remaining-requests": "8"}
FLOODER, OTHER = 1, 2

Replica = Callable[[], Awaitable[FreeShares]]


@dataclass(frozen=True)
class Key:
    """A provider key as the rule reads it."""

    name: str
    paid: bool = False


FREE = Key("groq")


@pytest.fixture
async def replica(pg_migrated_url: str) -> AsyncIterator[tuple[Replica, ManualClock]]:
    """Open replicas that share the database (one clock: the same day for all)."""
    clock = ManualClock(datetime(2026, 3, 2, 12, tzinfo=UTC))
    stores: list[PgStore] = []

    async def make() -> FreeShares:
        store = PgStore(
            pg_migrated_url, LedgerConfig(), f"p{len(stores)}", clock, run_heartbeat=False
        )
        await store.open()
        stores.append(store)
        shares = FreeShares(clock, "Europe/Berlin", 250_000, PgShareCounts(store, clock))
        shares.learn(FREE.name, parse_rate_limits(GROQ))
        return shares

    yield make, clock
    for store in stores:
        await store.close()


def _op(user: int, n: int) -> OperationTicket:
    return OperationTicket(f"op{user}-{n}", user, Origin.CHAT, None)


def _answer() -> Completion:
    return Completion("ok", "stop", FREE.name, "m", Usage(10, 5), parse_rate_limits(GROQ))


async def _ask(shares: FreeShares, user: int, n: int) -> bool:
    """One request of ``user`` to ``shares``' replica: served (and booked) or turned away."""
    who = await shares.asking(_op(user, n))
    if await shares.check(FREE, who, user, 15, False) is not None:
        return False
    await shares.record(FREE.name, who, _answer())
    return True


async def test_a_flooder_on_two_replicas_has_one_share_across_both(
    replica: tuple[Replica, ManualClock],
) -> None:
    """The other user asked replica A only; the flooder alternates A, B, A, B: served
    twice in all (a quarter of 8), not twice on each (counts in memory gave it 4); the
    other user is still served on the other replica."""
    make, clock = replica
    a, b = await make(), await make()
    assert await _ask(a, OTHER, 0)
    served = [await _ask((a, b)[n % 2], FLOODER, n) for n in range(6)]
    assert served == [True, True, False, False, False, False]
    assert await _ask(b, OTHER, 1)  # its second: within its own share
    # the flooder alone again (the other quiet for ten minutes): the whole key
    clock.advance(601)
    assert await _ask(b, FLOODER, 7)
