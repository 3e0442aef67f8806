"""The SQLite writer's group commit: the steps queued while the writer is busy
run in one transaction, a savepoint each, and are committed once; a group is fsync'd
(the WAL fsync'd after the commit) only when a durable step of it succeeded."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import AsyncIterator, Awaitable, Sequence
from pathlib import Path
from typing import Any

import pytest

from budget.errors import HoldRefused, LedgerUnavailable
from budget.kernel.sqlite_writer import SqliteWriter
from budget.storage.store import RefusedStep
from budget.types import Refusal, RefusalReason


@pytest.fixture
async def writer(tmp_path: Path) -> AsyncIterator[SqliteWriter]:
    """A writer (synchronous FULL for durable steps) on a file with one table ``t``."""
    path = tmp_path / "w.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE t (k TEXT PRIMARY KEY, v INTEGER)")
    conn.commit()
    conn.close()
    w = SqliteWriter(path, "FULL", unavailable=LedgerUnavailable)
    w.open()
    yield w
    w.close()


def _insert(key: str, value: int = 1) -> Any:
    def body(cur: sqlite3.Cursor) -> str:
        cur.execute("INSERT INTO t VALUES (?, ?)", (key, value))
        return key

    return body


async def _grouped(writer: SqliteWriter, steps: Sequence[Awaitable[Any]]) -> list[Any]:
    """Queue ``steps`` while the writer thread is held busy, so they form one group."""
    running, gate = threading.Event(), threading.Event()

    def hold_busy() -> None:
        running.set()
        gate.wait(10)

    busy = asyncio.ensure_future(writer.call(hold_busy))
    await asyncio.to_thread(running.wait, 10)
    tasks = [asyncio.ensure_future(s) for s in steps]
    await asyncio.sleep(0)  # each task queues its step before its first await returns
    gate.set()
    await busy
    return await asyncio.gather(*tasks, return_exceptions=True)


async def _rows(writer: SqliteWriter) -> dict[str, int]:
    return dict(await writer.read(lambda cur: cur.execute("SELECT k, v FROM t").fetchall()))


async def _level(writer: SqliteWriter) -> int:
    """The connection's ``synchronous`` level now (1 NORMAL, 2 FULL)."""

    def level() -> int:
        assert writer.conn is not None
        return int(writer.conn.execute("PRAGMA synchronous").fetchone()[0])

    return await writer.call(level)


async def test_steps_queued_together_share_one_commit_and_isolate_failures(
    writer: SqliteWriter,
) -> None:
    """Ten steps queued while the writer is busy: one COMMIT; a step that fails rolls
    back its own writes only; a refused step keeps what it wrote (the refusal event)."""

    def fails(cur: sqlite3.Cursor) -> None:
        cur.execute("INSERT INTO t VALUES ('failed', 1)")
        raise ValueError("a bug in this step")

    def refused(cur: sqlite3.Cursor) -> None:
        cur.execute("INSERT INTO t VALUES ('refusal-event', 1)")
        raise RefusedStep(Refusal(RefusalReason.KILL))

    def duplicate(cur: sqlite3.Cursor) -> None:
        cur.execute("INSERT INTO t VALUES ('dup-partial', 1)")
        cur.execute("INSERT INTO t VALUES ('k0', 2)")  # primary key taken: sqlite3 error

    before = writer.commits
    steps = [writer.txn(_insert(f"k{i}"), durable=False) for i in range(6)]
    steps += [writer.txn(fails), writer.txn(refused), writer.txn(duplicate)]
    steps.append(writer.txn(_insert("last")))
    results = await _grouped(writer, steps)
    assert writer.commits - before == 1
    assert results[:6] == [f"k{i}" for i in range(6)]
    assert isinstance(results[6], ValueError)
    assert isinstance(results[7], HoldRefused)
    assert isinstance(results[8], LedgerUnavailable)
    assert results[9] == "last"
    rows = await _rows(writer)
    assert set(rows) == {"k0", "k1", "k2", "k3", "k4", "k5", "refusal-event", "last"}
    assert rows["k0"] == 1


def _count_wal_syncs(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Record the file of every ``os.fsync``/``os.fdatasync`` from now on."""
    import os

    synced: list[str] = []
    for name in ("fsync", "fdatasync"):
        real = getattr(os, name)

        def sync(fd: int, real: Any = real) -> None:
            synced.append(os.readlink(f"/proc/self/fd/{fd}"))
            real(fd)

        monkeypatch.setattr(os, name, sync)
    return synced


async def test_only_groups_with_a_durable_step_that_succeeded_are_fsynced(
    writer: SqliteWriter, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every group commits under synchronous=NORMAL; the WAL is fsync'd after a group in
    which a durable step succeeded, once per group however many; a durable step that
    was refused (raised or returned) leaves its group unsynced."""
    synced = _count_wal_syncs(monkeypatch)
    base = writer.synced_commits
    await writer.txn(_insert("settle"), durable=False)
    assert await _level(writer) == 1
    assert (writer.synced_commits, synced) == (base, [])
    await writer.txn(_insert("hold"))
    assert await _level(writer) == 1
    assert writer.synced_commits == base + 1
    assert len(synced) == 1 and synced[0].endswith("w.db-wal")
    before = writer.commits
    await _grouped(
        writer,
        [
            writer.txn(_insert("g1"), durable=False),
            writer.txn(_insert("h2")),
            writer.txn(_insert("h3")),
        ],
    )
    assert (writer.commits - before, writer.synced_commits, len(synced)) == (1, base + 2, 2)

    def refused_raised(cur: sqlite3.Cursor) -> None:
        cur.execute("INSERT INTO t VALUES ('refusal-1', 1)")
        raise RefusedStep(Refusal(RefusalReason.LIMIT))

    def refused_returned(cur: sqlite3.Cursor) -> RefusedStep:
        cur.execute("INSERT INTO t VALUES ('refusal-2', 1)")
        return RefusedStep(Refusal(RefusalReason.BUSY))

    results = await _grouped(writer, [writer.txn(refused_raised), writer.txn(refused_returned)])
    assert isinstance(results[0], HoldRefused) and isinstance(results[1], RefusedStep)
    assert (writer.synced_commits, len(synced)) == (base + 2, 2)
    assert set(await _rows(writer)) == {
        "settle",
        "hold",
        "g1",
        "h2",
        "h3",
        "refusal-1",
        "refusal-2",
    }


async def test_a_failed_wal_sync_fails_the_durable_steps_only(
    writer: SqliteWriter, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Committed but not known to be on disk: a durable step is not told it succeeded
    (LedgerUnavailable); a grouped step of the same group is answered as committed."""
    import os

    def broken(_fd: int) -> None:
        raise OSError(5, "I/O error")

    monkeypatch.setattr(os, "fsync", broken)
    monkeypatch.setattr(os, "fdatasync", broken)
    results = await _grouped(
        writer, [writer.txn(_insert("grouped"), durable=False), writer.txn(_insert("hold"))]
    )
    assert results[0] == "grouped"
    assert isinstance(results[1], LedgerUnavailable)


async def test_normal_mode_never_fsyncs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With ``synchronous="NORMAL"`` even a durable step commits without an fsync."""
    path = tmp_path / "n.db"
    sqlite3.connect(path).execute("CREATE TABLE t (k TEXT PRIMARY KEY, v INTEGER)").close()
    synced = _count_wal_syncs(monkeypatch)
    w = SqliteWriter(path, "NORMAL", unavailable=LedgerUnavailable)
    w.open()
    try:
        await w.txn(_insert("hold"))
        assert await _level(w) == 1
        assert (w.commits, w.synced_commits, synced) == (1, 0, [])
    finally:
        w.close()


async def test_a_failed_commit_fails_every_step_of_the_group(writer: SqliteWriter) -> None:
    """When SQLite rolls the whole transaction back (the file may not grow: SQLITE_FULL),
    every step of the group that wrote fails with LedgerUnavailable — none is answered
    as if committed — and the writer keeps working once there is room again."""

    def cap(pages: int | None) -> None:
        assert writer.conn is not None
        if pages is None:
            pages = int(writer.conn.execute("PRAGMA page_count").fetchone()[0])
        writer.conn.execute(f"PRAGMA max_page_count={pages}")

    await writer.call(cap, None)

    def big(key: str) -> Any:
        def body(cur: sqlite3.Cursor) -> str:
            cur.execute("INSERT INTO t VALUES (?, ?)", (key, 1))
            cur.execute("UPDATE t SET k = k || ? WHERE k = ?", ("x" * 20_000, key))
            return key

        return body

    results = await _grouped(writer, [writer.txn(big(f"b{i}"), durable=False) for i in range(3)])
    assert all(isinstance(r, LedgerUnavailable) for r in results)
    await writer.call(cap, 10_000)
    assert await writer.txn(_insert("after")) == "after"
    assert set(await _rows(writer)) == {"after"}


async def test_closed_writer_fails_closed(writer: SqliteWriter) -> None:
    """After close() every step fails with LedgerUnavailable, never a raw error."""
    writer.close()
    with pytest.raises(LedgerUnavailable):
        await writer.txn(_insert("late"))
    with pytest.raises(LedgerUnavailable):
        await writer.read(lambda cur: None)


async def test_a_groups_waiters_resume_a_slice_per_loop_iteration(writer: SqliteWriter) -> None:
    """Twelve steps answered by one commit resume WAKE_SLICE per loop iteration, in
    queue order (not all in one iteration, ahead of every timer:
    docs/decisions/011-sqlite-single-writer.md)."""
    from budget.kernel.sqlite_writer import WAKE_SLICE

    order: list[tuple[int, int]] = []
    iteration = 0

    async def ticker() -> None:
        nonlocal iteration
        while True:
            await asyncio.sleep(0)
            iteration += 1

    async def step(i: int) -> None:
        await writer.txn(_insert(f"s{i}"), durable=False)
        order.append((i, iteration))

    tick = asyncio.ensure_future(ticker())
    try:
        await _grouped(writer, [step(i) for i in range(12)])
    finally:
        tick.cancel()
    assert [i for i, _ in order] == list(range(12))
    per_iteration: dict[int, int] = {}
    for _i, at in order:
        per_iteration[at] = per_iteration.get(at, 0) + 1
    assert max(per_iteration.values()) <= WAKE_SLICE
    assert len(per_iteration) >= 12 // WAKE_SLICE
