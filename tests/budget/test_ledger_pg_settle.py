"""The PostgreSQL ledger's one-statement settle and release, and its burn-rate trigger
run after the settle commits (:mod:`budget.storage.postgres.ends`,
:class:`budget.storage.postgres.burn.BurnCheckTimer`).

A settle reads its hold without a lock, then books it by one self-committing statement
that writes nothing if the hold changed in between (another step ended it, a sweep
expired it or booked its margin): the locked transaction then decides. The races are
staged by running the other step just before that statement."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import replace
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import asyncpg
import pytest

from budget.errors import HoldRefused
from budget.ledger import Ledger
from budget.protocol import HoldTicket
from budget.status import KillState
from budget.storage.postgres import ends as pg_ends
from budget.storage.postgres import rows as pg_rows
from budget.storage.postgres import store as pg_store
from budget.storage.postgres.burn import AUTO_KILL_CHECK_S
from budget.storage.postgres.rows import asyncpg_dsn
from budget.storage.postgres.store import PgStore
from budget.storage.store import SettleRequest
from budget.types import Level, Origin, RefusalReason, Usage, Window
from tests.budget.ledger_helpers import BASE_CONFIG, card
from tests.support.clocks import ManualClock


@pytest.fixture
def pg_url(pg_ledger_url: str) -> str:
    """Every test here starts on the ledger tables (``pg_ledger_url``: a copy of a template)."""
    return pg_ledger_url


Step = Callable[[], Awaitable[object]]


async def _ledger(url: str, name: str, clock: ManualClock, **cfg: object) -> Ledger:
    config = replace(BASE_CONFIG, **cfg)  # type: ignore[arg-type]
    store = PgStore(url, config, process_id=name, clock=clock, run_heartbeat=False)
    ledger = Ledger(store, config, card(), clock, sweep_previous_on_start=False)
    await ledger.start(run_sweeper=False)
    return ledger


async def _hold(ledger: Ledger, ceiling: int, user: int = 1) -> HoldTicket:
    """A hold of ``ceiling`` µUSD (1 input token + ceiling − 1 max tokens at test:m)."""
    op = await ledger.begin_operation(user, Origin.CHAT, max_musd=10**9, max_requests=10**6)
    req = await ledger.begin_request(op, f"fp-{ceiling}-{id(object())}")
    return await ledger.reserve(
        op, req, provider="test", model="m", input_tokens=1, max_tokens=ceiling - 1
    )


class _Racing:
    """An asyncpg connection that runs ``step`` (on another connection) just before
    the one-statement end is sent."""

    def __init__(self, conn: Any, step: Step) -> None:
        self._conn = conn
        self._step: Step | None = step

    async def fetchrow(self, sql: str, *args: Any) -> Any:
        if self._step is not None and sql.startswith("WITH h AS"):
            step, self._step = self._step, None
            await step()
        return await self._conn.fetchrow(sql, *args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


async def _sql(url: str, sql: str) -> list[Any]:
    conn = await asyncpg.connect(asyncpg_dsn(url))
    try:
        return list(await conn.fetch(sql))
    finally:
        await conn.close()


async def _global_day(url: str) -> tuple[int, int, int, int]:
    """(settled, held, late, margin) of the global day bucket."""
    (row,) = await _sql(
        url,
        "SELECT settled_musd, held_musd, late_musd, margin_musd FROM budget_buckets"
        " WHERE level = 'global' AND win = 'day'",
    )
    return (int(row[0]), int(row[1]), int(row[2]), int(row[3]))


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(datetime(2026, 1, 14, 12, 0, tzinfo=UTC))


@pytest.mark.parametrize("read", [True, False], ids=["read", "as granted"])
@pytest.mark.parametrize("other", ["settle", "release", "expire", "adopt margin"])
async def test_a_settle_racing_another_step_books_once(
    pg_url: str, clock: ManualClock, other: str, read: bool
) -> None:
    """Process B ends (or changes) A's hold between A's read (or the row A kept when
    it granted the hold) and A's one-statement settle: A's statement writes nothing,
    the locked transaction decides, and the buckets agree with the holds — settled by
    B: A's settle is a no-op; released by B: nothing spent; expired by B's sweep: A's
    settle corrects it as a late settle; margin booked by B's sweep (a hold of an
    older version): A takes it out once."""
    cfg = {"global_daily_musd": 100_000, "hold_ttl_s": 90.0}
    a = await _ledger(pg_url, "proc-a", clock, **cfg)
    b = await _ledger(pg_url, "proc-b", clock, **cfg)
    try:
        h = await _hold(a, 1_000)
        steps: dict[str, Step] = {
            "settle": lambda: b.settle(h.hold_id, Usage(1, 0, 299)),
            "release": lambda: b.release(h.hold_id),
            "expire": b.sweep,
            "adopt margin": b.sweep,
        }
        if other == "expire":
            clock.advance(91)
        if other == "adopt margin":  # granted as an older version grants: margin unbooked
            await _sql(pg_url, "UPDATE budget_holds SET margin_musd = 50, margin_booked = 0")
        store = a.store
        assert isinstance(store, PgStore) and store._pool is not None
        known = None if read else store._known.granted[h.hold_id]
        async with store._pool.acquire() as conn:
            done = await pg_ends.settle(
                _Racing(conn, steps[other]),
                a.config,
                clock.now(),
                SettleRequest(h.hold_id, Usage(1, 0, 499), False, a._pricer),
                known=known,
            )
        booked = {"settle": 300, "release": 0, "expire": 500, "adopt margin": 500}[other]
        assert (done.outcome.actual_musd, done.outcome.booked) == (
            booked,
            other in ("expire", "adopt margin"),
        )
        late = 500 if other == "expire" else 0
        assert await _global_day(pg_url) == (booked, 0, late, 0)
        assert (await b.store.audit())["mismatches"] == []
        (state,) = await _sql(pg_url, "SELECT state, actual_musd FROM budget_holds")
        assert tuple(state) == (("released", 0) if other == "release" else ("settled", booked))
        events = await _sql(pg_url, "SELECT kind FROM budget_events ORDER BY id")
        assert [e[0] for e in events] == (["expiry", "late_settle"] if late else [])
    finally:
        await a.close()
        await b.close()


async def test_a_release_racing_a_settle_is_a_no_op(pg_url: str, clock: ManualClock) -> None:
    """B settles the hold between A's read and A's one-statement release: A's release
    returns False and the settle stands."""
    a = await _ledger(pg_url, "proc-a", clock, global_daily_musd=100_000)
    b = await _ledger(pg_url, "proc-b", clock, global_daily_musd=100_000)
    try:
        h = await _hold(a, 1_000)
        store = a.store
        assert isinstance(store, PgStore) and store._pool is not None
        async with store._pool.acquire() as conn:
            racing = _Racing(conn, lambda: b.settle(h.hold_id, Usage(1, 0, 299)))
            assert not await pg_ends.release(racing, a.config, clock.now(), h.hold_id)
        assert await _global_day(pg_url) == (300, 0, 0, 0)
        assert (await b.store.audit())["mismatches"] == []
    finally:
        await a.close()
        await b.close()


async def _tripping_pair(pg_url: str, clock: ManualClock) -> tuple[Ledger, Ledger, list[KillState]]:
    """Two processes with the burn-rate threshold at $0.005 (AUTO_KILL_FRACTION 0.5 of
    a $0.01 global day), each having settled 100 µUSD (so each has checked once)."""
    cfg = {"global_daily_musd": 10_000, "auto_kill_fraction": Decimal("0.5")}
    a = await _ledger(pg_url, "proc-a", clock, **cfg)
    b = await _ledger(pg_url, "proc-b", clock, **cfg)
    calls: list[KillState] = []

    async def listener(state: KillState) -> None:
        calls.append(state)

    a._notices.on_auto_kill = b._notices.on_auto_kill = listener
    for ledger in (a, b):
        await ledger.settle((await _hold(ledger, 200)).hold_id, Usage(1, 0, 99))
    return a, b, calls


async def test_two_processes_crossing_the_burn_rate_together_trip_at_the_crossing_settle(
    pg_url: str, clock: ManualClock
) -> None:
    """Neither process's own spend crosses the threshold (100 + 2,400 and 100 + 2,700
    against 5,000), together they do (5,300): the settle that crosses it trips the
    switch at once, though both settle within AUTO_KILL_CHECK_S of their last check
    (the growth of today's global bucket, returned by the settle, says so)."""
    a, b, calls = await _tripping_pair(pg_url, clock)
    try:
        x, y = await _hold(a, 3_000), await _hold(b, 3_000)
        await a.settle(x.hold_id, Usage(1, 0, 2_399))
        assert not (await a.kill_state()).killed
        await b.settle(y.hold_id, Usage(1, 0, 2_699))
        state = await a.kill_state()
        assert state.killed and state.automatic
        assert state.reason == (
            "automatic: settled $0.005300 in the last 60 min > threshold $0.005000"
        )
    finally:
        await a.close()
        await b.close()
    assert len(calls) == 1


@pytest.mark.parametrize("then", ["sweep", "settle after the interval"])
async def test_spend_of_yesterdays_holds_trips_at_the_next_check(pg_url: str, then: str) -> None:
    """Holds granted before midnight and settled after it are booked in yesterday's
    bucket, so the crossing spend (two processes, neither alone over) is not seen at
    the settle; the next check of either process trips the switch: its sweep, or a
    settle AUTO_KILL_CHECK_S later."""
    clock = ManualClock(datetime(2026, 1, 14, 23, 59, 59, 900_000, tzinfo=UTC))
    cfg = {"global_daily_musd": 10_000, "auto_kill_fraction": Decimal("0.5")}
    a = await _ledger(pg_url, "proc-a", clock, **cfg)
    b = await _ledger(pg_url, "proc-b", clock, **cfg)
    try:
        x, y = await _hold(a, 3_000), await _hold(b, 3_000)  # day 14
        clock.advance(0.2)  # day 15: each process checks at its first settle
        for ledger in (a, b):
            await ledger.settle((await _hold(ledger, 200)).hold_id, Usage(1, 0, 99))
        await a.settle(x.hold_id, Usage(1, 0, 2_399))
        await b.settle(y.hold_id, Usage(1, 0, 2_699))
        assert not (await a.kill_state()).killed  # 5,300 > 5,000 not checked yet
        if then == "sweep":
            assert await a.sweep() == 0
        else:
            clock.advance(AUTO_KILL_CHECK_S)
            await a.settle((await _hold(a, 2)).hold_id, Usage(1, 0, 0))
        state = await b.kill_state()
        assert state.killed and state.reason.startswith("automatic: settled $0.0053")
    finally:
        await a.close()
        await b.close()


async def test_settles_far_under_the_threshold_check_once_per_interval(
    pg_url: str, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cheap part: ten paid settles of one process within AUTO_KILL_CHECK_S, far
    under the threshold, read the burn rate once; the first settle after the interval
    reads it again."""
    a = await _ledger(
        pg_url, "proc-a", clock, global_daily_musd=10**9, auto_kill_fraction=Decimal("0.5")
    )
    reads = 0
    real = pg_rows.burn_rate

    async def counting(*args: Any) -> Any:
        nonlocal reads
        reads += 1
        return await real(*args)

    monkeypatch.setattr(pg_store, "burn_rate", counting)
    try:
        for _ in range(10):
            await a.settle((await _hold(a, 100)).hold_id, Usage(1, 0, 49))
        assert reads == 1
        clock.advance(AUTO_KILL_CHECK_S)
        await a.settle((await _hold(a, 100)).hold_id, Usage(1, 0, 49))
        assert reads == 2
    finally:
        await a.close()


@pytest.mark.parametrize("scope", [None, ("user", "1"), ("team", "red")])
async def test_a_hold_without_a_read_sees_another_process_kill(
    pg_url: str, clock: ManualClock, scope: tuple[str, str] | None
) -> None:
    """A's second hold in an operation it admitted is granted without reading the
    operation, kill switches and limits first; a kill switch B tripped meanwhile
    (global, A's user, A's team) still refuses it, with nothing held."""
    a = await _ledger(pg_url, "proc-a", clock, global_daily_musd=100_000)
    b = await _ledger(pg_url, "proc-b", clock, global_daily_musd=100_000)
    try:
        await a.team_add("red", 1)
        op = await a.begin_operation(1, Origin.CHAT, max_musd=10**9, max_requests=10**6)
        call = {"provider": "test", "model": "m", "input_tokens": 1, "max_tokens": 99}
        await a.reserve(op, await a.begin_request(op, "x"), **call)  # type: ignore[arg-type]
        await b.kill("test", by=9, scope=scope)
        req = await a.begin_request(op, "y")
        with pytest.raises(HoldRefused) as refused:
            await a.reserve(op, req, **call)  # type: ignore[arg-type]
        assert refused.value.refusal.reason is RefusalReason.KILL
        assert await _global_day(pg_url) == (0, 100, 0, 0)
    finally:
        await a.close()
        await b.close()


async def test_a_hold_without_a_read_sees_another_process_limit(
    pg_url: str, clock: ManualClock
) -> None:
    """A limit B lowered after A's last read refuses A's next hold (granted without a
    read, it would have been checked against the old limit): the limits' digest
    differs, the locked transaction reads the new limit and refuses."""
    a = await _ledger(pg_url, "proc-a", clock, global_daily_musd=100_000)
    b = await _ledger(pg_url, "proc-b", clock, global_daily_musd=100_000)
    try:
        op = await a.begin_operation(1, Origin.CHAT, max_musd=10**9, max_requests=10**6)
        req = await a.begin_request(op, "x")
        await a.reserve(op, req, provider="test", model="m", input_tokens=1, max_tokens=99)
        await b.set_limit(Level.GLOBAL, "", Window.DAY, 500)
        req = await a.begin_request(op, "y")
        with pytest.raises(HoldRefused) as refused:
            await a.reserve(op, req, provider="test", model="m", input_tokens=1, max_tokens=449)
        assert (refused.value.refusal.reason, refused.value.refusal.level) == (
            RefusalReason.BUSY,  # the held 100 µUSD blocks it
            Level.GLOBAL,
        )
        assert await _global_day(pg_url) == (0, 100, 0, 0)
    finally:
        await a.close()
        await b.close()
