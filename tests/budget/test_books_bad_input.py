"""Inputs that broke the books, tried as a new operator would, kept as regressions.

Each test is one input found by hand (CLI or bot) with the answer it should get.
Exports are generated from the ledger's own bookings (``tests.support.provider_exports``).
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

import budget.__main__ as budget_cli
from budget.books.corrections import CorrectionPlan
from budget.books.periods import ExportFileError, parse_period
from budget.books.reconcile import reconcile
from budget.books.usage_export import parse_export
from budget.config import LedgerConfig
from budget.kernel.db import create_engine
from budget.ledger import Ledger
from budget.pricing.prices import PriceCard, ProviderModel
from budget.storage.sqlite.store import SqliteStore
from budget.storage.tables import create_schema
from budget.types import Origin, Usage
from tests.budget.ledger_helpers import stamp_head
from tests.support.clocks import ManualClock
from tests.support.provider_exports import export_from_ledger

KEY = "deepseek"
MODEL = "deepseek-chat"
START = datetime(2026, 1, 14, 21, 30, tzinfo=UTC)
CONFIG = LedgerConfig(
    tz="UTC", user_max_inflight=1000, user_max_per_minute=100_000, auto_kill_fraction=Decimal(0)
)
HEADER = b"date,model,input_tokens,cached_input_tokens,output_tokens,cost_usd\n"


@dataclass
class Few:
    """A ledger with a handful of DeepSeek bookings on one evening (a quiet day)."""

    db: Path
    ledger: Ledger
    engine: AsyncEngine
    card: PriceCard
    clock: ManualClock

    async def book(self, usage: Usage, *, estimated: bool = False) -> str:
        op = await self.ledger.begin_operation(5, Origin.CHAT)
        req = await self.ledger.begin_request(op, f"fp{self.clock.now().timestamp()}")
        hold = await self.ledger.reserve(
            op,
            req,
            provider=KEY,
            model=MODEL,
            input_tokens=usage.input_tokens,
            max_tokens=max(4000, usage.output_tokens),
        )
        await self.ledger.settle(hold.hold_id, usage, estimated=estimated)
        await self.ledger.end_operation(op)
        self.clock.advance(600)
        return hold.hold_id

    def day_total(self) -> int:
        with sqlite3.connect(self.db) as conn:
            return int(
                conn.execute(
                    "SELECT SUM(actual_musd) FROM budget_holds WHERE provider = ?", (KEY,)
                ).fetchone()[0]
            )


@pytest.fixture
async def few(tmp_path: Path) -> AsyncIterator[Few]:
    """Two exact DeepSeek bookings at 21:30 and 21:40 UTC on 2026-01-14."""
    db = tmp_path / "kopek.db"
    create_schema(db)
    stamp_head(db)  # the CLI checks the schema revision
    clock = ManualClock(START)
    card = PriceCard([ProviderModel(KEY, MODEL, "paid")])
    ledger = Ledger(SqliteStore(db, CONFIG, "p1"), CONFIG, card, clock)
    await ledger.start(run_sweeper=False)
    engine = create_engine(f"sqlite+aiosqlite:///{db}")
    f = Few(db, ledger, engine, card, clock)
    await f.book(Usage(1200, 400, 300))
    await f.book(Usage(2345, 0, 77))
    yield f
    await ledger.close()
    await engine.dispose()


@pytest.mark.parametrize(
    ("data", "needle"),
    [
        # a 5,000-digit token count raised Python's int-conversion ValueError (traceback)
        (HEADER + b"2026-01-14,deepseek-chat," + b"9" * 5000 + b",0,1,0.1\n", "input_tokens"),
        # the day after 9999-12-31 overflowed (OverflowError)
        (HEADER + b"9999-12-31,deepseek-chat,1,0,1,0.1\n", "not between 1971 and 9998"),
        # year 1 parsed, then the window arithmetic overflowed in reconcile
        (HEADER + b"0001-01-01,deepseek-chat,1,0,1,0.1\n", "not between 1971 and 9998"),
        # an OpenAI-layout start_time in year 3,170,843 (ValueError from fromtimestamp)
        (
            b"start_time,end_time,model,input_tokens,input_cached_tokens,output_tokens\n"
            b"99999999999999,100000000086399,deepseek-chat,1,0,1\n",
            "not between 1971 and 9998",
        ),
    ],
)
def test_absurd_numbers_and_dates_are_a_clear_error(data: bytes, needle: str) -> None:
    """Huge token counts and dates outside any bill are refused with the line named,
    never an exception the CLI prints as a traceback (the bot as "Something went wrong")."""
    with pytest.raises(ExportFileError) as err:
        parse_export(data, "x.csv", "UTC")
    assert "line 2" in str(err.value) and needle in str(err.value)


async def test_a_period_outside_any_bill_or_too_long_is_a_clear_error(few: Few) -> None:
    """``--period 0001-01`` overflowed the window arithmetic; an hourly export from 1970
    to today was silently cut at 9,600 windows and then called another provider's."""
    data = export_from_ledger(few.db, few.card, KEY, granularity="day")
    export = parse_export(data, "u.csv", "UTC")
    year_one = parse_period("0001-01", "UTC", START)
    with pytest.raises(ExportFileError, match="not between 1971 and 9998"):
        await reconcile(few.engine, few.card, export, KEY, period=year_one)
    long = (
        b"hour,model,input_tokens,cached_input_tokens,output_tokens,cost_usd\n"
        b"1971-01-01T00,deepseek-chat,1,0,1,0.000001\n"
        b"2026-01-14T21,deepseek-chat,1,0,1,0.000001\n"
    )
    with pytest.raises(ExportFileError, match="spans more than 9,600 hours"):
        await reconcile(few.engine, few.card, parse_export(long, "u.csv", "UTC"), KEY)


async def test_a_day_with_estimated_bookings_only_in_its_one_row_is_corrected(few: Few) -> None:
    """A quiet day: two exact bookings and one estimated at its ceiling (a timeout), the
    provider's daily export one row. The report said "period: differs" with no line
    under it, and /reconcile apply had nothing to correct. Expected: the period matches
    (the estimate explains the gap), one correction is planned, and after apply the
    ledger's day equals the export's."""
    hold = await few.book(Usage(63, 0, 4000), estimated=True)
    real = {hold: Usage(63, 0, 250)}
    data = export_from_ledger(few.db, few.card, KEY, granularity="day", real_usage=real)
    export = parse_export(data, "deepseek-day.csv", "UTC")
    assert len(export.lines) == 1
    report = await reconcile(few.engine, few.card, export, KEY)
    assert report.steps[0].ok, report.text()
    assert [p.hold_id for p in report.plan] == [hold]
    await few.ledger.store.apply_corrections(
        few.clock.now(),
        CorrectionPlan(report.plan, 1, export.file_name, export.sha256),
    )
    assert few.day_total() == report.export_musd


async def test_a_sparse_day_cut_in_another_zone_names_every_offset_that_fits(few: Few) -> None:
    """A daily export cut in Asia/Shanghai (UTC+8) read as UTC: with two bookings in one
    evening every shift from -3 to -14 h lines the day up. The report claimed "cut in
    UTC+3"; expected: it names the offsets that fit and says it cannot tell which."""
    data = export_from_ledger(few.db, few.card, KEY, granularity="day", tz="Asia/Shanghai")
    report = await reconcile(few.engine, few.card, parse_export(data, "u.csv", "UTC"), KEY)
    text = report.text()
    assert not report.steps[0].ok and report.shift_h is not None
    assert "too few bookings to tell which" in text and "UTC+3 … UTC+14" in text
    assert "every window shifted by" not in text
    hourly = export_from_ledger(few.db, few.card, KEY, granularity="hour", tz="Asia/Shanghai")
    exact = await reconcile(few.engine, few.card, parse_export(hourly, "u.csv", "UTC"), KEY)
    assert exact.shift_h == -8 and "the export is cut in UTC+8, not UTC" in exact.text()


async def test_one_row_cannot_tell_which_price_line_is_stale(few: Few) -> None:
    """One daily row billed with output 5 % above the card, volume above the tolerance:
    the report named "input" (+the wrong PRICE_OVERRIDES) because every line fits one
    row equally. Expected: the candidate lines, no override claimed."""
    for _ in range(40):
        await few.book(Usage(100_000, 30_000, 20_000))
    data = export_from_ledger(
        few.db, few.card, KEY, granularity="day", output_price_factor=Decimal("1.05")
    )
    report = await reconcile(few.engine, few.card, parse_export(data, "u.csv", "UTC"), KEY)
    rates = few.card.rates(KEY, MODEL, START)
    assert rates is not None
    implied = format((rates.output * Decimal("1.05")).normalize(), "f")
    text = report.text()
    assert not report.steps[2].ok
    assert "cannot tell which line is off" in text and f"output $0.42 → ${implied}" in text
    assert "PRICE_OVERRIDES={" not in text
    assert report.stale[MODEL].endswith("(one of them)")


async def test_cli_unwritable_diff_and_a_password_in_database_url(
    few: Few, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--diff-out`` naming a directory ended in a traceback with exit 1 (= "differences");
    a DATABASE_URL with a password was printed whole. Expected: exit 2 and one line; the
    password never printed."""
    stale = tmp_path / "stale.csv"
    stale.write_bytes(export_from_ledger(few.db, few.card, KEY, cached_as_input=True))
    monkeypatch.setenv("DATABASE_URL", f"sqlite+aiosqlite:///{few.db}")
    args = ["reconcile", str(stale), "--provider", KEY, "--diff-out", str(tmp_path)]
    assert await asyncio.to_thread(budget_cli.main, args) == 2
    err = capsys.readouterr().err
    assert err.strip().splitlines() == [f"cannot write {str(tmp_path)!r}: Is a directory"]
    monkeypatch.setenv("DATABASE_URL", "postgresql://kopek:s3cr3t-pw@db.example/kopek")
    assert await asyncio.to_thread(budget_cli.main, ["export"]) == 2
    captured = capsys.readouterr()
    assert "s3cr3t-pw" not in captured.err + captured.out
    assert "asyncpg driver only" in captured.err  # the bot's rule
    monkeypatch.setenv("DATABASE_URL", "postgresql+asyncpg://kopek:s3cr3t-pw@127.0.0.1:1/kopek")
    assert await asyncio.to_thread(budget_cli.main, ["export"]) == 2
    captured = capsys.readouterr()
    assert "s3cr3t-pw" not in captured.err + captured.out
    assert "cannot reach the ledger database postgresql://127.0.0.1:1/kopek" in captured.err
