"""FREE_SHARE_MAX across replicas sharing one PostgreSQL (``llm.keys.shares`` over
``llm.keys.share_counts``): each "replica" is its own ledger store (registered in
``budget_processes``) with its own :class:`FreeShares`, on one real database. A flooder
asking both replicas has one share, not one on each (give or take what each replica served
since its last statement: decision 282)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pytest

from budget.config import LedgerConfig
from budget.errors import LedgerUnavailable
from budget.protocol import OperationTicket
from budget.storage.postgres.store import PgStore
from budget.types import Origin, Usage
from llm.keys.share_counts import Asked, PgShareCounts
from llm.keys.shares import FreeShares
from llm.providers.ratelimits import parse_rate_limits
from llm.types import Completion
from tests.support.clocks import ManualClock

#: Groq's requests header is per day: 8 a day, so a quarter is 2 requests.
GROQ = {"x-ratelimit-limit-requests": "8", "x-ratelimit-remaining-requests": "8"}
FLOODER, OTHER, GROUP = 1, 2, -100

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


def _op(user: int, n: int, chat: int | None = None) -> OperationTicket:
    return OperationTicket(f"op{user}-{n}", user, Origin.CHAT, None, chat_id=chat)


def _answer() -> Completion:
    return Completion(
        "ok", "stop", FREE.name, "m", Usage(10, output_tokens=5), parse_rate_limits(GROQ)
    )


async def _ask(shares: FreeShares, user: int, n: int) -> bool:
    """One request of ``user`` to ``shares``' replica: served (and booked) or turned away."""
    view = await shares.asking(_op(user, n))
    if shares.check(FREE, view, 15, False) is not None:
        return False
    shares.record(FREE.name, view, _answer())
    return True


async def _use(shares: FreeShares, user: int) -> int:
    """``user``'s requests at the key: the table's, and what ``shares``' replica served
    since its last statement (added by this one)."""
    view = await shares.asking(_op(user, 99))
    return view.use.get((FREE.name, ("user", user)), (0, 0))[0]


async def test_a_flooder_on_two_replicas_has_one_share_across_both(
    replica: tuple[Replica, ManualClock],
) -> None:
    """The other user asked replica A only; the flooder alternates A, B, A, B: served
    three times in all — a quarter of 8, and one more because each replica adds what it
    served at its next statement (B's first was not yet in the table when A was asked
    again) — not twice on each (counts in memory gave it 4); every request counted
    once; the other user is still served on the other replica."""
    make, clock = replica
    a, b = await make(), await make()
    assert await _ask(a, OTHER, 0)
    served = [await _ask((a, b)[n % 2], FLOODER, n) for n in range(6)]
    assert served == [True, True, True, False, False, False]
    assert await _ask(b, OTHER, 1)  # its second: within its own share
    assert await _use(a, FLOODER) == 3  # A's two, and B's one (added by B's statement)
    # the flooder alone again (the others quiet for ten minutes): the whole key
    clock.advance(601)
    assert await _ask(b, FLOODER, 7)


async def test_one_replica_alone_moves_the_flooder_on_at_the_share_exactly(
    replica: tuple[Replica, ManualClock],
) -> None:
    """Messages that come one at a time to one replica: no slack — the flooder is served
    its 2 and turned away at the third, as with the counts in memory; a second replica
    started later reads the same 2 and turns it away too."""
    make, _ = replica
    a = await make()
    assert await _ask(a, OTHER, 0)
    assert [await _ask(a, FLOODER, n) for n in range(3)] == [True, True, False]
    b = await make()
    assert not await _ask(b, FLOODER, 3)
    assert await _use(b, FLOODER) == 2


async def test_a_groups_share_across_replicas_counts_only_outsiders_as_others(
    replica: tuple[Replica, ManualClock],
) -> None:
    """Two members of one group on two replicas: the group's use adds up across both,
    yet while only its members are active nobody is turned away; once a user outside
    the group asked (on either replica), the group is past its quarter of 8."""
    make, _ = replica
    a, b = await make(), await make()
    members = [(a, 11), (b, 12), (a, 11), (b, 12)]
    for n, (shares, member) in enumerate(members):
        view = await shares.asking(_op(member, n, GROUP))
        assert shares.check(FREE, view, 15, False) is None
        shares.record(FREE.name, view, _answer())
    assert await _ask(b, OTHER, 9)  # an outsider, privately
    view = await a.asking(_op(13, 10, GROUP))  # a new member: its own share is empty
    assert view.use[(FREE.name, ("chat", GROUP))][0] == 4
    assert a.check(FREE, view, 15, False) == "share"


class _Failing:
    """A shared store whose next statement fails, then adds to a plain dict."""

    def __init__(self) -> None:
        self.fail = True
        self.added: dict[tuple[str, tuple[str, int]], tuple[int, int]] = {}

    async def ask(
        self,
        day: str,
        user_id: int,
        chat_id: int | None,
        within_s: float,
        add: Mapping[tuple[str, tuple[str, int]], tuple[int, int]],
        read: Sequence[tuple[str, tuple[str, int]]],
    ) -> Asked:
        if self.fail:
            self.fail = False
            raise LedgerUnavailable()
        for row, (requests, tokens) in add.items():
            had = self.added.get(row, (0, 0))
            self.added[row] = (had[0] + requests, had[1] + tokens)
        return Asked({}, others=True, outsiders=True)


async def test_what_a_failed_statement_was_to_add_is_added_by_the_next() -> None:
    """A served request waits in the process; the statement that was to add it fails
    (the request is refused by the caller): the next statement adds it, once."""
    clock = ManualClock(datetime(2026, 3, 2, 12, tzinfo=UTC))
    store = _Failing()
    store.fail = False
    shares = FreeShares(clock, "Europe/Berlin", 250_000, store)
    shares.learn(FREE.name, parse_rate_limits(GROQ))
    view = await shares.asking(_op(FLOODER, 0))
    shares.record(FREE.name, view, _answer())
    store.fail = True
    with pytest.raises(LedgerUnavailable):
        await shares.asking(_op(OTHER, 1))
    await shares.asking(_op(OTHER, 2))
    assert store.added == {(FREE.name, ("user", FLOODER)): (1, 15)}


async def test_a_new_day_starts_every_share_again_and_prunes_the_days_before(
    pg_migrated_url: str,
) -> None:
    """The flooder past its share on Monday is served again on Tuesday (Berlin's
    midnight); Tuesday's first statement deletes Monday's rows, and what was served on
    Monday but not yet added is not added to Tuesday."""
    clock = ManualClock(datetime(2026, 3, 2, 12, tzinfo=UTC))
    store = PgStore(pg_migrated_url, LedgerConfig(), "p0", clock, run_heartbeat=False)
    await store.open()
    try:
        shares = FreeShares(clock, "Europe/Berlin", 250_000, PgShareCounts(store, clock))
        shares.learn(FREE.name, parse_rate_limits(GROQ))
        assert await _ask(shares, OTHER, 0)
        assert [await _ask(shares, FLOODER, n) for n in range(3)] == [True, True, False]
        assert await _ask(shares, OTHER, 1)  # Monday's last: not yet added
        clock.advance(12 * 3600)  # 00:00 on Tuesday in Berlin
        assert await _ask(shares, FLOODER, 4)
        assert await _use(shares, FLOODER) == 1
        assert await _use(shares, OTHER) == 0

        async def days(conn: Any) -> list[str]:
            return [r["day"] for r in await conn.fetch("SELECT DISTINCT day FROM free_share_use")]

        assert await store.tx(clock.now(), days, single=True) == ["2026-03-03"]
    finally:
        await store.close()
