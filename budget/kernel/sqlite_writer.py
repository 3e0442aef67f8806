"""One stdlib ``sqlite3`` connection owned by one thread, with group commit (the SQLite
ledger's writer; the why, with SQLite's own words on durability:
``docs/decisions/011-sqlite-single-writer.md``).

Every step runs on that thread in a ``BEGIN IMMEDIATE`` transaction (the write lock is
taken before the first read: a check and its write are atomic, also against other
processes); the event loop only queues a step and awaits its future. The thread takes
every step queued and runs them in ONE transaction, a ``SAVEPOINT`` each (a declined
step keeps what it wrote; an error rolls back that step only), commits once, then
answers them: no step is answered before the COMMIT that contains it returned. Groups
commit under ``synchronous=NORMAL``; after a group in which a *durable* step succeeded
(a :class:`StepDeclined` is no success) the WAL is fsync'd before anyone is answered,
as ``synchronous=FULL`` would (``os.fdatasync`` where it exists). Any ``sqlite3.Error``
or ``OSError`` becomes the owner's ``unavailable`` exception (the ledger's
:class:`~budget.errors.LedgerUnavailable`); a failed COMMIT fails every step of its
group that wrote. This module imports nothing of the project but its savepoint helpers.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import os
import queue
import sqlite3
import threading
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from budget.kernel.sqlite_savepoints import release, rollback, undo

__all__ = ["BUSY_TIMEOUT_S", "MAX_GROUP", "SqliteWriter", "StepDeclined"]

T = TypeVar("T")

log = logging.getLogger(__name__)

#: Seconds a connection waits for another process's write lock.
BUSY_TIMEOUT_S = 15.0
#: Steps run in one group transaction at most.
MAX_GROUP = 256
#: Waiters of a group resumed per loop iteration at most (see ``_settle_futures``).
WAKE_SLICE = 4

_TXN, _READ, _CALL = 0, 1, 2
_STOP = object()


class StepDeclined(Exception):
    """Raised (or returned) by a step's body when the step says no: what it wrote (a
    record of the refusal) is kept and committed with its group, but it is no success
    (its group is not fsync'd for it). Raised, its caller gets :attr:`error`; returned,
    the caller gets this object itself.

    Attributes:
        error: what the step's caller gets when it was raised.
    """

    def __init__(self, error: BaseException) -> None:
        super().__init__(str(error))
        self.error = error


@dataclass(slots=True)
class _Step:
    kind: int
    fn: Callable[..., Any]
    args: tuple[Any, ...]
    durable: bool
    check_file: bool
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[Any]
    alone: bool = False  # run in a transaction (a commit) of its own


#: one step's answer: (step, ok, result or exception; a raised :class:`StepDeclined`
#: itself, not ok: answered with its error once the group committed)
_Result = tuple[_Step, bool, Any]


def _settle_futures(results: list[_Result], start: int = 0) -> None:
    """On the event loop: hand each step its result (a cancelled waiter is skipped),
    :data:`WAKE_SLICE` at a time — the rest in a later callback, so a big group's
    waiters resume over several loop iterations, not all in one (that held every other
    callback, timers included, behind them)."""
    end = min(len(results), start + WAKE_SLICE)
    for step, ok, value in results[start:end]:
        if step.future.done():
            continue
        if ok:
            step.future.set_result(value)
        else:
            step.future.set_exception(value.error if isinstance(value, StepDeclined) else value)
    if end < len(results):
        results[0][0].loop.call_soon(_settle_futures, results, end)


def _granted(result: _Result) -> bool:
    """A durable step that succeeded (a declined one, raised or returned, did not)."""
    step, ok, value = result
    return step.durable and step.kind == _TXN and ok and not isinstance(value, StepDeclined)


def _log_posted(what: str, future: asyncio.Future[object]) -> None:
    """Done callback of a posted step: log its failure (nobody awaits it)."""
    if future.cancelled():
        return
    exc = future.exception()
    if exc is not None:
        log.error("%s not written (%s)", what, type(exc).__name__, exc_info=exc)


class SqliteWriter:
    """The one connection to a SQLite file, on one dedicated thread, with group commit.

    Args:
        path: the database file.
        synchronous: ``"FULL"`` (the WAL is fsync'd after a group in which a durable
            step succeeded) or ``"NORMAL"`` (never); the connection itself always
            runs at ``synchronous=NORMAL``.
        unavailable: the exception class (called with no argument) a step's caller
            gets when storage failed or the writer is closed.
        max_group: steps per transaction at most.

    Attributes:
        commits: COMMITs done; ``synced_commits``: those followed by an fsync of the
            WAL (for the benchmark and tests).
        queued: steps queued since open (any kind); ``answered``: those done with.
    """

    def __init__(
        self,
        path: str | Path,
        synchronous: str,
        *,
        unavailable: type[Exception],
        max_group: int = MAX_GROUP,
    ) -> None:
        self.path = Path(path)
        self._unavailable_error = unavailable
        self._wal = f"{self.path}-wal"
        self.synchronous = synchronous
        self.max_group = max_group
        self._queue: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self.conn: sqlite3.Connection | None = None
        self._level = ""
        self._identity: tuple[int, int] | None = None
        self.commits = 0
        self.synced_commits = 0
        self.queued = 0
        self.answered = 0
        #: ``deleted``/``replaced`` once the path no longer names the open file
        self.lost: str = ""

    def _failed(self, exc: BaseException | None = None) -> Exception:
        error = self._unavailable_error()  # the owner's, caused by exc
        error.__cause__ = exc
        return error

    def __repr__(self) -> str:
        state = "open" if self._thread is not None else "closed"
        return (
            f"SqliteWriter({str(self.path)!r}, {state}, commits={self.commits}, "
            f"synced_commits={self.synced_commits})"
        )

    # -- life cycle -------------------------------------------------------------------
    def open(self) -> None:
        """Start the writer thread and open its connection (idempotent).

        Raises:
            sqlite3.Error, OSError: the file cannot be opened.
        """
        if self._thread is not None:
            return
        ready: concurrent.futures.Future[None] = concurrent.futures.Future()
        thread = threading.Thread(
            target=self._main, args=(ready,), name="ledger-writer", daemon=True
        )
        thread.start()
        ready.result()
        self._thread = thread

    def _connect(self) -> None:
        conn = sqlite3.connect(
            self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=True
        )
        conn.execute(f"PRAGMA busy_timeout={int(BUSY_TIMEOUT_S * 1000)}")
        conn.execute("PRAGMA journal_mode=WAL")
        self.conn = conn
        self._level = ""
        self._set_level("NORMAL")  # FULL's WAL sync is done by _sync_wal, when needed
        st = os.stat(self.path)
        self._identity = (st.st_dev, st.st_ino)

    def _set_level(self, level: str) -> None:  # outside a transaction; when it changes
        if level != self._level and self.conn is not None:
            self.conn.execute(f"PRAGMA synchronous={level}")
            self._level = level

    def _disconnect(self) -> None:
        if self.conn is not None:
            with contextlib.suppress(sqlite3.Error):
                self.conn.close()
            self.conn = None

    def close(self) -> None:
        """Finish the steps queued, close the connection, stop the thread (idempotent).
        Steps queued after this fail (``unavailable``)."""
        thread, self._thread = self._thread, None
        if thread is None:
            return
        self._queue.put(_STOP)
        thread.join()

    def check_file(self) -> None:
        """Fail closed when the path no longer names the open database file (deleted or
        replaced: the process would keep writing to an unlinked inode, lost at the next
        start); the path is stat-ed and compared with the (device, inode) opened.

        Raises:
            unavailable: the file is gone or replaced (sticky: :attr:`lost`).
        """
        if self.lost:
            raise self._failed()
        try:
            st = os.stat(self.path)
        except OSError:
            self.lost = "deleted"
            raise self._failed() from None
        if self._identity is not None and (st.st_dev, st.st_ino) != self._identity:
            self.lost = "replaced"
            raise self._failed()

    # -- the event loop's side ----------------------------------------------------------
    async def _submit(
        self,
        kind: int,
        fn: Callable[..., T],
        args: tuple[Any, ...] = (),
        *,
        durable: bool = True,
        check_file: bool = False,
        alone: bool = False,
    ) -> T:
        if self._thread is None:
            raise self._failed()
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        self.queued += 1
        self._queue.put(_Step(kind, fn, args, durable, check_file, loop, future, alone))
        return await future

    @property
    def idle(self) -> bool:
        """Nothing queued or running now (every step queued was answered)."""
        return self.answered == self.queued

    async def call(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn(*args)`` on the writer thread, outside any transaction (what the
        group before it wrote is committed first), and await its result.

        Raises:
            unavailable: the writer is closed, or any storage failure (SQLite
                error, OS error such as a full disk) — never a raw ``sqlite3`` error.
        """
        return await self._submit(_CALL, fn, args)

    async def txn(
        self,
        body: Callable[[sqlite3.Cursor], T],
        *,
        check_file: bool = False,
        durable: bool = True,
        alone: bool = False,
    ) -> T:
        """Run ``body`` as one step of a group transaction on the writer thread (after
        :meth:`check_file` when asked): all of it or none of it, answered once the
        group's COMMIT returned.

        Args:
            durable: when this step succeeds, the WAL is fsync'd before it is answered;
                ``False``: a *grouped* step, fsync'd by the next durable group.
            alone: in a group (a transaction, a commit, an fsync) of its own: nothing
                queued before or after it shares its commit (retention's steps).

        Raises:
            BaseException: ``body`` raised :class:`StepDeclined`: its ``error``, once
                what the step wrote (the record of the refusal) is committed.
            unavailable: storage failed (nothing of this step was committed).
        """
        return await self._submit(_TXN, body, durable=durable, check_file=check_file, alone=alone)

    def post(self, body: Callable[[sqlite3.Cursor], object], what: str) -> None:
        """Queue ``body`` as a *grouped* step and return at once, without waiting for its
        commit (writes nobody waits for leave the reply's path). Every step queued after
        it runs after it and sees what it wrote; it commits like any grouped step (before
        :meth:`close` returns). Its failure is logged (``what`` names it), never raised:
        only for writes whose loss costs no money (an end of operation, a history turn,
        a calibration sample).

        Raises:
            unavailable: the writer is closed (nothing was queued).
        """
        if self._thread is None:
            raise self._failed()
        loop = asyncio.get_running_loop()
        future: asyncio.Future[object] = loop.create_future()
        future.add_done_callback(partial(_log_posted, what))
        self.queued += 1
        self._queue.put(_Step(_TXN, body, (), False, False, loop, future))

    async def read(self, body: Callable[[sqlite3.Cursor], T]) -> T:
        """Run a read-only ``body`` on the writer's connection: a consistent snapshot
        that includes every step queued before it."""
        return await self._submit(_READ, body)

    # -- the writer thread --------------------------------------------------------------
    def _main(self, ready: concurrent.futures.Future[None]) -> None:
        try:
            self._connect()
        except BaseException as exc:  # noqa: BLE001 - handed to open(), which raises it
            ready.set_exception(exc)
            return
        ready.set_result(None)
        stopping = False
        while not stopping:
            group = [self._queue.get()]
            while len(group) < self.max_group:
                try:
                    group.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            segment: list[_Step] = []
            for item in group:
                if item is _STOP:
                    stopping = True
                    continue
                assert isinstance(item, _Step)
                if stopping:
                    self._deliver([(item, False, self._failed())])
                elif item.kind == _CALL or item.alone:
                    self._run_segment(segment)
                    segment = []
                    if item.alone:
                        self._run_segment([item])
                    else:
                        self._deliver([self._call(item, *item.args)])
                else:
                    segment.append(item)
            self._run_segment(segment)
        self._drain_closed()
        self._disconnect()

    def _drain_closed(self) -> None:
        """Steps queued while closing: fail closed."""
        late: list[_Result] = []
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            if isinstance(item, _Step):
                late.append((item, False, self._failed()))
        self._deliver(late)

    def _call(self, step: _Step, *args: Any) -> _Result:
        """``step.fn(*args)`` outside any savepoint (a call, or a read's body)."""
        try:
            return step, True, step.fn(*args)
        except (sqlite3.Error, OSError) as exc:
            return step, False, self._failed(exc)
        except Exception as exc:  # noqa: BLE001 - re-raised in the caller (a bug, unavailable)
            return step, False, exc

    def _run_segment(self, steps: list[_Step]) -> None:
        """Run ``steps`` (transactions and reads) in one transaction, commit once, answer."""
        if not steps:
            return
        conn = self.conn
        if conn is None:
            self._deliver([(s, False, self._failed()) for s in steps])
            return
        writes = any(s.kind == _TXN for s in steps)
        done: list[_Result] = []  # answered once the COMMIT (and the fsync) returned
        failed: list[_Result] = []  # answered whatever happens to the transaction
        try:
            self._set_level("NORMAL")
            conn.execute("BEGIN IMMEDIATE" if writes else "BEGIN")
        except sqlite3.Error as exc:
            rollback(conn)
            self._deliver([(s, False, self._failed(exc)) for s in steps])
            return
        for step in steps:
            if not conn.in_transaction:
                # SQLite rolled the whole transaction back (full disk, I/O error): what
                # the earlier steps wrote is gone; start over for the rest
                failed.extend((s, False, self._failed()) for s, _ok, _v in done)
                done.clear()
                try:
                    conn.execute("BEGIN IMMEDIATE" if writes else "BEGIN")
                except sqlite3.Error as exc:
                    failed.append((step, False, self._failed(exc)))
                    continue
            result = self._step(conn, step)
            (done if result[1] or isinstance(result[2], StepDeclined) else failed).append(result)
        if conn.in_transaction:
            try:
                conn.execute("COMMIT")
            except sqlite3.Error as exc:
                rollback(conn)
                failed.extend((s, False, self._failed(exc)) for s, _ok, _v in done)
                done.clear()
            else:
                self.commits += 1
                if self.synchronous == "FULL" and any(_granted(r) for r in done):
                    try:
                        self._sync_wal()
                    except OSError as exc:
                        # committed but maybe not on disk: no durable step may be told
                        # it holds (money-safe: a granted hold nobody uses is booked at
                        # its ceiling when it expires)
                        failed.extend(
                            (s, False, self._failed(exc)) if s.durable else (s, ok, v)
                            for s, ok, v in done
                        )
                        done.clear()
                    else:
                        self.synced_commits += 1
        else:
            failed.extend((s, False, self._failed()) for s, _ok, _v in done)
            done.clear()
        self._deliver(done + failed)

    def _sync_wal(self) -> None:
        """fsync the WAL file (what ``synchronous=FULL`` does after a commit).

        Raises:
            OSError: it cannot be opened or synced.
        """
        fd = os.open(self._wal, os.O_RDONLY)
        try:
            # fdatasync where there is one, as SQLite's own sync (the WAL's data and
            # size, not its timestamps: no filesystem journal commit for those)
            getattr(os, "fdatasync", os.fsync)(fd)
        finally:
            os.close(fd)

    def _step(self, conn: sqlite3.Connection, step: _Step) -> _Result:
        """Run one step inside the open transaction."""
        if step.kind == _READ:
            return self._call(step, conn.cursor())
        try:
            if step.check_file:
                self.check_file()
            conn.execute("SAVEPOINT step")
        except self._unavailable_error as exc:
            return step, False, exc
        except sqlite3.Error as exc:
            return step, False, self._failed(exc)
        try:
            result = step.fn(conn.cursor())
        except StepDeclined as declined:
            # keep what the step wrote (the record of the refusal); it commits with the group
            if not release(conn):
                return step, False, self._failed()
            return step, False, declined
        except (sqlite3.Error, OSError) as exc:
            undo(conn)
            return step, False, self._failed(exc)
        except Exception as exc:  # noqa: BLE001 - re-raised in the caller (UnknownOperation …)
            undo(conn)
            return step, False, exc
        if not release(conn):
            return step, False, self._failed()
        return step, True, result

    def _deliver(self, results: list[_Result]) -> None:
        """Hand results to their event loops: one wake-up per loop per group."""
        self.answered += len(results)
        by_loop: dict[asyncio.AbstractEventLoop, list[_Result]] = {}
        for result in results:
            by_loop.setdefault(result[0].loop, []).append(result)
        for loop, batch in by_loop.items():
            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits
                loop.call_soon_threadsafe(_settle_futures, batch)
