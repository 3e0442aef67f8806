"""The money promise on the ledger: provable-bound admission (zero overshoot whatever the
estimate), a deleted database file, and storage failures that surface as
``LedgerUnavailable`` only (never a raw sqlite error)."""

from __future__ import annotations

import contextlib
import os
import sqlite3
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from budget.errors import HoldRefused, LedgerUnavailable
from budget.ledger import Ledger
from budget.policy.money import usd
from budget.protocol import HoldTicket
from budget.storage.sqlite.store import SqliteStore
from budget.types import Level, Origin, RefusalReason, Usage, Window
from tests.budget.ledger_helpers import LedgerFactory
from tests.support.clocks import ManualClock
from tests.support.docs import text_of_docs


async def _reserve(
    ledger: Ledger, user: int, input_tokens: int, max_tokens: int, bound: int | None
) -> HoldTicket:
    op = await ledger.begin_operation(user, Origin.CHAT, max_musd=10**9, max_requests=10**6)
    req = await ledger.begin_request(op, f"fp-{user}")
    return await ledger.reserve(
        op,
        req,
        provider="test",
        model="m",
        input_tokens=input_tokens,
        max_tokens=max_tokens,
        input_bound_tokens=bound,
    )


async def test_admission_counts_the_bound_so_under_counts_never_overshoot(
    make_ledger: LedgerFactory,
) -> None:
    """Limit 5,000 µUSD; each attempt estimates 58 input tokens, the provable bound is
    300, the provider bills 120 + 100 output (test:m is 1 µUSD a token). Holds are
    granted while their bound fits; every one settled as billed stays ≤ the limit."""
    ledger = await make_ledger(global_daily_musd=5_000)
    granted: list[HoldTicket] = []
    for user in range(1, 61):
        try:
            granted.append(await _reserve(ledger, user, 58, 100, 300))
        except HoldRefused as exc:
            assert exc.refusal.reason in (RefusalReason.BUSY, RefusalReason.LIMIT)
    # 400 µUSD bound each: exactly 12 fit in 5,000 (12 × 400 = 4,800)
    assert len(granted) == 12
    st = await ledger.status()
    day = next(b for b in st.buckets if b.level is Level.GLOBAL and b.window is Window.DAY)
    assert day.held_musd == 12 * 158  # only the estimates are held
    for ticket in granted:
        await ledger.settle(ticket.hold_id, Usage(input_tokens=120, output_tokens=100))
    st = await ledger.status()
    day = next(b for b in st.buckets if b.level is Level.GLOBAL and b.window is Window.DAY)
    assert day.settled_musd == 12 * 220 <= 5_000
    assert day.held_musd == 0


async def test_remaining_musd_keeps_outstanding_margins_out(make_ledger: LedgerFactory) -> None:
    """The ladder's free amount subtracts the bound excess of outstanding holds."""
    ledger = await make_ledger(global_daily_musd=1_000)
    await _reserve(ledger, 1, 10, 90, 400)  # ceiling 100, bound 490
    op = await ledger.begin_operation(2, Origin.CHAT, max_musd=10**9, max_requests=10)
    assert await ledger.remaining_musd(op, "test") == 1_000 - 490


#: a SQLite file's own failure modes (the file deleted under the process, SQLITE_FULL)
SQLITE_ONLY = pytest.mark.parametrize("make_ledger", ["sqlite"], indirect=True)


@SQLITE_ONLY
async def test_deleted_database_fails_closed_and_tells_admins_once(
    make_ledger: LedgerFactory, db_path: Path
) -> None:
    """The file is unlinked under the running ledger: the next hold and every sweep
    raise LedgerUnavailable (no hold on the orphaned inode); admins are told once."""
    ledger = await make_ledger(global_daily_musd=10_000)
    told: list[str] = []

    async def tell(reason: str) -> None:
        told.append(reason)

    ledger._notices.on_unavailable = tell
    await _reserve(ledger, 1, 10, 10, 40)
    for suffix in ("", "-wal", "-shm"):
        with contextlib.suppress(FileNotFoundError):
            os.remove(f"{db_path}{suffix}")
    with pytest.raises(LedgerUnavailable):
        await _reserve(ledger, 2, 10, 10, 40)
    with pytest.raises(LedgerUnavailable):
        await ledger.sweep()
    with pytest.raises(LedgerUnavailable):
        await _reserve(ledger, 3, 10, 10, 40)
    await ledger._notices.drain()
    assert told == ["deleted"]
    assert ledger.store.lost == "deleted"


@SQLITE_ONLY
async def test_full_disk_surfaces_as_ledger_unavailable_only(make_ledger: LedgerFactory) -> None:
    """SQLITE_FULL (the database may not grow a page more) during holds and settles:
    every failure is LedgerUnavailable — never "cannot rollback - no transaction is
    active" or any other raw sqlite3 error — and admins are told once."""
    ledger = await make_ledger(global_daily_musd=10**9)
    told: list[str] = []

    async def tell(reason: str) -> None:
        told.append(reason)

    ledger._notices.on_unavailable = tell
    store = ledger.store
    assert isinstance(store, SqliteStore)
    writer = store.writer

    def cap() -> None:
        assert writer.conn is not None
        pages = writer.conn.execute("PRAGMA page_count").fetchone()[0]
        writer.conn.execute(f"PRAGMA max_page_count={pages}")

    await writer.call(cap)
    failures: list[BaseException] = []
    for user in range(1, 400):
        try:
            ticket = await _reserve(ledger, user, 500, 500, 2_000)
            await ledger.settle(ticket.hold_id, Usage(input_tokens=400, output_tokens=400))
        except Exception as exc:
            failures.append(exc)
            if len(failures) >= 3:
                break
    assert failures, "the capped database never filled up"
    assert all(isinstance(f, LedgerUnavailable) for f in failures)
    assert not any(isinstance(f, sqlite3.Error) for f in failures)
    await ledger._notices.drain()
    assert told == ["storage"]


async def test_expiry_books_the_provable_bound(make_ledger: LedgerFactory) -> None:
    """An orphaned hold (estimate 10+90 = 100 µUSD, bound 400+90 = 490) is booked at
    its bound, so a late settle can only correct it downwards."""
    ledger = await make_ledger(global_daily_musd=10_000, hold_ttl_s=90.0)
    ticket = await _reserve(ledger, 1, 10, 90, 400)
    ledger.clock.advance(91)  # type: ignore[attr-defined]
    assert await ledger.sweep() == 1
    st = await ledger.status()
    day = next(b for b in st.buckets if b.level is Level.GLOBAL and b.window is Window.DAY)
    assert (day.held_musd, day.settled_musd) == (0, 490)
    assert await ledger.settle(ticket.hold_id, Usage(input_tokens=120, output_tokens=90)) == 210
    st = await ledger.status()
    day = next(b for b in st.buckets if b.level is Level.GLOBAL and b.window is Window.DAY)
    assert day.settled_musd == 210


async def test_calibration_is_persisted(make_ledger: LedgerFactory) -> None:
    """A model's reported ÷ counted ratio survives a restart: a new ledger on the same
    file after the first closed. (On SQLite the samples are posted to the writer, not
    waited for; the close commits them. Opening the second while the first still had
    them queued failed about once in 15 loaded suite runs.)"""
    first = await make_ledger()
    await first.record_calibration("deepseek", "deepseek-chat", 2_068_965, 3)
    await first.record_calibration("deepseek", "deepseek-chat", 2_100_000, 4)
    await first.close()
    second = await make_ledger()
    assert await second.calibration() == {("deepseek", "deepseek-chat"): (2_100_000, 4)}


async def test_a_settle_that_failed_is_settled_by_the_next_sweep(
    make_ledger: LedgerFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The database went away while a paid answer was generated: its settle failed, and
    the process, which alone knew the usage, kept nothing — at its TTL the hold was
    booked at its ceiling, estimated, for good (~20x the call). Now the
    next sweep after storage is back settles it with the real usage: the same booking
    as a twin settled at once, no hold outstanding, nothing kept."""
    ledger = await make_ledger(global_daily_musd=10**6)
    usage = Usage(10, 0, 5)
    late, twin = await _reserve(ledger, 1, 10, 10, 40), await _reserve(ledger, 2, 10, 10, 40)
    real_settle = ledger.store.settle

    async def down(*args: object, **kwargs: object) -> object:
        raise LedgerUnavailable()

    monkeypatch.setattr(ledger.store, "settle", down)
    with pytest.raises(LedgerUnavailable):
        await ledger.settle(late.hold_id, usage)
    await ledger.sweep()  # settling still fails: kept for the next sweep
    assert (await ledger.user_status(1)).outstanding_holds == 1
    monkeypatch.setattr(ledger.store, "settle", real_settle)
    cost = await ledger.settle(twin.hold_id, usage)
    await ledger.sweep()
    first, second = await ledger.user_status(1), await ledger.user_status(2)
    assert first.outstanding_holds == 0 and first.settled_today_musd == cost > 0
    assert second.settled_today_musd == cost
    assert await ledger.settle(late.hold_id, usage) == cost  # idempotent, as before


async def test_the_sweep_log_names_the_bound_it_booked(
    make_ledger: LedgerFactory, clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    """An expired hold is booked at its bound (ceiling plus admission margin); the log
    said "at their ceilings" beside a figure above the ceiling."""
    ledger = await make_ledger(global_daily_musd=10**6)
    hold = await _reserve(ledger, 1, 10, 10, 40)
    clock.advance(ledger.config.hold_ttl_s + 1)
    assert await ledger.sweep() == 1
    booked = (await ledger.user_status(1)).settled_today_musd
    assert booked > hold.ceiling_musd  # the margin of the 40-token input bound
    assert f"booked {booked} µUSD at their bounds (ceiling plus admission margin)" in caplog.text


async def test_budget_and_the_docs_name_the_bound_an_expired_hold_is_booked_at(
    make_ledger: LedgerFactory, clock: ManualClock
) -> None:
    """/budget listed a swept hold booked at 25,020 µUSD (ceiling 21,590 + margin)
    under "Expired holds booked at their ceiling", and README said "ceiling" in four
    places. The rule stays — the bound is the least the provider could
    have billed —; every sentence now names it, in the README and in docs/."""
    from bot.handlers.admin.budget import render_budget  # the /budget template

    ledger = await make_ledger(global_daily_musd=10**6)
    hold = await _reserve(ledger, 1, 10, 10, 40)
    clock.advance(ledger.config.hold_ttl_s + 1)
    assert await ledger.sweep() == 1
    status = await ledger.status()
    booked = status.expired_booked_musd_today
    assert booked > hold.ceiling_musd  # the margin of the 40-token input bound
    cascade = SimpleNamespace(
        provider_status=list, stats=lambda: SimpleNamespace(paid_anchor_calls=0)
    )
    text = render_budget(status, [], cast(Any, cascade), "UTC", 0)
    assert (
        f"Expired holds booked at their bound (ceiling + admission margin; no settle yet): "
        f"1, {usd(booked)}"
    ) in text
    docs = text_of_docs()  # the README and docs/, where README's money text moved
    for stale in (
        "swept (booked at the ceiling",
        "books its holds at their ceilings",
        "Attempts booked at their ceiling after a crash",
        "next start books it at its ceiling",
        "expire and are booked at their ceiling",
        "expired and booked at its ceiling",
    ):
        assert stale not in docs
    assert docs.count("ceiling plus admission margin") >= 6
