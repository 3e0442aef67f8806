"""The books cut local days and hours with the one DST helper,
:func:`budget.policy.windows.local_instant` — export periods (``parse_period``), the buckets of
a provider's usage export (``parse_export``) and the windows reconcile compares
(``compare_buckets``). Every expectation is the helper's own answer or a hand-checked instant.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

import budget.__main__ as budget_cli
from budget.books.periods import ExportFileError, parse_period
from budget.books.reconcile import reconcile
from budget.books.reconcile_period import compare_buckets
from budget.books.usage_export import parse_export
from budget.config import LedgerConfig
from budget.kernel.db import create_engine
from budget.ledger import Ledger
from budget.policy.windows import local_instant
from budget.pricing.prices import PriceCard, ProviderModel
from budget.storage.sqlite.store import SqliteStore
from budget.storage.tables import create_schema
from budget.types import Origin, Usage
from tests.budget.ledger_helpers import stamp_head
from tests.support.clocks import ManualClock
from tests.support.provider_exports import export_from_ledger

NOW = datetime(2026, 12, 1, 12, tzinfo=UTC)
GENERIC = b"%s,model,input_tokens,cached_input_tokens,output_tokens,cost_usd\n"


def _midnight(d: date, tz: str) -> datetime:
    return local_instant(d, time(0), ZoneInfo(tz))


@pytest.mark.parametrize(
    ("day", "tz", "hours"),
    [
        ("2026-09-06", "America/Santiago", 23),  # 00:00 does not exist (→ 01:00 -03)
        ("2026-03-29", "Europe/Berlin", 23),
        ("2026-10-25", "Europe/Berlin", 25),
        ("2011-12-29", "Pacific/Apia", 24),  # the next day, 2011-12-30, was skipped
    ],
)
def test_export_periods_start_and_end_at_the_helpers_local_midnight(
    day: str, tz: str, hours: int
) -> None:
    """``YYYY-MM-DD`` runs from the helper's local midnight to the next one."""
    d = date.fromisoformat(day)
    period = parse_period(day, tz, NOW)
    assert (period.start, period.end) == (_midnight(d, tz), _midnight(d + timedelta(days=1), tz))
    assert period.end - period.start == timedelta(hours=hours)


def test_santiago_gap_day_starts_at_the_first_real_instant() -> None:
    """2026-09-06 00:00 America/Santiago does not exist: the day starts at 01:00 -03."""
    period = parse_period("2026-09-06", "America/Santiago", NOW)
    assert period.start == datetime(2026, 9, 6, 4, tzinfo=UTC)


def test_a_month_is_cut_at_the_helpers_midnights() -> None:
    """``YYYY-MM``: first local midnight of the month to the first of the next."""
    period = parse_period("2026-10", "Europe/Berlin", NOW)
    assert period.start == _midnight(date(2026, 10, 1), "Europe/Berlin")
    assert period.end == _midnight(date(2026, 11, 1), "Europe/Berlin")
    assert period.end - period.start == timedelta(days=31, hours=1)


def test_daily_export_rows_are_the_helpers_local_days() -> None:
    """A generic daily row ``date`` is the local day in the billing zone."""
    data = GENERIC % b"date" + b"2026-09-06,m,10,0,5,0.01\n2026-09-07,m,10,0,5,0.01\n"
    export = parse_export(data, "u.csv", "America/Santiago")
    first, second = export.lines
    assert (first.start, first.end) == (
        _midnight(date(2026, 9, 6), "America/Santiago"),
        _midnight(date(2026, 9, 7), "America/Santiago"),
    )
    assert first.end - first.start == timedelta(hours=23)
    assert second.start == first.end


def test_a_repeated_local_hour_without_its_offset_is_refused_by_name() -> None:
    """``2026-10-25T02`` in Berlin happens twice: a row naming it without a UTC offset was
    read as the first one (CEST), so the second hour's usage was compared against the
    first hour's bookings. Expected: refused, the hour and both offsets named."""
    data = GENERIC % b"hour" + b"2026-10-25T01,m,10,0,5,0.01\n2026-10-25T02,m,10,0,5,0.01\n"
    with pytest.raises(ExportFileError) as err:
        parse_export(data, "u.csv", "Europe/Berlin")
    assert str(err.value) == (
        "line 3: 2026-10-25T02 happens twice in Europe/Berlin (the clocks go back): write "
        "the hour with its UTC offset (2026-10-25T02:00+02:00 or 2026-10-25T02:00+01:00) "
        "or export in UTC"
    )
    gap = GENERIC % b"hour" + b"2026-03-29T02,m,10,0,5,0.01\n"
    with pytest.raises(ExportFileError, match="2026-03-29T02 does not exist in Europe/Berlin"):
        parse_export(gap, "u.csv", "Europe/Berlin")


def test_each_occurrence_of_a_repeated_hour_is_its_own_bucket_by_its_offset() -> None:
    """With offsets the two ``02`` hours are two buckets keyed by their UTC start, labelled
    apart; the hour after the spring gap starts where the helper puts it."""
    data = GENERIC % b"hour" + (
        b"2026-10-25T02:00+02:00,m,10,0,5,0.01\n"
        b"2026-10-25T02:00+01:00,m,20,0,5,0.01\n"
        b"2026-03-29T03,m,10,0,5,0.01\n"
    )
    first, second, spring = parse_export(data, "u.csv", "Europe/Berlin").lines
    assert (first.start, second.start) == (
        datetime(2026, 10, 25, 0, tzinfo=UTC),
        datetime(2026, 10, 25, 1, tzinfo=UTC),
    )
    assert (first.label, second.label) == ("2026-10-25T02+02:00", "2026-10-25T02+01:00")
    assert second.end - second.start == timedelta(hours=1)
    berlin = ZoneInfo("Europe/Berlin")
    assert first.start == local_instant(date(2026, 10, 25), time(2), berlin)
    assert spring.start == local_instant(date(2026, 3, 29), time(3), berlin)
    assert spring.start == datetime(2026, 3, 29, 1, tzinfo=UTC)


def test_reconcile_day_windows_end_at_the_helpers_local_midnights() -> None:
    """The compared day windows over a DST change are 24, 23 (spring) and 24 hours."""
    data = GENERIC % b"date" + b"".join(
        b"%s,m,10,0,5,0.01\n" % d for d in (b"2026-03-28", b"2026-03-29", b"2026-03-30")
    )
    export = parse_export(data, "u.csv", "Europe/Berlin")
    windows = [(w.start, w.end, w.label) for w in compare_buckets(export, None)]
    assert [label for _, _, label in windows] == ["2026-03-28", "2026-03-29", "2026-03-30"]
    berlin = "Europe/Berlin"
    assert [end for _, end, _ in windows] == [
        _midnight(date(2026, 3, d), berlin) for d in (29, 30, 31)
    ]
    assert [end - start for start, end, _ in windows] == [
        timedelta(hours=24),
        timedelta(hours=23),
        timedelta(hours=24),
    ]


async def test_a_day_whose_clocks_go_back_matches_hour_by_hour(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Bookings at 02:30 CEST and at 02:30 CET on 2026-10-25 (Berlin's repeated hour), an
    hourly export of them: the windows were merged by their local label "2026-10-25T02",
    each counted both hours' usage, and books and bill that agree were reported as
    different (the export total doubled). Keyed by their UTC start they match — the
    provider's Unix hours, and Kopek's CSV with each 02 hour's offset — through
    ``python -m budget reconcile`` too."""
    db = tmp_path / "kopek.db"
    create_schema(db)
    stamp_head(db)
    clock = ManualClock(datetime(2026, 10, 24, 23, 30, tzinfo=UTC))  # 01:30 CEST
    card = PriceCard([ProviderModel("deepseek", "deepseek-chat", "paid")])
    config = LedgerConfig(tz="Europe/Berlin", user_max_inflight=100, auto_kill_fraction=Decimal(0))
    ledger = Ledger(SqliteStore(db, config, "p1"), config, card, clock)
    await ledger.start(run_sweeper=False)
    hours = ["2026-10-25T01:00+02:00", "2026-10-25T02:00+02:00", "2026-10-25T02:00+01:00"]
    hours.append("2026-10-25T03:00+01:00")
    rows = ["hour,model,input_tokens,cached_input_tokens,output_tokens,cost_usd"]
    for i, hour in enumerate(hours):  # 01:30 CEST, 02:30 CEST, 02:30 CET, 03:30 CET
        usage = Usage(1000 + 100 * i, 0, 300 + 50 * i)
        op = await ledger.begin_operation(5, Origin.CHAT)
        req = await ledger.begin_request(op, f"fp{i}")
        hold = await ledger.reserve(
            op, req, provider="deepseek", model="deepseek-chat", input_tokens=1000, max_tokens=900
        )
        cost = await ledger.settle(hold.hold_id, usage)
        await ledger.end_operation(op)
        rows.append(f"{hour},deepseek-chat,{usage.input_tokens},0,{usage.output_tokens},{cost}e-6")
        clock.advance(3600)
    await ledger.close()
    unix = export_from_ledger(db, card, "deepseek", layout="openai", granularity="hour")
    local = "\n".join(rows).encode()
    engine = create_engine(f"sqlite+aiosqlite:///{db}")
    try:
        for data in (unix, local):
            export = parse_export(data, "u.csv", "Europe/Berlin")
            report = await reconcile(engine, card, export, "deepseek")
            assert report.ok and report.ledger_musd == report.export_musd, report.text()
    finally:
        await engine.dispose()
    monkeypatch.setenv("DATABASE_URL", f"sqlite+aiosqlite:///{db}")
    monkeypatch.setenv("DEEPSEEK_BILLING_TZ", "Europe/Berlin")
    (tmp_path / "u.csv").write_bytes(local)
    args = ["reconcile", str(tmp_path / "u.csv"), "--provider", "deepseek"]
    assert await asyncio.to_thread(budget_cli.main, args) == 0
