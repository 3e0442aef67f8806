"""A process's liveness on the PostgreSQL ledger: its connection gone is noticed in
seconds, a stall or a cut connection is never taken for death.

Each store holds a session-level advisory lock on its id on its heartbeat's connection
(``budget/storage/postgres/lease.py``). Before it, a SIGKILLed process's holds stayed
held until PROCESS_DEAD_AFTER_SECONDS (60 s by default); now a sweeper that can take the
lock, on the server lifetime of the owner's last beat, declares it dead once its
heartbeat is two heartbeats old. The clock is a :class:`ManualClock`: the stores beat at
open and at each sweep only (``run_heartbeat=False``); a process "dies" here by losing
its heartbeat's connection (``pg_terminate_backend``, what the server sees of a SIGKILL).
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from datetime import UTC, datetime

import asyncpg
import pytest

from budget.ledger import Ledger
from budget.protocol import HoldTicket
from budget.storage.postgres.rows import asyncpg_dsn
from budget.storage.postgres.store import PgStore
from budget.types import Origin
from tests.budget.ledger_helpers import BASE_CONFIG, card
from tests.support.clocks import ManualClock


@pytest.fixture
def pg_url(pg_ledger_url: str) -> str:
    """Every test here starts on the ledger tables (``pg_ledger_url``: a copy of a template)."""
    return pg_ledger_url


CONFIG = replace(BASE_CONFIG, process_heartbeat_s=2.0, process_dead_after_s=60.0, hold_ttl_s=600.0)
GONE_S = CONFIG.process_gone_after_s  # 4 s


async def _ledger(url: str, name: str, clock: ManualClock) -> Ledger:
    store = PgStore(url, CONFIG, process_id=name, clock=clock, run_heartbeat=False)
    ledger = Ledger(store, CONFIG, card(), clock, sweep_previous_on_start=False)
    await ledger.start(run_sweeper=False)
    return ledger


def _store(ledger: Ledger) -> PgStore:
    store = ledger.store
    assert isinstance(store, PgStore)
    return store


async def _held(ledger: Ledger) -> HoldTicket:
    op = await ledger.begin_operation(1, Origin.CHAT)
    req = await ledger.begin_request(op, "question")
    return await ledger.reserve(op, req, provider="test", model="m", input_tokens=1, max_tokens=99)


async def _cut(admin: asyncpg.Connection, ledger: Ledger) -> None:
    """End the heartbeat connection of ``ledger`` from the server's side, as a SIGKILL
    of its process (or a cut network) does, and wait until the server let it go."""
    conn = _store(ledger)._beat_conn
    assert conn is not None
    pid = conn.get_server_pid()
    assert await admin.fetchval("SELECT pg_terminate_backend($1)", pid)
    for _ in range(200):
        if not await admin.fetchval("SELECT count(*) FROM pg_stat_activity WHERE pid = $1", pid):
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the backend did not end")


async def _registered(admin: asyncpg.Connection) -> list[str]:
    rows = await admin.fetch("SELECT process_id FROM budget_processes ORDER BY process_id")
    return [r["process_id"] for r in rows]


async def test_a_process_whose_connection_is_gone_is_dead_after_two_heartbeats(
    pg_url: str,
) -> None:
    """A holds a call and loses its heartbeat's connection: B leaves it alone while A's
    last heartbeat is younger than two heartbeats (4 s), then declares it dead and books
    its hold at the ceiling — 56 s before PROCESS_DEAD_AFTER_SECONDS would have."""
    clock = ManualClock(datetime(2026, 1, 14, 12, 0, tzinfo=UTC))
    admin = await asyncpg.connect(asyncpg_dsn(pg_url))
    a = await _ledger(pg_url, "proc-a", clock)
    b = await _ledger(pg_url, "proc-b", clock)
    try:
        hold = await _held(a)
        locked = await admin.fetchval(
            "SELECT locked_on = pg_postmaster_start_time() FROM budget_processes"
            " WHERE process_id = 'proc-a'"
        )
        assert locked is True
        await _cut(admin, a)
        clock.advance(GONE_S - 0.5)
        assert await b.sweep() == 0, "a heartbeat younger than two heartbeats: not yet"
        clock.advance(1.0)
        assert await b.sweep() == 1
        assert await _registered(admin) == ["proc-b"]
        state = await admin.fetchval(
            "SELECT state FROM budget_holds WHERE hold_id = $1", hold.hold_id
        )
        assert state == "expired"
        assert _store(b).lease_left() > 0  # the sweeper itself is fine
    finally:
        await a.close()
        await b.close()
        await admin.close()


async def test_a_stalled_process_keeps_its_connection_and_is_dead_only_after_dead_after(
    pg_url: str,
) -> None:
    """A stalls (no beat at all) but its connection stays open, its lock held: B does not
    take it for dead for PROCESS_DEAD_AFTER_SECONDS, however old its heartbeat."""
    clock = ManualClock(datetime(2026, 1, 14, 12, 0, tzinfo=UTC))
    admin = await asyncpg.connect(asyncpg_dsn(pg_url))
    a = await _ledger(pg_url, "proc-a", clock)
    b = await _ledger(pg_url, "proc-b", clock)
    try:
        await _held(a)
        clock.advance(59.0)
        assert await b.sweep() == 0
        assert await _registered(admin) == ["proc-a", "proc-b"]
        clock.advance(2.0)
        assert await b.sweep() == 1
        assert await _registered(admin) == ["proc-b"]
    finally:
        await a.close()
        await b.close()
        await admin.close()


async def test_a_live_process_whose_connection_was_cut_takes_its_lock_back(
    pg_url: str,
) -> None:
    """A's heartbeat connection is cut under it: the store notices at once (its beat
    loop beats then), its next beat opens a new connection and takes its lock back, and
    B never takes it for dead, even two heartbeats later without a beat."""
    clock = ManualClock(datetime(2026, 1, 14, 12, 0, tzinfo=UTC))
    admin = await asyncpg.connect(asyncpg_dsn(pg_url))
    a = await _ledger(pg_url, "proc-a", clock)
    b = await _ledger(pg_url, "proc-b", clock)
    try:
        store = _store(a)
        await _cut(admin, a)
        await asyncio.wait_for(store.connection_lost.wait(), 10)
        clock.advance(1.0)
        await store.beat()  # what the beat loop does at once
        clock.advance(GONE_S + 1.0)
        assert await b.sweep() == 0
        assert await _registered(admin) == ["proc-a", "proc-b"]
        assert not store.fenced
    finally:
        await a.close()
        await b.close()
        await admin.close()


async def test_a_lock_taken_on_another_server_lifetime_says_nothing(pg_url: str) -> None:
    """After a server restart or a failover every lock is gone with every connection:
    a process that last beat on an earlier server lifetime (``locked_on`` older than
    this server's start), or an older version that wrote no ``locked_on``, is judged by
    its heartbeat alone."""
    clock = ManualClock(datetime(2026, 1, 14, 12, 0, tzinfo=UTC))
    admin = await asyncpg.connect(asyncpg_dsn(pg_url))
    a = await _ledger(pg_url, "proc-a", clock)
    b = await _ledger(pg_url, "proc-b", clock)
    try:
        await admin.execute(
            "UPDATE budget_processes SET locked_on = locked_on - interval '1 hour'"
            " WHERE process_id = 'proc-a'"
        )
        await admin.execute(
            "INSERT INTO budget_processes (process_id, started_at, heartbeat_at)"
            " SELECT 'old-version', started_at, heartbeat_at FROM budget_processes"
            " WHERE process_id = 'proc-a'"
        )
        await _cut(admin, a)
        clock.advance(GONE_S + 10.0)
        assert await b.sweep() == 0
        assert await _registered(admin) == ["old-version", "proc-a", "proc-b"]
        clock.advance(60.0)
        await b.sweep()
        assert await _registered(admin) == ["proc-b"]
    finally:
        await a.close()
        await b.close()
        await admin.close()
