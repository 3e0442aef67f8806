"""The PostgreSQL ledger's times are ``timestamptz`` (migration
``0022_ledger_timestamptz``): each instant is stored exactly to the microsecond, read
back as the same epoch seconds by the ledger's pool (:mod:`budget.storage.postgres.timestamps`) and
by
SQLAlchemy (:class:`budget.storage.tables.EpochSeconds`), and the windows, expiries and
late settlements that depend on them behave as with epoch doubles."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import asyncpg
import pytest
import sqlalchemy as sa

from budget.books.export import booked_attempts
from budget.books.periods import Period
from budget.kernel.db import create_engine
from budget.ledger import Ledger
from budget.protocol import HoldTicket
from budget.storage.postgres.rows import asyncpg_dsn
from budget.storage.postgres.store import PgStore
from budget.storage.postgres.timestamps import use_epoch_seconds
from budget.storage.tables import holds, operations
from budget.types import Origin, Usage
from tests.budget.ledger_helpers import BASE_CONFIG, card
from tests.support.clocks import ManualClock

#: A grant one microsecond before midnight UTC (the last instant of 2026-01-14).
LAST_US = datetime(2026, 1, 14, 23, 59, 59, 999_999, tzinfo=UTC)
TTL_S = 300.0


@pytest.fixture
async def ledger(pg_migrated_url: str) -> AsyncIterator[Ledger]:
    """A started PostgreSQL ledger on a database migrated to head, its clock at
    :data:`LAST_US`."""
    clock = ManualClock(LAST_US)
    cfg = replace(BASE_CONFIG, hold_ttl_s=TTL_S)
    store = PgStore(pg_migrated_url, cfg, process_id="p-times", clock=clock, run_heartbeat=False)
    made = Ledger(store, cfg, card(), clock)
    await made.start(run_sweeper=False)
    yield made
    await made.close()


def _clock(ledger: Ledger) -> ManualClock:
    assert isinstance(ledger.clock, ManualClock)
    return ledger.clock


async def _hold(ledger: Ledger, user_id: int) -> HoldTicket:
    """A 100 µUSD hold (10 tokens in, 90 at most out) of an operation of ``user_id``."""
    op = await ledger.begin_operation(user_id, Origin.CHAT)
    req = await ledger.begin_request(op, f"fp{user_id}")
    return await ledger.reserve(op, req, provider="test", model="m", input_tokens=10, max_tokens=90)


async def _buckets(url: str) -> dict[tuple[str, str, str, str], tuple[int, int, int]]:
    """``(level, scope, win, wkey) → (settled, held, late)`` of every bucket with money."""
    conn = await asyncpg.connect(asyncpg_dsn(url))
    try:
        rows = await conn.fetch(
            "SELECT level, scope, win, wkey, settled_musd, held_musd, late_musd FROM budget_buckets"
            " WHERE settled_musd <> 0 OR held_musd <> 0 OR late_musd <> 0"
        )
    finally:
        await conn.close()
    return {(r[0], r[1], r[2], r[3]): (r[4], r[5], r[6]) for r in rows}


async def test_a_holds_start_time_round_trips_to_the_microsecond(
    ledger: Ledger, pg_migrated_url: str
) -> None:
    """The grant time is the clock's instant in the ``timestamptz`` column (no codec:
    asyncpg's datetime), the very epoch float through the ledger's codec and through
    SQLAlchemy, and the books' export (``python -m budget export``) finds the attempt
    in the day it was granted, with that time."""
    t = LAST_US.timestamp()
    hold = await _hold(ledger, 7)
    plain = await asyncpg.connect(asyncpg_dsn(pg_migrated_url))
    coded = await asyncpg.connect(asyncpg_dsn(pg_migrated_url))
    try:
        await use_epoch_seconds(coded)
        query = "SELECT granted_at, expires_at FROM budget_holds WHERE hold_id = $1"
        assert tuple(await plain.fetchrow(query, hold.hold_id) or ()) == (
            LAST_US,
            LAST_US + timedelta(seconds=TTL_S),
        )
        assert tuple(await coded.fetchrow(query, hold.hold_id) or ()) == (t, t + TTL_S)
        started = await coded.fetchval("SELECT started_at FROM budget_operations")
        assert started == t
    finally:
        await plain.close()
        await coded.close()
    _clock(ledger).advance(1)
    assert await ledger.settle(hold.hold_id, Usage(10, 0, 40)) == 50
    engine = create_engine(pg_migrated_url)
    try:
        async with engine.connect() as conn:
            row = (
                await conn.execute(sa.select(holds.c.granted_at, holds.c.ended_at, holds.c.state))
            ).one()
            assert tuple(row) == (t, t + 1, "settled")
            # a float compared with the column is converted too (the claims' liveness check)
            found = await conn.scalar(
                sa.select(sa.func.count()).where(operations.c.started_at >= t)
            )
            assert found == 1
        midnight = LAST_US.replace(hour=0, minute=0, second=0, microsecond=0)
        day = Period("2026-01-14", "UTC", midnight, midnight + timedelta(days=1))
        attempts = [a async for a in booked_attempts(engine, day)]
        assert [(a.hold_id, a.granted_at) for a in attempts] == [(hold.hold_id, t)]
        # [start, end) to the microsecond: a period ending at the grant leaves it out
        before = Period("2026-01-14", "UTC", midnight, LAST_US)
        assert [a async for a in booked_attempts(engine, before)] == []
    finally:
        await engine.dispose()


async def test_an_expiry_is_exact_to_the_microsecond(ledger: Ledger) -> None:
    """A hold expires at its grant + TTL, not a microsecond sooner (``expires_at <=
    now`` between ``timestamptz`` values)."""
    await _hold(ledger, 7)
    clock = _clock(ledger)
    clock.advance(TTL_S - 0.000_001)
    assert await ledger.sweep() == 0
    clock.advance(0.000_001)
    assert clock.now() == LAST_US + timedelta(seconds=TTL_S)
    assert await ledger.sweep() == 1


async def test_settlements_after_midnight_land_in_the_window_the_call_started(
    ledger: Ledger, pg_migrated_url: str
) -> None:
    """Holds granted in the last microsecond of 2026-01-14: one settled on time just
    after midnight, one expired (booked at its ceiling) and settled late on the 15th —
    all their money is in the 14th's day and 23:00 hour buckets, none in the 15th's."""
    on_time = await _hold(ledger, 7)
    late = await _hold(ledger, 8)
    clock = _clock(ledger)
    clock.advance(0.5)
    assert await ledger.settle(on_time.hold_id, Usage(10, 0, 40)) == 50
    clock.advance(TTL_S)
    assert await ledger.sweep() == 1  # ``late`` booked at its ceiling, estimated
    clock.advance(60)
    assert await ledger.settle(late.hold_id, Usage(10, 0, 20)) == 30
    found = await _buckets(pg_migrated_url)
    assert found, "money was booked"
    assert {wkey for *_, wkey in found} == {"2026-01-14", "2026-01-14T23:00Z", "2026-01"}, found
    for win, wkey in (("day", "2026-01-14"), ("hour", "2026-01-14T23:00Z")):
        assert found[("global", "", win, wkey)][:2] == (80, 0)
        assert found[("user", "7", win, wkey)][:2] == (50, 0)
        assert found[("user", "8", win, wkey)][:2] == (30, 0)
