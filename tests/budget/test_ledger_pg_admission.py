"""An operation's admission on PostgreSQL as a read and a guarded insert (decision 318):
a value the decision rests on that changes between the two sends it to the locked
transaction with nothing written, and the in-flight limit stays exact across processes."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import asyncpg
import pytest

from budget.errors import HoldRefused
from budget.ledger import Ledger
from budget.protocol import OperationTicket
from budget.storage.postgres import admission as admitting
from budget.storage.postgres.rows import asyncpg_dsn
from budget.storage.postgres.store import PgStore
from budget.storage.postgres.timestamps import use_epoch_seconds
from budget.storage.store import Admission
from budget.types import Origin
from tests.budget.ledger_helpers import BASE_CONFIG, card
from tests.support.clocks import ManualClock

CONFIG = replace(BASE_CONFIG, user_max_inflight=2)
USER = 41


@pytest.fixture
def pg_url(pg_ledger_url: str) -> str:
    """Every test here starts on the ledger tables and the admission's functions."""
    return pg_ledger_url


async def _ledger(url: str, name: str, clock: ManualClock) -> Ledger:
    store = PgStore(url, CONFIG, process_id=name, clock=clock, run_heartbeat=False)
    ledger = Ledger(store, CONFIG, card(), clock, sweep_previous_on_start=False)
    await ledger.start(run_sweeper=False)
    return ledger


class _Between:
    """An asyncpg connection that runs ``change`` after the admission's read, before its
    guarded insert (the one ``fetchval`` of :func:`admitting.begin_operation_at_once`)."""

    def __init__(self, conn: Any, change: Callable[[], Awaitable[object]]) -> None:
        self._conn = conn
        self._change = change

    async def fetchrow(self, sql: str, *args: Any) -> Any:
        return await self._conn.fetchrow(sql, *args)

    async def fetchval(self, sql: str, *args: Any) -> Any:
        await self._change()
        return await self._conn.fetchval(sql, *args)


async def _other_operation(ledger: Ledger) -> None:
    await ledger.begin_operation(USER, Origin.CHAT)


async def _user_killed(ledger: Ledger) -> None:
    await ledger.kill("test", by=1, scope=("user", str(USER)))


async def _joins_a_team(ledger: Ledger) -> None:
    await ledger.team_add("t", USER)


async def _process_gone(ledger: Ledger) -> None:
    assert isinstance(ledger.store, PgStore)
    dsn = asyncpg_dsn(ledger.store._url)
    admin = await asyncpg.connect(dsn)
    try:
        await admin.execute("DELETE FROM budget_processes WHERE process_id = 'p-a'")
    finally:
        await admin.close()


@pytest.mark.parametrize(
    "change",
    [_other_operation, _user_killed, _joins_a_team, _process_gone],
    ids=lambda f: f.__name__,
)
async def test_a_value_the_admission_rests_on_changed_before_its_insert_writes_nothing(
    pg_url: str, change: Callable[[Ledger], Awaitable[None]]
) -> None:
    """The read admits, then (before the guarded insert) another operation of the user
    begins, a kill switch of the user trips, the user joins a team, or this process's
    row goes: the insert writes nothing and says so (``None``: the caller runs the
    locked transaction), whatever changed."""
    clock = ManualClock(datetime(2026, 3, 2, 12, 0, tzinfo=UTC))
    ledger = await _ledger(pg_url, "p-a", clock)
    other = await _ledger(pg_url, "p-b", clock)
    conn = await asyncpg.connect(asyncpg_dsn(pg_url))
    try:
        await use_epoch_seconds(conn)
        admission = Admission(uuid.uuid4().hex, USER, Origin.CHAT, 10_000, 4)
        wrapped = _Between(conn, lambda: change(other))
        ticket = await admitting.begin_operation_at_once(
            wrapped, CONFIG, "p-a", clock.now(), admission
        )
        assert ticket is None
        rows = await conn.fetchval(
            "SELECT count(*) FROM budget_operations WHERE operation_id = $1",
            admission.operation_id,
        )
        assert rows == 0
        unchanged = Admission(uuid.uuid4().hex, 42, Origin.CHAT, 10_000, 4)
        admitted = await admitting.begin_operation_at_once(
            conn, CONFIG, "p-b", clock.now(), unchanged
        )
        assert isinstance(admitted, OperationTicket)  # nothing changed: admitted at once
    finally:
        await conn.close()
        await other.close()
        await ledger.close()


async def test_the_in_flight_limit_is_exact_across_processes_admitting_at_once(
    pg_url: str,
) -> None:
    """Two processes admit 24 operations of one user at once, USER_MAX_INFLIGHT 2:
    exactly 2 are admitted (the others refused as busy), whichever way each went — the
    guarded insert or, after a changed read, the locked transaction; and both stores
    took the two-statement way (their database has the functions)."""
    clock = ManualClock(datetime(2026, 3, 2, 12, 0, tzinfo=UTC))
    one, two = await _ledger(pg_url, "p-a", clock), await _ledger(pg_url, "p-b", clock)
    try:
        assert all(isinstance(x.store, PgStore) and x.store.admission_at_once for x in (one, two))

        async def attempt(ledger: Ledger) -> object:
            try:
                return await ledger.begin_operation(USER, Origin.CHAT)
            except HoldRefused as refused:
                return refused

        results = await asyncio.gather(*(attempt(one if i % 2 else two) for i in range(24)))
        admitted = [r for r in results if not isinstance(r, HoldRefused)]
        assert len(admitted) == CONFIG.user_max_inflight
        assert (await one.user_status(USER)).inflight == CONFIG.user_max_inflight
    finally:
        await one.close()
        await two.close()
