"""The PostgreSQL ledger shared by several processes: exact counts across OS processes,
liveness (only dead processes' holds are swept), a kill switch seen by every process."""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import asyncpg
import pytest

from budget.errors import HoldRefused, LedgerUnavailable
from budget.ledger import Ledger
from budget.storage.postgres.rows import asyncpg_dsn
from budget.storage.postgres.store import POOL_SIZE, PgStore
from budget.types import Level, Origin, RefusalReason, Usage
from tests.budget.ledger_helpers import BASE_CONFIG, card
from tests.budget.pg_worker import team_user
from tests.support.clocks import ManualClock
from tests.support.forked import run_module


@pytest.fixture
def pg_url(pg_ledger_url: str) -> str:
    """Every test here starts on the ledger tables (``pg_ledger_url``: a copy of a template)."""
    return pg_ledger_url


ROOT = Path(__file__).resolve().parents[2]


async def _run(url: str, case: str, shares: list[int], flags: Path | None = None) -> list[str]:
    """Run one worker process per share (``python -m tests.budget.pg_worker``,
    forked from the suite's fork server), all starting at the same instant; their result
    lines (``flags``: the folder of the kill case's signal files)."""
    start = time.time() + 2.5  # every process is up (imports, pool) before the start
    extra = [] if flags is None else [str(flags)]
    runs = [
        run_module(
            "tests.budget.pg_worker",
            [url, case, str(n), str(start), str(index), *extra],
            env=os.environ,
            cwd=ROOT,
            timeout=120,
        )
        for index, n in enumerate(shares)
    ]
    out = []
    for code, stdout, stderr in await asyncio.gather(*runs):
        assert code == 0, stderr[-2000:]
        out.append(stdout.strip())
    return out


async def _spread(url: str, case: str, shares: list[int]) -> list[int]:
    """:func:`_run` for the cases that print a grant count (then refusal levels)."""
    return [int(line.split()[0]) for line in await _run(url, case, shares)]


async def test_three_processes_grant_exactly_what_fits(pg_url: str) -> None:
    """3 OS processes on one database: 1,000 concurrent $0.003 holds on a $1.00 global
    limit → exactly 333 granted; 8 simultaneous first requests of one new user
    ($0.010 user limit, $0.004 each) over the 3 processes → exactly 2."""
    granted = await _spread(pg_url, "global", [334, 333, 333])
    assert sum(granted) == 333
    granted = await _spread(pg_url, "user", [3, 3, 2])
    assert sum(granted) == 2


async def test_three_processes_team_refusal_holds_nothing_and_kill_reaches_all(
    pg_url: str, tmp_path: Path
) -> None:
    """3 OS processes: 12 concurrent holds of $0.003 by members of one team ($0.010 team
    limit) → exactly 3 granted, the 9 refusals name the team level and hold nothing
    anywhere (every bucket holds exactly the 3 grants); a kill switch tripped by one
    process refuses the next admission of the two others."""
    clock = ManualClock(datetime(2026, 1, 14, 12, 0, tzinfo=UTC))
    admin = await _ledger(pg_url, "admin", clock)
    try:
        for index in range(3):
            for i in range(4):
                await admin.team_add("t", team_user(index, i))
    finally:
        await admin.close()
    lines = await _run(pg_url, "team", [4, 4, 4])
    results = [line.split() for line in lines]
    assert sum(int(r[0]) for r in results) == 3
    assert sorted(level for r in results for level in r[1:]) == ["team"] * 9
    conn = await asyncpg.connect(asyncpg_dsn(pg_url))
    try:
        # held, or booked at the ceiling if a process that started late swept the
        # holds of one that had already finished
        counted = await conn.fetch(
            "SELECT level, SUM(held_musd + settled_musd) FROM budget_buckets"
            " GROUP BY level ORDER BY level"
        )
        holds = await conn.fetchval("SELECT COUNT(*) FROM budget_holds")
    finally:
        await conn.close()
    # day + hour + month windows: each level counts the 3 grants three times, the
    # refusals nowhere
    assert [tuple(r) for r in counted] == [("global", 27_000), ("team", 27_000), ("user", 27_000)]
    assert holds == 3

    assert await _run(pg_url, "kill", [1, 1, 1], tmp_path) == [
        "killed",
        "kill",
        "kill",
    ]


async def _ledger(url: str, name: str, clock: ManualClock, **cfg: object) -> Ledger:
    config = replace(BASE_CONFIG, **cfg)  # type: ignore[arg-type]
    store = PgStore(url, config, process_id=name, clock=clock, run_heartbeat=False)
    ledger = Ledger(store, config, card(), clock, sweep_previous_on_start=False)
    await ledger.start(run_sweeper=False)
    return ledger


async def test_only_a_dead_process_holds_are_swept_and_kill_reaches_every_process(
    pg_url: str,
) -> None:
    """Process B never sweeps the holds of live process A; once A's heartbeat is older
    than PROCESS_DEAD_AFTER_SECONDS (and the hold's TTL has not passed), B books A's
    hold at its ceiling, estimated (A's later settle books what it spent). A kill set
    by B refuses process C's next admission; a team refusal holds nothing anywhere."""
    clock = ManualClock(datetime(2026, 1, 14, 12, 0, tzinfo=UTC))
    cfg = {"global_daily_musd": 100_000, "team_daily_musd": 500, "hold_ttl_s": 600.0}
    a = await _ledger(pg_url, "proc-a", clock, **cfg)
    b = await _ledger(pg_url, "proc-b", clock, **cfg)
    c: Ledger | None = None
    try:
        op = await a.begin_operation(1, Origin.CHAT)
        req = await a.begin_request(op, "x")
        hold = await a.reserve(op, req, provider="test", model="m", input_tokens=1, max_tokens=999)
        clock.advance(30)
        assert await b.sweep() == 0  # A is alive (heartbeat 30 s old)
        clock.advance(61)  # A silent for 91 s > 60; the hold's TTL (600 s) is far off
        assert await b.sweep() == 1
        st = await b.status()
        assert (st.outstanding_holds, st.expired_today, st.expired_booked_musd_today) == (
            0,
            1,
            1_000,
        )
        assert await a.settle(hold.hold_id, Usage(input_tokens=1, output_tokens=99)) == 100

        c = await _ledger(pg_url, "proc-c", clock, **cfg)
        await b.team_add("t", 2)
        op2 = await c.begin_operation(2, Origin.CHAT)
        req2 = await c.begin_request(op2, "y")
        with pytest.raises(HoldRefused) as refused:
            await c.reserve(op2, req2, provider="test", model="m", input_tokens=1, max_tokens=999)
        assert refused.value.refusal.level is Level.TEAM
        assert (await b.status()).outstanding_holds == 0
        assert (await b.store.audit())["mismatches"] == []

        await b.kill("test", by=9)
        with pytest.raises(HoldRefused) as killed:
            await c.begin_operation(3, Origin.CHAT)
        assert killed.value.refusal.reason is RefusalReason.KILL
    finally:
        for ledger in (a, b, c):
            if ledger is not None:
                await ledger.close()


async def _pair_watching_a(
    pg_url: str,
) -> tuple[ManualClock, Ledger, Ledger, PgStore, list[str]]:
    """Processes A and B on a new schema (hold TTL 600 s, one manual clock), and the
    list A's fence callback appends ``"fenced"`` to."""
    clock = ManualClock(datetime(2026, 1, 14, 12, 0, tzinfo=UTC))
    a = await _ledger(pg_url, "proc-a", clock, hold_ttl_s=600.0)
    b = await _ledger(pg_url, "proc-b", clock, hold_ttl_s=600.0)
    store = a.store
    assert isinstance(store, PgStore)
    fenced: list[str] = []
    store.on_fenced.append(lambda: fenced.append("fenced"))
    return clock, a, b, store, fenced


async def _beat(ledger: Ledger) -> None:
    store = ledger.store
    assert isinstance(store, PgStore)
    await store.beat()


async def test_a_dead_process_leaves_the_register_once_its_holds_are_swept(pg_url: str) -> None:
    """``budget_processes`` does not grow with every restart: a sweep deletes the row of
    a process silent for PROCESS_DEAD_AFTER_SECONDS, in the transaction that books its
    holds and ends its operations; a live process's row stays, as does the sweeper's.
    A process taken for dead that beats again is not registered again: it is fenced
    (and its later settle still books what it spent)."""
    clock = ManualClock(datetime(2026, 1, 14, 12, 0, tzinfo=UTC))
    a = await _ledger(pg_url, "proc-a", clock, hold_ttl_s=600.0)
    b = await _ledger(pg_url, "proc-b", clock, hold_ttl_s=600.0)
    c = await _ledger(pg_url, "proc-c", clock, hold_ttl_s=600.0)
    conn = await asyncpg.connect(asyncpg_dsn(pg_url))

    async def registered() -> list[str]:
        rows = await conn.fetch("SELECT process_id FROM budget_processes ORDER BY process_id")
        return [r["process_id"] for r in rows]

    try:
        op = await a.begin_operation(1, Origin.CHAT)
        req = await a.begin_request(op, "x")
        hold = await a.reserve(op, req, provider="test", model="m", input_tokens=1, max_tokens=999)
        assert await registered() == ["proc-a", "proc-b", "proc-c"]
        clock.advance(30)
        await _beat(c)  # c beats; a does not
        assert await b.sweep() == 0
        assert await registered() == ["proc-a", "proc-b", "proc-c"], "a is not dead yet"
        clock.advance(40)  # a silent for 70 s, c for 40 s
        assert await b.sweep() == 1
        assert await registered() == ["proc-b", "proc-c"]
        assert await conn.fetchval("SELECT COUNT(*) FROM budget_holds WHERE state = 'held'") == 0
        with pytest.raises(LedgerUnavailable):
            await _beat(a)  # it was alive after all: fenced
        assert await registered() == ["proc-b", "proc-c"]
        assert a.store.lost == "fenced"
        assert await a.settle(hold.hold_id, Usage(input_tokens=1, output_tokens=99)) == 100
    finally:
        await conn.close()
        for ledger in (a, b, c):
            await ledger.close()


async def test_a_process_taken_for_dead_is_fenced_and_granted_nothing(
    pg_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A's heartbeat stalls past PROCESS_DEAD_AFTER_SECONDS while one of its messages
    waits for its hold (operation begun) and another for its operation: B's sweep
    declares A dead (its row deleted, its operation ended). When A wakes, nothing
    of its is granted — no hold for the waiting operation, no new operation, so no
    provider call — its beat does not register it again, it is fenced once (one
    ERROR, its callback once) and asks the database nothing more. B and a new C
    go on."""
    clock, a, b, store, fenced = await _pair_watching_a(pg_url)
    try:
        op = await a.begin_operation(1, Origin.CHAT)
        req = await a.begin_request(op, "x")
        clock.advance(61)  # A stalls: no beat for 61 s > 60
        await _beat(b)
        await b.sweep()
        with pytest.raises(LedgerUnavailable):  # its operation was ended by the takeover
            await a.reserve(op, req, provider="test", model="m", input_tokens=1, max_tokens=999)
        with pytest.raises(LedgerUnavailable):  # the next message: no operation
            await a.begin_operation(2, Origin.CHAT)
        assert fenced == ["fenced"] and store.lost == "fenced"
        assert not await store.confirm_lease()
        with pytest.raises(LedgerUnavailable):
            await _beat(a)
        with pytest.raises(LedgerUnavailable):
            await a.begin_operation(3, Origin.CHAT)
        assert fenced == ["fenced"]
        errors = [r for r in caplog.records if "taken for dead" in r.getMessage()]
        assert len(errors) == 1 and errors[0].levelname == "ERROR"
        conn = await asyncpg.connect(asyncpg_dsn(pg_url))
        try:
            assert await conn.fetchval("SELECT COUNT(*) FROM budget_holds") == 0
            rows = await conn.fetch("SELECT process_id FROM budget_processes")
            assert {r["process_id"] for r in rows} == {"proc-b"}
        finally:
            await conn.close()
        c = await _ledger(pg_url, "proc-c", clock, hold_ttl_s=600.0)
        try:
            op_c = await c.begin_operation(1, Origin.CHAT)
            req_c = await c.begin_request(op_c, "x")
            await c.reserve(op_c, req_c, provider="test", model="m", input_tokens=1, max_tokens=9)
        finally:
            await c.close()
    finally:
        await a.close()
        await b.close()


async def test_a_grant_racing_the_declaration_is_refused_once_the_row_is_gone(
    pg_url: str,
) -> None:
    """The grant checks the holder's row in its own statement: A's operation is still
    open, but its row was deleted (declared dead by another process's look for lost
    messages) — its hold is refused with nothing held, and A is fenced."""
    clock = ManualClock(datetime(2026, 1, 14, 12, 0, tzinfo=UTC))
    a = await _ledger(pg_url, "proc-a", clock)
    store = a.store
    assert isinstance(store, PgStore)
    conn = await asyncpg.connect(asyncpg_dsn(pg_url))
    try:
        op = await a.begin_operation(1, Origin.CHAT)
        req = await a.begin_request(op, "x")
        await conn.execute("DELETE FROM budget_processes WHERE process_id = 'proc-a'")
        with pytest.raises(LedgerUnavailable):
            await a.reserve(op, req, provider="test", model="m", input_tokens=1, max_tokens=999)
        assert store.lost == "fenced"
        assert await conn.fetchval("SELECT COUNT(*) FROM budget_holds") == 0
        held = await conn.fetchval("SELECT COALESCE(SUM(held_musd), 0) FROM budget_buckets")
        assert held == 0
    finally:
        await conn.close()
        await a.close()


async def test_a_slow_process_within_dead_after_is_never_fenced(pg_url: str) -> None:
    """A's beats come late (59 s apart, PROCESS_DEAD_AFTER_SECONDS 60) while B sweeps
    in between: A is never taken for dead — its hold stays held, its lease is
    confirmed (by a beat, since less than one heartbeat of it was left), its next
    hold is granted, and it settles what it spent."""
    clock, a, b, store, fenced = await _pair_watching_a(pg_url)
    try:
        op = await a.begin_operation(1, Origin.CHAT)
        req = await a.begin_request(op, "x")
        hold = await a.reserve(op, req, provider="test", model="m", input_tokens=1, max_tokens=999)
        for _ in range(3):
            clock.advance(59)
            await _beat(b)
            assert await b.sweep() == 0
            assert store.lease_left() == pytest.approx(1.0)
            assert await store.confirm_lease()  # beats: the lease is 60 s again
            assert store.lease_left() == pytest.approx(60.0)
        req2 = await a.begin_request(op, "y")
        hold2 = await a.reserve(op, req2, provider="test", model="m", input_tokens=1, max_tokens=9)
        assert await a.settle(hold.hold_id, Usage(input_tokens=1, output_tokens=99)) == 100
        assert await a.settle(hold2.hold_id, Usage(input_tokens=1, output_tokens=9)) == 10
        assert fenced == [] and store.lost == ""
    finally:
        await a.close()
        await b.close()


async def test_a_beat_does_not_wait_behind_a_burst_for_a_pool_connection(pg_url: str) -> None:
    """Every connection of the ledger's pool is busy (a burst);
    the heartbeat still lands at once on its own connection, stamped with the time it
    ran — not one taken before it waited for the pool."""
    clock = ManualClock(datetime(2026, 1, 14, 12, 0, tzinfo=UTC))
    a = await _ledger(pg_url, "proc-a", clock)
    store = a.store
    assert isinstance(store, PgStore) and store._pool is not None
    busy = [await store._pool.acquire() for _ in range(POOL_SIZE)]
    try:
        clock.advance(30)
        await asyncio.wait_for(store.beat(), 10)
        conn = await asyncpg.connect(asyncpg_dsn(pg_url))
        try:
            beat = await conn.fetchval(
                "SELECT heartbeat_at FROM budget_processes WHERE process_id = 'proc-a'"
            )
        finally:
            await conn.close()
        assert beat == clock.now()
    finally:
        for held in busy:
            await store._pool.release(held)
        await a.close()
