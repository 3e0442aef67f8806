"""A PostgreSQL hold commits without waiting for the disk, then waits for the flush
(:data:`budget.storage.postgres.holds.FLUSH`), so the global bucket rows are not locked
across it; ``reserve`` returns only once the hold is on disk. A settle commits without
waiting for the disk: a crash may lose it, never the hold, and the hold it leaves is
booked at its ceiling (``docs/decisions/315-a-hold-flushes-after-its-locks.md``).

The crash is a durable server's immediate shutdown (``SIGQUIT``: no checkpoint, the
WAL buffers not yet written are lost, as in a power cut) with the WAL writer's own
flushes 10 s apart, so only what was flushed survives the restart."""

from __future__ import annotations

import contextlib
import shutil
import signal
import tempfile
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from sqlalchemy.engine import make_url

from budget.ledger import Ledger
from budget.protocol import HoldTicket
from budget.storage.postgres import holds as pg_holds
from budget.storage.postgres.rows import asyncpg_dsn
from budget.storage.postgres.store import PgStore
from budget.types import Origin, Usage
from tests.budget.ledger_helpers import BASE_CONFIG, card, create_pg_schema
from tests.support.clocks import ManualClock
from tests.support.pg import PgServer, start_server
from tests.support.pg_wire import WireCounter

#: The WAL writer's pause (its longest): no flush of its own within a test.
_SLOW_WAL_WRITER = ("wal_writer_delay=10000ms",)
_CEILING = 10


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(datetime(2026, 1, 14, 12, 0, tzinfo=UTC))


async def _ledger(url: str, name: str, clock: ManualClock, *, quick: bool = True) -> Ledger:
    store = PgStore(
        url, BASE_CONFIG, process_id=name, clock=clock, run_heartbeat=False, quick_holds=quick
    )
    ledger = Ledger(store, BASE_CONFIG, card(), clock, sweep_previous_on_start=False)
    await ledger.start(run_sweeper=False)
    return ledger


async def _hold(ledger: Ledger) -> HoldTicket:
    """A hold of :data:`_CEILING` µUSD (1 input token + 9 max tokens at test:m)."""
    op = await ledger.begin_operation(1, Origin.CHAT, max_musd=10**9, max_requests=10**6)
    req = await ledger.begin_request(op, "fp")
    return await ledger.reserve(
        op, req, provider="test", model="m", input_tokens=1, max_tokens=_CEILING - 1
    )


async def _rows(url: str, sql: str) -> list[Any]:
    conn = await asyncpg.connect(asyncpg_dsn(url))
    try:
        return list(await conn.fetch(sql))
    finally:
        await conn.close()


async def _global_day(url: str) -> tuple[int, int]:
    """(settled, held) of the global day bucket."""
    (row,) = await _rows(
        url,
        "SELECT settled_musd, held_musd FROM budget_buckets WHERE level = 'global' AND win = 'day'",
    )
    return int(row[0]), int(row[1])


def _crash_and_restart(server: PgServer) -> PgServer:
    """Immediate shutdown (nothing more written), then the same data folder and port."""
    server.process.send_signal(signal.SIGQUIT)
    server.process.wait(30)
    return start_server(
        base_dir=server.base_dir, port=server.port, durable=True, extra_settings=_SLOW_WAL_WRITER
    )


async def _drop(ledger: Ledger) -> None:
    """The crashed server's ledger: its connections are gone."""
    with contextlib.suppress(Exception):
        await ledger.close()


@pytest.fixture
def crashable() -> Iterator[dict[str, PgServer]]:
    """A durable server of its own (the caller crashes and restarts it), in a folder
    under the system temp folder (the server's user must reach it)."""
    base = Path(tempfile.mkdtemp(prefix="kopek-pg-crash-"))
    box = {"server": start_server(base_dir=base, durable=True, extra_settings=_SLOW_WAL_WRITER)}
    try:
        yield box
    finally:
        box["server"].stop()
        shutil.rmtree(base, ignore_errors=True)


async def test_a_quick_hold_is_on_disk_when_reserve_returns(
    crashable: dict[str, PgServer], clock: ManualClock
) -> None:
    server = crashable["server"]
    url = await server.acreate_database(prefix="quick")
    await create_pg_schema(url)
    ledger = await _ledger(url, "a", clock)
    assert ledger.store.quick_holds  # type: ignore[attr-defined]
    ticket = await _hold(ledger)
    crashable["server"] = _crash_and_restart(server)
    await _drop(ledger)
    (row,) = await _rows(url, "SELECT hold_id, state, ceiling_musd FROM budget_holds")
    assert (row[0], row[1], int(row[2])) == (ticket.hold_id, "held", _CEILING)
    assert await _global_day(url) == (0, _CEILING)


async def test_a_settle_lost_in_a_crash_leaves_its_hold_booked_at_the_ceiling(
    crashable: dict[str, PgServer], clock: ManualClock
) -> None:
    """Whatever the crash kept of the settle (which does not wait for the disk), the
    books never say less than was spent: the settle's actual, or — the settle lost,
    the hold still held — its ceiling once the next process's sweep expires it."""
    server = crashable["server"]
    url = await server.acreate_database(prefix="lost")
    await create_pg_schema(url)
    ledger = await _ledger(url, "a", clock)
    ticket = await _hold(ledger)
    actual = await ledger.settle(ticket.hold_id, Usage(1, 0, 3))
    assert 0 < actual < _CEILING
    crashable["server"] = _crash_and_restart(server)
    await _drop(ledger)
    (state,) = await _rows(url, "SELECT state FROM budget_holds")
    clock.advance(BASE_CONFIG.hold_ttl_s + 1)
    after = await _ledger(url, "b", clock)
    try:
        await after.sweep()
    finally:
        await after.close()
    settled, held = await _global_day(url)
    assert held == 0
    assert settled == (actual if state[0] == "settled" else _CEILING), state[0]
    assert settled >= actual


@pytest.mark.parametrize("quick", [True, False], ids=["quick", "durable commit"])
async def test_a_quick_hold_is_its_statement_then_the_flush(
    pg_server: PgServer, pg_ledger_url: str, clock: ManualClock, quick: bool
) -> None:
    """On the wire: the grant (for a quick hold, committing without the flush), then —
    before ``reserve`` returns — the flush; a hold whose commit waits is one statement."""
    url = make_url(pg_ledger_url)
    async with WireCounter(pg_server.host, pg_server.port) as wire:
        proxied = url.set(port=wire.port).render_as_string(hide_password=False)
        ledger = await _ledger(proxied, "a", clock, quick=quick)
        try:
            await ledger.settle((await _hold(ledger)).hold_id, Usage(1, 0, 3))  # warm
            op = await ledger.begin_operation(2, Origin.CHAT, max_musd=10**9, max_requests=9)
            req = await ledger.begin_request(op, "again")
            mark = wire.mark()
            await ledger.reserve(op, req, provider="test", model="m", input_tokens=1, max_tokens=9)
            trips = [t.statements for t in wire.since(mark) if t.statements]
        finally:
            await ledger.close()
    async_commit = "set_config('synchronous_commit', 'off', true)"
    assert trips[0][0].startswith("WITH b AS (INSERT INTO budget_buckets"), trips
    assert (async_commit in trips[0][0]) is quick, trips
    assert trips[1:] == ([(pg_holds.FLUSH,)] if quick else []), trips
