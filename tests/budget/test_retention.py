"""Retention (``RETENTION_DAYS``): pruning the ledger's per-attempt rows changes none of
the figures the books give for any day — ``/budget``'s status, the export's totals (in
two zones, one of them half an hour off UTC), the reconciliation of an old month with a
provider's file — on SQLite and on the real PostgreSQL server of ``tests/support/pg.py``;
only ended, not estimated rows of days before the window go, in batches of the size asked.
"""

from __future__ import annotations

import io
import random
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from budget.books.export import write_export
from budget.books.periods import Period, parse_period
from budget.books.reconcile import reconcile
from budget.books.reconcile_ledger import load_ledger
from budget.books.usage_export import parse_export
from budget.errors import HoldRefused
from budget.kernel.db import create_engine
from budget.ledger import Ledger
from budget.retention import LedgerRetention
from budget.storage.base import LedgerStore
from budget.storage.postgres.store import PgStore
from budget.storage.sqlite.store import SqliteStore
from budget.storage.tables import attempt_sums, event_sums, events, holds
from budget.types import Origin, Usage
from tests.budget.ledger_helpers import BACKENDS, BASE_CONFIG, card
from tests.support.clocks import ManualClock

START = datetime(2025, 10, 1, 7, 10, tzinfo=UTC)
DAYS = 75
KEEP = 31


@dataclass
class Books:
    ledger: Ledger
    engine: AsyncEngine
    clock: ManualClock


@pytest.fixture(params=BACKENDS)
async def books(request: pytest.FixtureRequest, db_path: Path) -> AsyncIterator[Books]:
    clock = ManualClock(START)
    cfg = replace(BASE_CONFIG, user_max_per_minute=100_000)
    store: LedgerStore
    if request.param == "postgres":
        url = request.getfixturevalue("pg_ledger_url")
        store = PgStore(url, cfg, process_id="p0", clock=clock, run_heartbeat=False)
    else:
        url = f"sqlite+aiosqlite:///{db_path}"
        store = SqliteStore(db_path, cfg, process_id="p0")
    ledger = Ledger(store, cfg, card(), clock)
    await ledger.start(run_sweeper=False)
    engine = create_engine(url)
    try:
        yield Books(ledger, engine, clock)
    finally:
        await ledger.close()
        await engine.dispose()


async def _attempt(b: Books, rng: random.Random) -> None:
    """One chat attempt: settled on test:m or free:f, released, or refused (a loop)."""
    user = rng.choice((1, 2, 3))
    op = await b.ledger.begin_operation(user, Origin.CHAT)
    fp = f"fp{b.clock.now().timestamp()}"
    req = await b.ledger.begin_request(op, fp)
    if rng.random() < 0.1:
        with pytest.raises(HoldRefused):
            await b.ledger.begin_request(op, fp)  # the same request again: a refusal event
    provider, model = rng.choice((("test", "m"), ("free", "f")))
    usage = Usage(rng.randint(10, 900), rng.randint(0, 5), rng.randint(1, 400))
    hold = await b.ledger.reserve(
        op, req, provider=provider, model=model, input_tokens=usage.input_tokens, max_tokens=500
    )
    if rng.random() < 0.1:
        await b.ledger.release(hold.hold_id)
    else:
        await b.ledger.settle(hold.hold_id, usage)
    await b.ledger.end_operation(op)


async def _fill(b: Books) -> None:
    """DAYS days of attempts at random times; on day 3 a hold expires (estimated)."""
    rng = random.Random(20251001)
    for day in range(DAYS):
        for _ in range(rng.randint(1, 4)):
            await _attempt(b, rng)
            b.clock.advance(rng.randint(60, 5_000))
        if day == 3:
            op = await b.ledger.begin_operation(9, Origin.CHAT)
            req = await b.ledger.begin_request(op, "crash")
            await b.ledger.reserve(
                op, req, provider="test", model="m", input_tokens=50, max_tokens=70
            )
            b.clock.advance(400)
            assert await b.ledger.sweep() == 1
        b.clock.set(START + timedelta(days=day + 1, minutes=rng.randint(0, 600)))


async def _totals(b: Books, period: Period, tz: str) -> tuple[str, Any]:
    out, totals = io.StringIO(), io.StringIO()
    summary = await write_export(b.engine, b.ledger.prices, period, out, totals, tz=tz)
    return totals.getvalue(), (summary.cost_musd, summary.list_price_musd, summary.estimated)


def _provider_file(totals_csv: str) -> bytes:
    """October as a provider would report it per day (one day's output tokens 3 off)."""
    lines = ["date,model,input_tokens,cached_input_tokens,output_tokens,cost_usd"]
    for row in totals_csv.splitlines()[1:]:
        group, key, _n, i, c, o, _r, cost, *_ = row.split(",")
        if group == "day":
            off = 3 if key.endswith("-10-09") else 0
            usd = Decimal(int(cost)) / 1_000_000
            lines.append(f"{key},m,{i},{c},{int(o) + off},{usd}")
    return ("\n".join(lines) + "\n").encode()


async def _figures(b: Books) -> dict[str, Any]:
    """Every figure the books give that pruning must leave as it was."""
    now = b.clock.now()
    october = parse_period("2025-10", "UTC", now)
    whole = Period("all", "UTC", START - timedelta(days=1), now + timedelta(days=1))
    test_october, _ = await _totals_for(b, october, "test")
    export = parse_export(_provider_file(test_october), "october.csv", "UTC")
    report = await reconcile(b.engine, b.ledger.prices, export, "test")
    side = await load_ledger(b.engine, b.ledger.prices, "test", october.start, october.end)
    return {
        "totals_utc": await _totals(b, whole, "UTC"),
        "totals_kolkata": await _totals(b, whole, "Asia/Kolkata"),
        "october": await _totals(b, october, "UTC"),
        "reconcile": (
            [(s.name, s.ok, s.lines) for s in report.steps],
            report.ledger_musd,
            report.export_musd,
            report.diff_rows,
            [(p.hold_id, p.new_musd) for p in report.plan],
        ),
        "exact": {slot: dict(models) for slot, models in side.exact.items()},
        "estimated": side.estimated,
        "status": replace(await b.ledger.status(), at=START),  # the pauses move the clock
        "buckets": sorted((await b.ledger.store.audit())["buckets"]),
        "events": await _event_counts(b),
    }


async def _totals_for(b: Books, period: Period, key: str) -> tuple[str, Any]:
    out, totals = io.StringIO(), io.StringIO()
    summary = await write_export(b.engine, b.ledger.prices, period, out, totals, key_name=key)
    return totals.getvalue(), summary.cost_musd


async def _event_counts(b: Books) -> dict[tuple[str, str, str], int]:
    """Events per (day, kind, reason): the rows left plus the counts kept of pruned ones."""
    found: dict[tuple[str, str, str], int] = {}
    async with b.engine.connect() as conn:
        left = await conn.execute(
            sa.select(events.c.day_key, events.c.kind, events.c.reason, sa.func.count()).group_by(
                events.c.day_key, events.c.kind, events.c.reason
            )
        )
        for day, kind, reason, n in left:
            found[(day, kind, reason or "")] = found.get((day, kind, reason or ""), 0) + int(n)
        for day, kind, reason, n in await conn.execute(sa.select(event_sums)):
            found[(day, kind, reason)] = found.get((day, kind, reason), 0) + int(n)
    return found


async def test_pruning_leaves_every_figure_of_the_books_as_it_was(books: Books) -> None:
    """Figures before == figures after, to the µUSD and the token; the old days' holds are
    gone but for the booking at its bound; the sums hold exactly what went."""
    await _fill(books)
    before = await _figures(books)
    async with books.engine.connect() as conn:
        old_booked = await conn.scalar(
            sa.select(sa.func.sum(holds.c.actual_musd)).where(
                holds.c.day_key < "2025-11-14", holds.c.estimated == 0
            )
        )
    retention = LedgerRetention(books.ledger.store, "UTC", books.clock, days=KEEP, batch=7)
    report = await retention.run_round()

    assert report.ran and report.before_day == "2025-11-14"
    assert report.rows["budget_holds"] > 7 and report.batches > len(report.rows)
    assert report.booked_musd == int(old_booked or 0) > 0
    after = await _figures(books)
    for name, figure in before.items():
        assert after[name] == figure, name
    async with books.engine.connect() as conn:
        left = (
            await conn.execute(
                sa.select(holds.c.estimated, holds.c.state).where(holds.c.day_key < "2025-11-14")
            )
        ).all()
        kept = await conn.scalar(sa.select(sa.func.sum(attempt_sums.c.cost_musd)))
    assert [tuple(r) for r in left] == [(1, "expired")]
    assert kept == report.booked_musd
    again = await LedgerRetention(books.ledger.store, "UTC", books.clock, days=KEEP).run_round()
    assert not again.ran  # one round per day per database


def test_the_holds_step_walks_the_day_index_oldest_first(tmp_path: Path) -> None:
    """A step reads the old ended holds through ``ix_budget_holds_day`` (a range of the
    pruned days), not through the state index, which also walks every settled hold of
    the kept days, and sorts nothing (bench/retention.py, docs/benchmarks.md)."""
    import sqlite3

    from budget.storage.sql.retention import _HOLDS
    from budget.storage.tables import create_schema

    path = tmp_path / "plan.db"
    create_schema(path)
    with sqlite3.connect(path) as conn:
        plan = [row[-1] for row in conn.execute(f"EXPLAIN QUERY PLAN {_HOLDS}", ("2026-01-01", 9))]
    conn.close()
    assert plan == ["SEARCH budget_holds USING INDEX ix_budget_holds_day (day_key<?)"]
