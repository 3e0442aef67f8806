"""The books: spend export, reconciliation with a provider export, corrections.

Exports are generated from the ledger's own bookings (``tests.support.provider_exports``)
in the provider's layout and then perturbed; every expectation is computed from the
bookings, never typed in.
"""

from __future__ import annotations

import asyncio
import csv
import io
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
from budget.books.export import EXPORT_COLUMNS, write_export
from budget.books.periods import ExportFileError, PeriodError, parse_period
from budget.books.reconcile import reconcile
from budget.books.usage_export import MAX_EXPORT_BYTES, parse_export
from budget.config import LedgerConfig
from budget.kernel.db import create_engine
from budget.ledger import Ledger
from budget.pricing.prices import PriceCard, ProviderModel, parse_overrides
from budget.storage.sqlite.store import SqliteStore
from budget.storage.tables import create_schema
from budget.types import Level, Origin, Usage, Window
from tests.budget.ledger_helpers import stamp_head
from tests.support.clocks import ManualClock
from tests.support.provider_exports import export_from_ledger

KEY = "deepseek"
MODEL = "deepseek-chat"
START = datetime(2026, 1, 14, 0, 30, tzinfo=UTC)
CONFIG = LedgerConfig(
    tz="UTC", user_max_inflight=1000, user_max_per_minute=100_000, auto_kill_fraction=Decimal(0)
)


def price_card() -> PriceCard:
    """DeepSeek paid (shipped override rates) and Groq free (genai-prices list price)."""
    return PriceCard(
        [
            ProviderModel(KEY, MODEL, "paid"),
            ProviderModel("groq", "llama-3.3-70b-versatile", "free"),
        ]
    )


@dataclass
class Books:
    """A ledger with bookings, its file, an engine on it and the card."""

    db: Path
    ledger: Ledger
    engine: AsyncEngine
    card: PriceCard
    clock: ManualClock

    async def book(self, user: int, usage: Usage, *, key: str = KEY, model: str = MODEL) -> int:
        op = await self.ledger.begin_operation(user, Origin.CHAT)
        req = await self.ledger.begin_request(op, f"fp{self.clock.now().timestamp()}")
        hold = await self.ledger.reserve(
            op, req, provider=key, model=model, input_tokens=usage.input_tokens, max_tokens=40_000
        )
        cost = await self.ledger.settle(hold.hold_id, usage)
        await self.ledger.end_operation(op)
        return cost

    def holds(self) -> dict[str, tuple[int, int]]:
        """hold id → (actual µUSD, estimated)."""
        with sqlite3.connect(self.db) as conn:
            rows = conn.execute("SELECT hold_id, actual_musd, estimated FROM budget_holds")
            return {r[0]: (r[1], r[2]) for r in rows}

    def corrections(self) -> int:
        with sqlite3.connect(self.db) as conn:
            return int(conn.execute("SELECT COUNT(*) FROM budget_corrections").fetchone()[0])


def usage_of(i: int) -> Usage:
    """A varied, deterministic usage for the i-th booking."""
    return Usage(10_000 + 370 * i, 2560 * (i % 3), 3000 + 530 * i)


@pytest.fixture
async def books(tmp_path: Path) -> AsyncIterator[Books]:
    """48 DeepSeek bookings, one per hour at :30 from 2026-01-14 00:30 UTC, plus 3 free
    Groq ones; the clock is left at 2026-01-16 00:30."""
    db = tmp_path / "kopek.db"
    create_schema(db)
    stamp_head(db)  # the CLI checks the schema revision
    clock = ManualClock(START)
    card = price_card()
    ledger = Ledger(SqliteStore(db, CONFIG, "p1"), CONFIG, card, clock)
    await ledger.start(run_sweeper=False)
    engine = create_engine(f"sqlite+aiosqlite:///{db}")
    b = Books(db, ledger, engine, card, clock)
    for i in range(48):
        await b.book(100 + i % 5, usage_of(i))
        if i % 16 == 0:
            await b.book(7, Usage(500, 0, 100), key="groq", model="llama-3.3-70b-versatile")
        clock.advance(3600)
    yield b
    await ledger.close()
    await engine.dispose()


async def _report(b: Books, data: bytes, tz: str = "UTC", name: str = "usage.csv") -> str:
    report = await reconcile(b.engine, b.card, parse_export(data, name, tz), KEY)
    return report.text()


# -- export -------------------------------------------------------------------------


async def test_unit_prices_say_they_are_the_current_card_and_whether_it_booked_them(
    books: Books,
) -> None:
    """The unit-price columns come from the exporting process's card: an export run
    without the bot's PRICE_OVERRIDES printed $0.28 beside a cost booked at $10 per 1M.
    The header says ``current_…``, and ``prices_as_booked`` is 1 only
    when the hold's ``price_version`` is the exporting card's."""
    period = parse_period("2026-01-14", "UTC", books.clock.now())
    for card, as_booked, price in (
        (books.card, "1", "0.28"),
        (
            PriceCard(
                [ProviderModel(KEY, MODEL, "paid")],
                overrides=parse_overrides({f"{KEY}:{MODEL}": {"input": "10", "output": "20"}}),
            ),
            "0",
            "10",
        ),
    ):
        out = io.StringIO(newline="")
        await write_export(books.engine, card, period, out, key_name=KEY)
        rows = list(csv.DictReader(io.StringIO(out.getvalue())))
        assert rows and {r["prices_as_booked"] for r in rows} == {as_booked}
        assert {r["current_input_usd_per_mtok"] for r in rows} == {price}
        assert {r["price_version"] for r in rows} == {books.card.version}


async def test_export_rows_sum_to_the_settlements_with_prices_and_totals(books: Books) -> None:
    """One row per booked attempt of the day, the cost column sums to the ledger's
    settlements, unit prices and their source are filled, and the totals file's
    ``all`` row carries the same sum."""
    period = parse_period("2026-01-14", "UTC", books.clock.now())
    out, totals = io.StringIO(newline=""), io.StringIO(newline="")
    summary = await write_export(books.engine, books.card, period, out, totals, tz="Asia/Tokyo")
    rows = list(csv.DictReader(io.StringIO(out.getvalue())))
    with sqlite3.connect(books.db) as conn:
        expected = conn.execute(
            "SELECT COUNT(*), SUM(actual_musd) FROM budget_holds WHERE granted_at >= ? AND"
            " granted_at < ?",
            (period.start.timestamp(), period.end.timestamp()),
        ).fetchone()
    assert tuple(rows[0].keys()) == EXPORT_COLUMNS
    assert len(rows) == summary.rows == expected[0] == 24 + 2
    assert sum(int(r["cost_musd"]) for r in rows) == summary.cost_musd == expected[1]
    paid = [r for r in rows if r["key_name"] == KEY]
    assert {r["current_input_usd_per_mtok"] for r in paid} == {"0.28"}
    assert paid[0]["current_price_source"].startswith("override: api-docs.deepseek.com")
    free = [r for r in rows if r["key_name"] == "groq"]
    assert {r["cost_musd"] for r in free} == {"0"} and all(
        int(r["list_price_musd"]) > 0 for r in free
    )
    assert free[0]["current_price_source"].startswith("genai-prices ")
    assert paid[0]["local_time"].endswith("+09:00") and paid[0]["utc_time"].endswith("+00:00")
    all_row = [r for r in csv.reader(io.StringIO(totals.getvalue())) if r[0] == "all"]
    assert all_row == [["all", "2026-01-14", str(len(rows)), *all_row[0][3:]]]
    assert int(all_row[0][7]) == expected[1]


def test_periods_are_local_days_and_months() -> None:
    """A day and a month are cut in the zone; junk is refused with a clear error."""
    now = datetime(2026, 3, 29, 12, tzinfo=UTC)
    day = parse_period("2026-03-29", "Europe/Berlin", now)
    assert (day.end - day.start).total_seconds() == 23 * 3600  # the spring-forward day
    month = parse_period("2026-02", "UTC", now)
    assert (month.start.day, month.end.month) == (1, 3)
    assert parse_period(None, "UTC", now).label == "2026-03-29"
    for bad, tz in (("2026-13", "UTC"), ("yesterday", "UTC"), ("2026-01-01", "Mars/Base")):
        with pytest.raises(PeriodError):
            parse_period(bad, tz, now)
    for future in ("9999-12", "9999-12-31", "2026-04", "2026-03-30"):
        with pytest.raises(PeriodError, match="has not begun yet: today is 2026-03-29"):
            parse_period(future, "UTC", now)
    assert parse_period("2026-03", "UTC", now).label == "2026-03"  # this month, under way


# -- reconcile (a)–(d) ---------------------------------------------------------------


async def test_a_clean_export_matches_in_both_layouts(books: Books) -> None:
    """(a) The export of the ledger's own bookings matches at every step."""
    for layout in ("generic", "openai"):
        for granularity in ("hour", "day"):
            data = export_from_ledger(
                books.db, books.card, KEY, layout=layout, granularity=granularity
            )
            report = await reconcile(
                books.engine, books.card, parse_export(data, "u.csv", "UTC"), KEY
            )
            assert report.ok, report.text()
            assert report.shift_h == 0 and report.diff_csv() is None
            assert report.ledger_musd == report.export_musd


async def test_b_windows_cut_three_hours_off_is_a_period_mismatch(books: Books) -> None:
    """(b) Days cut 3 h later than the billing zone: "period", offset +3 h."""
    data = export_from_ledger(books.db, books.card, KEY, granularity="day", shift_h=3)
    report = await reconcile(books.engine, books.card, parse_export(data, "u.csv", "UTC"), KEY)
    assert not report.steps[0].ok and report.shift_h == 3
    assert "timezone mismatch" in report.text() and "+3 h" in report.text()
    assert "DEEPSEEK_BILLING_TZ" in report.text()
    assert report.steps[1].ok and report.steps[2].ok  # compared in the shifted windows
    data_ok = export_from_ledger(books.db, books.card, KEY, granularity="day", tz="Etc/GMT+3")
    in_zone = await reconcile(
        books.engine, books.card, parse_export(data_ok, "u.csv", "Etc/GMT+3"), KEY
    )
    assert in_zone.ok, in_zone.text()


async def test_c_cached_tokens_billed_as_plain_input(books: Books) -> None:
    """(c) The export has no cached tokens (billed at the input rate): "token categories"."""
    data = export_from_ledger(books.db, books.card, KEY, cached_as_input=True)
    report = await reconcile(books.engine, books.card, parse_export(data, "u.csv", "UTC"), KEY)
    assert report.steps[0].ok and not report.steps[1].ok
    cached = sum(usage_of(i).cached_input_tokens for i in range(48))
    assert f"{cached:,} cached tokens billed as plain input" in report.text()
    assert report.diff_csv() is not None


async def test_d_output_price_five_percent_higher_names_the_line_and_override(
    books: Books,
) -> None:
    """(d) Output billed 5 % above the card: "price card" names the output line and the
    PRICE_OVERRIDES entry that would fix it."""
    data = export_from_ledger(books.db, books.card, KEY, output_price_factor=Decimal("1.05"))
    report = await reconcile(books.engine, books.card, parse_export(data, "u.csv", "UTC"), KEY)
    assert report.steps[0].ok and report.steps[1].ok and not report.steps[2].ok
    rates = books.card.rates(KEY, MODEL, START)
    assert rates is not None
    implied = format((rates.output * Decimal("1.05")).normalize(), "f")
    text = report.text()
    assert f"{MODEL} output: card ${rates.output} per 1M tokens" in text
    assert f"implies ${implied} (+5.0%)" in text
    assert f'PRICE_OVERRIDES={{"{KEY}:{MODEL}":{{"input":"{rates.input}",' in text
    assert f'"output":"{implied}"' in text
    assert report.stale == {MODEL: f"output ${rates.output} → ${implied} per 1M tokens"}


# -- (e) estimated bookings corrected --------------------------------------------------


async def test_e_estimated_bookings_after_a_crash_are_corrected_from_the_export(
    books: Books,
) -> None:
    """(e) Three bookings estimated at the ceiling after a crash; the export shows their
    real usage: after apply each equals its real cost, the day's total equals the
    export's, three correction events exist and a second apply changes nothing."""
    crashed = SqliteStore(books.db, CONFIG, "crashed")
    crashed_ledger = Ledger(crashed, CONFIG, books.card, books.clock)
    await crashed_ledger.start(run_sweeper=False)
    real: dict[str, Usage] = {}
    for i in range(3):
        op = await crashed_ledger.begin_operation(200 + i, Origin.CHAT)
        req = await crashed_ledger.begin_request(op, f"crash{i}")
        hold = await crashed_ledger.reserve(
            op, req, provider=KEY, model=MODEL, input_tokens=1500 + i, max_tokens=2000
        )
        real[hold.hold_id] = Usage(1500 + i, 0, 120 + 40 * i)
        books.clock.advance(3600)
    await crashed.writer.call(crashed.writer._disconnect)  # the process dies: nothing settles
    restarted = Ledger(SqliteStore(books.db, CONFIG, "p2"), CONFIG, books.card, books.clock)
    await restarted.start(run_sweeper=False)  # books the crashed holds at their ceiling
    before = books.holds()
    assert all(before[h][1] == 1 for h in real)

    data = export_from_ledger(books.db, books.card, KEY, real_usage=real)
    export = parse_export(data, "deepseek-jan.csv", "UTC")
    report = await reconcile(books.engine, books.card, export, KEY)
    assert len(report.plan) == 3 and "/reconcile apply" in report.text()
    result = await restarted.store.apply_corrections(
        books.clock.now(),
        CorrectionPlan(report.plan, 1, export.file_name, export.sha256),
    )
    after = books.holds()
    for hold_id, usage in real.items():
        assert after[hold_id][0] == books.card.actual_musd(KEY, MODEL, usage, START)
    assert len(result.changed) == 3 == books.corrections()
    with sqlite3.connect(books.db) as conn:
        day = "2026-01-16"
        ledger_day = conn.execute(
            "SELECT SUM(actual_musd) FROM budget_holds WHERE provider = ? AND day_key = ?",
            (KEY, day),
        ).fetchone()[0]
        bucket = conn.execute(
            "SELECT settled_musd FROM budget_buckets WHERE level = 'global' AND win = 'day'"
            " AND wkey = ?",
            (day,),
        ).fetchone()[0]
        events = conn.execute(
            "SELECT by_user, source_file, source_sha256 FROM budget_corrections"
        ).fetchall()
    export_day = sum(
        (ln.cost_musd or Decimal(0) for ln in export.lines if ln.label.startswith(day)),
        Decimal(0),
    )
    assert ledger_day == export_day == bucket
    assert set(events) == {(1, "deepseek-jan.csv", export.sha256)}
    again = await reconcile(books.engine, books.card, export, KEY)
    assert again.plan == [] and again.ledger_musd == again.export_musd
    await restarted.close()
    await crashed_ledger.close()


async def _estimated_cut(books: Books, user: int, input_tokens: int, max_tokens: int) -> str:
    """One call settled on Kopek's own count (a stream cut: input + 10 output tokens,
    estimated); its hold id."""
    op = await books.ledger.begin_operation(user, Origin.CHAT)
    req = await books.ledger.begin_request(op, f"cut{user}")
    hold = await books.ledger.reserve(
        op, req, provider=KEY, model=MODEL, input_tokens=input_tokens, max_tokens=max_tokens
    )
    await books.ledger.settle(hold.hold_id, Usage(input_tokens, 0, 10), estimated=True)
    await books.ledger.end_operation(op)
    return hold.hold_id


@pytest.mark.parametrize(
    ("billed_output", "period_ok"),
    [(1_900, True), (2_000, True), (30_000, False)],
    ids=["within_bound", "at_bound", "above_bound"],
)
async def test_an_export_above_what_an_estimated_booking_could_be_is_a_difference(
    books: Books, billed_output: int, period_ok: bool
) -> None:
    """An estimated booking (input 100, max_tokens 2,000: the ledger could have booked
    at most 2,100 tokens for it) explains an export above the ledger only up to that
    bound: billed 1,900 or 2,000 output tokens, the period matches; billed 30,000 (a sum
    of two keys, a doubled sheet) it differs, and the window is named — it matched
    before, whatever the excess, because any estimate in a window let an export above
    the ledger pass."""
    hold_id = await _estimated_cut(books, 400, 100, 2_000)
    real = {hold_id: Usage(100, 0, billed_output)}
    export = parse_export(
        export_from_ledger(books.db, books.card, KEY, real_usage=real), "cut.csv", "UTC"
    )
    report = await reconcile(books.engine, books.card, export, KEY)
    text = report.text()
    assert ("1. period: ✅ match" in text) is period_ok, text
    if not period_ok:
        hour = books.clock.now().strftime("%Y-%m-%dT%H")
        assert f"{hour}: ledger 110 tokens, export 30,100" in text, text


async def test_a_correction_over_a_closed_window_limit_is_booked_and_reported(
    books: Books,
) -> None:
    """A stream cut settled low (estimated) whose bill is higher: the correction lifts
    the closed day over its limit; it is still booked, and the window is named."""
    op = await books.ledger.begin_operation(300, Origin.CHAT)
    req = await books.ledger.begin_request(op, "cut")
    hold = await books.ledger.reserve(
        op, req, provider=KEY, model=MODEL, input_tokens=100, max_tokens=40_000
    )
    await books.ledger.settle(hold.hold_id, Usage(100, 0, 10), estimated=True)
    await books.ledger.end_operation(op)
    day = books.clock.now().date().isoformat()
    with sqlite3.connect(books.db) as conn:
        settled_day = conn.execute(
            "SELECT settled_musd FROM budget_buckets WHERE level = 'global' AND win = 'day'"
            " AND wkey = ?",
            (day,),
        ).fetchone()[0]
    await books.ledger.set_limit(Level.GLOBAL, "", Window.DAY, settled_day + 10, by=1)
    books.clock.advance(86400)  # the day closes
    real = {hold.hold_id: Usage(100, 0, 19_000)}
    export = parse_export(
        export_from_ledger(books.db, books.card, KEY, real_usage=real), "late.csv", "UTC"
    )
    report = await reconcile(books.engine, books.card, export, KEY)
    result = await books.ledger.store.apply_corrections(
        books.clock.now(),
        CorrectionPlan(report.plan, 1, "late.csv", export.sha256),
    )
    assert [c.hold_id for c in result.changed] == [hold.hold_id]
    assert books.holds()[hold.hold_id][0] == books.card.actual_musd(
        KEY, MODEL, real[hold.hold_id], START
    )
    assert any(
        f"global day {day}" in line and "(closed window)" in line for line in result.over_limit
    )
    assert "Over their limit" in result.text()


# -- (f) bad files: a clear error, nothing changed --------------------------------------


@pytest.mark.parametrize(
    ("data", "needle"),
    [
        (b"", "is empty"),
        (b"   \n", "is empty"),
        (b"date,model,input_tokens,cached_input_tokens,output_tokens,cost_usd\n", "no usage rows"),
        (
            b"when,what,much\n1,2,3\n",
            "unknown layout — a comma-separated file with columns when, what, much",
        ),
        (
            b"date,model,input_tokens,cached_input_tokens,output_tokens,cost_usd\n"
            b"2026-01-14,deepseek-chat,12x,0,5,0.1\n",
            "line 2: input_tokens '12x' is not a whole number",
        ),
        (
            b"date,model,input_tokens,cached_input_tokens,output_tokens,cost_usd\n"
            b"2026-01-14,deepseek-chat,12,0,5\n",
            "line 2: 5 fields where the header has 6",
        ),
        (
            b"date,model,input_tokens,cached_input_tokens,output_tokens,cost_usd\n"
            b"14.01.2026,deepseek-chat,12,0,5,0.1\n",
            "is not YYYY-MM-DD",
        ),
        (
            b"date,model,input_tokens,cached_input_tokens,output_tokens,cost_usd\n"
            b"2026-01-14,deepseek-chat,12,0,5,lots\n",
            "cost_usd 'lots' is not a USD amount",
        ),
        (b"\xff\xfe\x00bad", "not UTF-8"),
    ],
)
def test_f_malformed_files_are_refused_clearly(data: bytes, needle: str) -> None:
    """(f) Empty, header-only, unknown, ragged and malformed files: a clear error."""
    with pytest.raises(ExportFileError) as err:
        parse_export(data, "bad.csv", "UTC")
    assert needle in str(err.value)
    if "unknown layout" in needle:
        assert "cached_input_tokens" in str(err.value) and "input_cached_tokens" in str(err.value)


def test_f_a_file_over_20_mb_is_refused() -> None:
    """(f) Over 20 MB: refused before it is read."""
    with pytest.raises(ExportFileError, match="over the 20 MiB limit"):
        parse_export(b"x" * (MAX_EXPORT_BYTES + 1), "huge.csv", "UTC")


async def test_f_another_providers_export_changes_nothing(books: Books) -> None:
    """(f) A CSV for another provider (by its provider column, or by its models):
    a clear error, no correction, no booking changed."""
    before = books.holds()
    tagged = export_from_ledger(books.db, books.card, KEY, provider_column="groq")
    with pytest.raises(ExportFileError, match="is an export of groq, not deepseek"):
        await _report(books, tagged)
    groq = export_from_ledger(books.db, books.card, "groq")
    with pytest.raises(ExportFileError, match="another provider's export"):
        await _report(books, groq)
    assert books.holds() == before and books.corrections() == 0


# -- the command line ------------------------------------------------------------------


async def test_cli_export_and_reconcile(
    books: Books, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``python -m budget export`` writes the same rows and totals; ``reconcile`` exits 0
    on a clean export, 1 when cached tokens were billed as input (the differing rows
    written as CSV), 2 on an unknown layout."""
    monkeypatch.setenv("DATABASE_URL", f"sqlite+aiosqlite:///{books.db}")
    monkeypatch.setenv("BUDGET_TZ", "UTC")
    out = tmp_path / "jan.csv"
    code = await asyncio.to_thread(
        budget_cli.main, ["export", "--period", "2026-01", "--tz", "UTC", "--out", str(out)]
    )
    with sqlite3.connect(books.db) as conn:
        count, total = conn.execute(
            "SELECT COUNT(*), SUM(actual_musd) FROM budget_holds WHERE state IN"
            " ('settled', 'expired')"
        ).fetchone()
    rows = list(csv.DictReader(io.StringIO(out.read_text(encoding="utf-8"))))
    assert code == 0 and len(rows) == count
    assert sum(int(r["cost_musd"]) for r in rows) == total
    totals = (tmp_path / "jan.totals.csv").read_text(encoding="utf-8")
    assert f"all,2026-01,{count}," in totals

    clean = tmp_path / "clean.csv"
    clean.write_bytes(export_from_ledger(books.db, books.card, KEY))
    stale = tmp_path / "stale.csv"
    stale.write_bytes(export_from_ledger(books.db, books.card, KEY, cached_as_input=True))
    junk = tmp_path / "junk.csv"
    junk.write_text("a,b\n1,2\n", encoding="utf-8")
    diff = tmp_path / "diff.csv"
    args = ["--provider", KEY]
    assert await asyncio.to_thread(budget_cli.main, ["reconcile", str(clean), *args]) == 0
    stale_args = ["reconcile", str(stale), *args, "--diff-out", str(diff)]
    assert await asyncio.to_thread(budget_cli.main, stale_args) == 1
    assert diff.read_text(encoding="utf-8").startswith("bucket,model,")
    assert await asyncio.to_thread(budget_cli.main, ["reconcile", str(junk), *args]) == 2
