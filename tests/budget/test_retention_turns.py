"""Retention on SQLite yields to the hot path: a batch waits while the ledger's writer
is busy and runs once it has been idle for ``idle_s`` on the injected clock; under a
constant load the floor still runs one batch every ``floor_s``; and a batch never shares
a group transaction (a commit) with the steps queued around it
(``docs/decisions/286-pruning-waits-for-an-idle-writer.md``)."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from budget.retention import LedgerRetention
from budget.storage.sql.retention import PrunedBatch
from budget.storage.sqlite.store import SqliteStore
from tests.budget.ledger_helpers import BASE_CONFIG
from tests.support.clocks import ManualClock

IDLE_S = 0.005
TURNS = 200  # event-loop turns a test lets the round look (each look moves the clock)


class SpyStore(SqliteStore):
    """The real store; each batch notes the clock's reading and whether the writer was
    idle when it was asked for."""

    clock: ManualClock
    asked: list[tuple[float, bool]]
    frees: list[threading.Event]  # set at teardown: a failed test must not hang the writer

    async def prune_batch(self, table: str, before_day: str, batch: int) -> PrunedBatch:
        self.asked.append((self.clock.monotonic(), self.writer.idle))
        return await super().prune_batch(table, before_day, batch)


@pytest.fixture
async def store(db_path: Path) -> AsyncIterator[SpyStore]:
    spy = SpyStore(db_path, BASE_CONFIG, "p0")
    spy.clock, spy.asked, spy.frees = ManualClock(), [], []
    await spy.open()
    yield spy
    for free in spy.frees:
        free.set()
    await spy.close()


def _retention(store: SpyStore, floor_s: float) -> LedgerRetention:
    return LedgerRetention(
        store, "UTC", store.clock, days=31, batch=10, idle_s=IDLE_S, floor_s=floor_s
    )


async def _busy(store: SpyStore) -> tuple[threading.Event, asyncio.Task[bool]]:
    """Keep the writer thread busy until the event is set (a step queued, running)."""
    free = threading.Event()
    store.frees.append(free)
    task = asyncio.ensure_future(store.writer.call(free.wait))
    await asyncio.sleep(0)
    assert not store.writer.idle
    return free, task


async def test_a_batch_waits_for_a_busy_writer_and_runs_once_it_is_idle(
    store: SpyStore,
) -> None:
    free, busy = await _busy(store)
    start = store.clock.monotonic()
    round_ = asyncio.create_task(_retention(store, floor_s=3_600).run_round(claim=False))
    for _ in range(TURNS):
        await asyncio.sleep(0)
    assert store.asked == []  # still waiting…
    assert store.clock.monotonic() - start >= 50 * IDLE_S  # …looking on the clock meanwhile
    freed_at = store.clock.monotonic()
    free.set()
    await busy
    report = await round_
    assert report.batches == len(store.asked) == 5  # one per table, nothing to prune
    first_at, idle = store.asked[0]
    assert idle and first_at >= freed_at + IDLE_S  # a whole look of idleness first
    assert all(idle for _at, idle in store.asked)


async def test_the_floor_runs_a_batch_under_constant_load(store: SpyStore) -> None:
    free, busy = await _busy(store)
    start = store.clock.monotonic()
    round_ = asyncio.create_task(_retention(store, floor_s=1.0).run_round(claim=False))
    for _ in range(5 * TURNS):
        if store.asked:
            break
        await asyncio.sleep(0)
    assert not busy.done()  # the writer never went idle
    [(at, idle)] = store.asked
    assert not idle and 1.0 <= at - start < 1.0 + 2 * IDLE_S
    free.set()
    await busy
    assert (await round_).batches == 5


async def test_a_batch_shares_no_commit_with_the_steps_queued_around_it(
    store: SpyStore,
) -> None:
    writer = store.writer

    def hot(cur: sqlite3.Cursor) -> None:
        cur.execute("SELECT 1")

    free, busy = await _busy(store)
    commits = writer.commits
    queued = [
        asyncio.ensure_future(writer.txn(hot)),
        asyncio.ensure_future(store.prune_batch("budget_requests", "2000-01-01", 10)),
        asyncio.ensure_future(writer.txn(hot)),
    ]
    await asyncio.sleep(0)
    free.set()
    await busy
    await asyncio.gather(*queued)
    assert writer.commits - commits == 3  # the hot steps before and after, the batch alone
    free, busy = await _busy(store)  # the same three queued without the batch: one group
    commits = writer.commits
    together = [asyncio.ensure_future(writer.txn(hot)) for _ in range(3)]
    await asyncio.sleep(0)
    free.set()
    await busy
    await asyncio.gather(*together)
    assert writer.commits - commits == 1
