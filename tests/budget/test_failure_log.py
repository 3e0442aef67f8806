"""A database outage no longer logs a traceback per round of
each background loop. Through the ledger's real sweeper loop (SQLite store whose sweep
fails for a while, manual clock)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from budget.errors import LedgerUnavailable
from budget.ledger import Ledger
from budget.storage.sqlite.store import SqliteStore
from budget.storage.store import SweepOutcome
from tests.budget.ledger_helpers import BASE_CONFIG, card
from tests.support.clocks import ManualClock


async def test_an_outage_is_one_line_per_kind_with_one_traceback_and_one_line_when_it_ends(
    db_path: Path,
    clock: ManualClock,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """30 failed sweeps (refused connections, then 10 timeouts among them) log two
    ERROR lines — the first with its traceback, the second kind without — then one
    line when a sweep works again; the repeats are DEBUG only. A second outage is
    logged again."""
    real: Callable[..., Awaitable[SweepOutcome]] = SqliteStore.sweep
    calls = 0
    failing: list[type[OSError]] = [ConnectionRefusedError] * 20 + [TimeoutError] * 10

    async def sweep(self: SqliteStore, now: datetime, *args: Any) -> SweepOutcome:
        nonlocal calls
        calls += 1
        if failing:
            raise LedgerUnavailable() from failing.pop(0)()
        return await real(self, now, *args)

    ledger = Ledger(SqliteStore(db_path, BASE_CONFIG, "p1"), BASE_CONFIG, card(), clock)
    caplog.set_level(logging.DEBUG, logger="budget.ledger")
    await ledger.start()  # with the sweeper loop, on the manual clock
    monkeypatch.setattr(SqliteStore, "sweep", sweep)
    try:
        async with asyncio.timeout(10):
            while calls < 35:  # noqa: ASYNC110 - the loop runs on the manual clock
                await asyncio.sleep(0)
            lines = [r for r in caplog.records if "ledger sweep" in r.getMessage()]
            loud = [r for r in lines if r.levelno >= logging.INFO]
            assert [r.getMessage() for r in loud] == [
                "ledger sweep failed (ConnectionRefusedError); logged once until it works again",
                "ledger sweep failed (TimeoutError); logged once until it works again",
                "ledger sweep works again after 30 failed rounds",
            ]
            assert loud[0].exc_info is not None and loud[1].exc_info is None
            assert len(lines) - len(loud) == 28  # the repeats, at DEBUG
            failing.append(OSError)
            while not any("(OSError)" in r.getMessage() for r in caplog.records):  # noqa: ASYNC110
                await asyncio.sleep(0)
    finally:
        await ledger.close()
