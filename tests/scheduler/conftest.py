"""Fakes at the scheduler's boundaries: ledger, cascade, Telegram delivery, sources; a DB."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from budget.kernel.db import create_engine
from budget.storage.tables import processes
from scheduler.tables import metadata
from tests.scheduler.scheduler_fakes import FakeBackend, FakeDeliverer, FakeFetcher, FakeLedger
from tests.support.clocks import ManualClock

__all__ = ["FakeBackend", "FakeDeliverer", "FakeFetcher", "FakeLedger"]


@pytest.fixture(params=["sqlite", "postgresql"])
async def sessions(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[async_sessionmaker[AsyncSession]]:
    """The scheduler tables (and ``budget_processes``) on each engine: a fresh SQLite
    file (``create_all``), and a
    fresh PostgreSQL database at the migrations' head (``pg_migrated_url``)."""
    if request.param == "postgresql":
        engine = create_engine(request.getfixturevalue("pg_migrated_url"))
    else:
        engine = create_engine(f"sqlite+aiosqlite:///{tmp_path / 'kopek.db'}")
        async with engine.begin() as conn:
            await conn.run_sync(metadata.create_all)
            await conn.run_sync(processes.create)  # the claims read the heartbeats
    yield async_sessionmaker(engine, expire_on_commit=False)
    await engine.dispose()


@pytest.fixture
def clock() -> ManualClock:
    """Virtual time starting 2026-03-01 00:00 UTC."""
    return ManualClock(datetime(2026, 3, 1, tzinfo=UTC))
