"""The SQLite ledger's connection: one stdlib ``sqlite3`` connection owned by one thread,
with group commit.

Design (see issue 3's benchmark notes): a single writer. Every ledger step (admit an
operation, reserve, settle, release, sweep, kill …) runs on that thread inside a
``BEGIN IMMEDIATE`` transaction: the write lock is taken before the first read, so the
check ("does the ceiling fit on every level?") and the write happen atomically, also
against other processes using the same file. The asyncio event loop only queues a step
and awaits its future, so it is never blocked by the database.

Group commit (issue 10). The thread takes every step queued, runs them in the order
queued inside ONE transaction, each in its own ``SAVEPOINT`` (a refusal keeps what its
step wrote, the refusal event; an error rolls back that step only, never another's),
then commits once and answers every step of the group. At low load a group is one step:
one transaction, one commit, as before. No step is answered before the COMMIT that
contains it returned.

Durable and grouped steps. Every group commits under ``synchronous=NORMAL`` (the WAL
is written, not fsync'd, before ``COMMIT`` returns). When a *durable* step of the group
(``durable=True``, the default: a hold, a kill switch, a limit, a sweep) succeeded, the
WAL file is then fsync'd before any step of the group is answered — what
``synchronous=FULL`` does in WAL mode ("an additional sync of the WAL file after each
transaction commit", SQLite's documentation), decided after the steps ran instead of
before (issue 10): a durable step that was *refused* (a refused hold, raised or
returned as :class:`~budget.storage.store.RefusedCommit`) wrote only its refusal event, which
costs no money if lost, so a group of refusals is not fsync'd. SQLite documents that
"transactions are durable across application crashes regardless of the synchronous
setting" in WAL mode; only an OS crash or power cut can lose the unsynced tail of the
WAL — and since the WAL is one sequential file whose frames are only valid in order
(each frame's checksum covers every frame before it), the fsync after a durable group
also makes durable every earlier frame, including grouped steps and the rows other
connections (the bot's intake record) committed before it. With
``LedgerConfig.synchronous="NORMAL"`` nothing is fsync'd (a power cut may then lose
granted holds). The sync is ``os.fdatasync`` where it exists (Linux; as SQLite's own),
else ``os.fsync`` (macOS' does not flush the drive's cache, as SQLite's ``FULL``
without ``fullfsync`` does not).

Errors: any ``sqlite3.Error`` or ``OSError`` becomes
:class:`~budget.errors.LedgerUnavailable` here, at the boundary. When the COMMIT fails,
or SQLite itself rolls the whole transaction back (a full disk, an I/O error), every
step of the group that wrote fails with ``LedgerUnavailable`` (nothing of it was
committed).
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
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from budget.errors import HoldRefused, LedgerUnavailable
from budget.storage.store import RefusedCommit

__all__ = ["BUSY_TIMEOUT_S", "MAX_GROUP", "SqliteWriter"]

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


class _Step:
    __slots__ = ("args", "check_file", "durable", "fn", "future", "kind", "loop")

    def __init__(
        self,
        kind: int,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        durable: bool,
        check_file: bool,
        loop: asyncio.AbstractEventLoop,
        future: asyncio.Future[Any],
    ) -> None:
        self.kind = kind
        self.fn = fn
        self.args = args
        self.durable = durable
        self.check_file = check_file
        self.loop = loop
        self.future = future


#: one step's answer: (step, ok, result or exception)
_Result = tuple[_Step, bool, Any]


def _settle_futures(results: list[_Result], start: int = 0) -> None:
    """On the event loop: hand each step its result (a cancelled waiter is skipped),
    :data:`WAKE_SLICE` at a time — the rest in a later callback, so a big group's
    waiters resume over several loop iterations, not all in one (which held every
    other callback, timers included, behind them: issue 10's loop lag)."""
    end = min(len(results), start + WAKE_SLICE)
    for step, ok, value in results[start:end]:
        if step.future.done():
            continue
        if ok:
            step.future.set_result(value)
        else:
            step.future.set_exception(value)
    if end < len(results):
        results[0][0].loop.call_soon(_settle_futures, results, end)


def _granted(result: _Result) -> bool:
    """A durable step that succeeded (a refusal, raised or returned, is not one)."""
    step, ok, value = result
    return step.durable and step.kind == _TXN and ok and not isinstance(value, RefusedCommit)


def _log_posted(what: str, future: asyncio.Future[object]) -> None:
    """Done callback of a posted step: log its failure (nobody awaits it)."""
    if future.cancelled():
        return
    exc = future.exception()
    if exc is not None:
        log.error("%s not written (%s)", what, type(exc).__name__, exc_info=exc)


def _unavailable(exc: BaseException | None = None) -> LedgerUnavailable:
    error = LedgerUnavailable()
    error.__cause__ = exc
    return error


class SqliteWriter:
    """The one connection to a SQLite file, on one dedicated thread, with group commit.

    Args:
        path: the database file.
        synchronous: ``"FULL"`` (the WAL is fsync'd after a group in which a durable
            step succeeded) or ``"NORMAL"`` (never); see the module docstring. The
            connection itself always runs at ``synchronous=NORMAL``.
        max_group: steps per transaction at most.

    Attributes:
        commits: COMMITs done; ``synced_commits``: those followed by an fsync of the
            WAL (for the benchmark and tests).
    """

    def __init__(self, path: str | Path, synchronous: str, *, max_group: int = MAX_GROUP) -> None:
        self.path = Path(path)
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
        #: set once the path stops naming the open file (deleted or replaced):
        #: every later write fails closed with LedgerUnavailable
        self.lost: str = ""

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

    def _set_level(self, level: str) -> None:
        """``PRAGMA synchronous`` (only outside a transaction; only when it changes)."""
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
        Steps queued after this fail with ``LedgerUnavailable``."""
        thread, self._thread = self._thread, None
        if thread is None:
            return
        self._queue.put(_STOP)
        thread.join()

    def check_file(self) -> None:
        """Fail closed when the path no longer names the open database file.

        A file deleted (or replaced) under a running process keeps working on the
        unlinked inode, and everything booked there is gone at the next start. So
        before each hold and in every sweep the path is stat-ed and compared with
        the (device, inode) opened.

        Raises:
            LedgerUnavailable: the file is gone or replaced (sticky: :attr:`lost`).
        """
        if self.lost:
            raise LedgerUnavailable()
        try:
            st = os.stat(self.path)
        except OSError:
            self.lost = "deleted"
            raise LedgerUnavailable() from None
        if self._identity is not None and (st.st_dev, st.st_ino) != self._identity:
            self.lost = "replaced"
            raise LedgerUnavailable()

    # -- the event loop's side ----------------------------------------------------------
    async def _submit(
        self,
        kind: int,
        fn: Callable[..., T],
        args: tuple[Any, ...] = (),
        *,
        durable: bool = True,
        check_file: bool = False,
    ) -> T:
        if self._thread is None:
            raise LedgerUnavailable()
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        self._queue.put(_Step(kind, fn, args, durable, check_file, loop, future))
        return await future

    async def call(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn(*args)`` on the writer thread, outside any transaction (what the
        group before it wrote is committed first), and await its result.

        Raises:
            LedgerUnavailable: the writer is closed, or any storage failure (SQLite
                error, OS error such as a full disk) — never a raw ``sqlite3`` error.
        """
        return await self._submit(_CALL, fn, args)

    async def txn(
        self,
        body: Callable[[sqlite3.Cursor], T],
        *,
        check_file: bool = False,
        durable: bool = True,
    ) -> T:
        """Run ``body`` as one step of a group transaction on the writer thread (after
        :meth:`check_file` when asked): all of it or none of it. Answered once the
        group's COMMIT returned.

        Args:
            durable: when this step succeeds (a refusal is no success), the WAL is
                fsync'd after the group's COMMIT, before it is answered; ``False``: a
                *grouped* step, fsync'd by the next durable group that succeeds (see
                the module docstring).

        Raises:
            HoldRefused: ``body`` raised :class:`~budget.storage.store.RefusedCommit` (what it
                wrote, the refusal event, is committed with the group).
            LedgerUnavailable: storage failed (nothing of this step was committed).
        """
        return await self._submit(_TXN, body, durable=durable, check_file=check_file)

    def post(self, body: Callable[[sqlite3.Cursor], object], what: str) -> None:
        """Queue ``body`` as a *grouped* step and return at once, without waiting for its
        commit (issue 10: writes nobody waits for — the end of an operation, a history
        turn, calibration — leave the reply's path).

        The step is queued before this returns, so every step queued after it (by any
        caller) runs after it, in the same group or a later one, and sees what it
        wrote; it is committed like any grouped step (before :meth:`close` returns, for
        steps posted before the close). Its failure is logged (``what`` names it), never
        raised: use it only for writes whose loss costs no money (a lost end of
        operation frees its slot at the next start or expiry; a lost history turn or
        calibration sample is only that).

        Raises:
            LedgerUnavailable: the writer is closed (nothing was queued).
        """
        if self._thread is None:
            raise LedgerUnavailable()
        loop = asyncio.get_running_loop()
        future: asyncio.Future[object] = loop.create_future()
        future.add_done_callback(partial(_log_posted, what))
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
                    self._deliver([(item, False, LedgerUnavailable())])
                elif item.kind == _CALL:
                    self._run_segment(segment)
                    segment = []
                    self._deliver([self._call(item)])
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
                late.append((item, False, LedgerUnavailable()))
        self._deliver(late)

    @staticmethod
    def _call(step: _Step) -> _Result:
        try:
            return step, True, step.fn(*step.args)
        except (sqlite3.Error, OSError) as exc:
            return step, False, _unavailable(exc)
        except Exception as exc:  # noqa: BLE001 - re-raised in the caller (a bug, LedgerUnavailable)
            return step, False, exc

    def _run_segment(self, steps: list[_Step]) -> None:
        """Run ``steps`` (transactions and reads) in one transaction, commit once, answer."""
        if not steps:
            return
        conn = self.conn
        if conn is None:
            self._deliver([(s, False, LedgerUnavailable()) for s in steps])
            return
        writes = any(s.kind == _TXN for s in steps)
        done: list[_Result] = []  # answered once the COMMIT (and the fsync) returned
        failed: list[_Result] = []  # answered whatever happens to the transaction
        try:
            self._set_level("NORMAL")
            conn.execute("BEGIN IMMEDIATE" if writes else "BEGIN")
        except sqlite3.Error as exc:
            self._rollback(conn)
            self._deliver([(s, False, _unavailable(exc)) for s in steps])
            return
        for step in steps:
            if not conn.in_transaction:
                # SQLite rolled the whole transaction back (full disk, I/O error): what
                # the earlier steps wrote is gone; start over for the rest
                failed.extend((s, False, LedgerUnavailable()) for s, _ok, _v in done)
                done.clear()
                try:
                    conn.execute("BEGIN IMMEDIATE" if writes else "BEGIN")
                except sqlite3.Error as exc:
                    failed.append((step, False, _unavailable(exc)))
                    continue
            result = self._step(conn, step)
            (done if result[1] or isinstance(result[2], HoldRefused) else failed).append(result)
        if conn.in_transaction:
            try:
                conn.execute("COMMIT")
            except sqlite3.Error as exc:
                self._rollback(conn)
                failed.extend((s, False, _unavailable(exc)) for s, _ok, _v in done)
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
                            (s, False, _unavailable(exc)) if s.durable else (s, ok, v)
                            for s, ok, v in done
                        )
                        done.clear()
                    else:
                        self.synced_commits += 1
        else:
            failed.extend((s, False, LedgerUnavailable()) for s, _ok, _v in done)
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
            try:
                return step, True, step.fn(conn.cursor())
            except (sqlite3.Error, OSError) as exc:
                return step, False, _unavailable(exc)
            except Exception as exc:  # noqa: BLE001 - a bug: re-raised in the caller
                return step, False, exc
        try:
            if step.check_file:
                self.check_file()
            conn.execute("SAVEPOINT step")
        except LedgerUnavailable as exc:
            return step, False, exc
        except sqlite3.Error as exc:
            return step, False, _unavailable(exc)
        try:
            result = step.fn(conn.cursor())
        except RefusedCommit as refused:
            # keep what the step wrote (the refusal event); it commits with the group
            if not self._release(conn):
                return step, False, LedgerUnavailable()
            return step, False, HoldRefused(refused.refusal)
        except (sqlite3.Error, OSError) as exc:
            self._undo(conn)
            return step, False, _unavailable(exc)
        except Exception as exc:  # noqa: BLE001 - re-raised in the caller (UnknownOperation …)
            self._undo(conn)
            return step, False, exc
        if not self._release(conn):
            return step, False, LedgerUnavailable()
        return step, True, result

    @staticmethod
    def _release(conn: sqlite3.Connection) -> bool:
        try:
            conn.execute("RELEASE step")
        except sqlite3.Error:
            SqliteWriter._rollback(conn)
            return False
        return True

    @staticmethod
    def _undo(conn: sqlite3.Connection) -> None:
        """Roll back one step's savepoint (or the whole transaction if that fails)."""
        if not conn.in_transaction:
            return
        try:
            conn.execute("ROLLBACK TO step")
            conn.execute("RELEASE step")
        except sqlite3.Error:
            SqliteWriter._rollback(conn)

    @staticmethod
    def _rollback(conn: sqlite3.Connection) -> None:
        """Roll back if a transaction is still open (SQLite may already have rolled
        it back itself, e.g. on SQLITE_FULL: "cannot rollback - no transaction is
        active" must not replace the real failure)."""
        if conn.in_transaction:
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")

    @staticmethod
    def _deliver(results: list[_Result]) -> None:
        """Hand results to their event loops: one wake-up per loop per group."""
        by_loop: dict[asyncio.AbstractEventLoop, list[_Result]] = {}
        for result in results:
            by_loop.setdefault(result[0].loop, []).append(result)
        for loop, batch in by_loop.items():
            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits
                loop.call_soon_threadsafe(_settle_futures, batch)
