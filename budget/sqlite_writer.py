"""The SQLite ledger's connection: one stdlib ``sqlite3`` connection owned by one thread.

Design (see issue 3's benchmark notes): a single writer. Every ledger step (admit an
operation, reserve, settle, release, sweep, kill …) is ONE ``BEGIN IMMEDIATE``
transaction run on that thread: the write lock is taken before the first read, so
the check ("does the ceiling fit on every level?") and the write happen atomically,
also against other processes using the same file. The asyncio event loop only
awaits a future, so it is never blocked by the database.

Durability: WAL journal. ``synchronous=FULL`` (default) fsyncs the WAL on every
commit, so a granted hold or a settlement survives a process crash *and* a power
cut before the caller is told. ``synchronous=NORMAL`` writes the WAL before
``COMMIT`` returns (safe against a process crash, which is what the ledger
promises) but fsyncs only at checkpoints (an OS crash may lose the last commits).

Errors: any ``sqlite3.Error`` or ``OSError`` becomes
:class:`~budget.errors.LedgerUnavailable` here, at the boundary.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import os
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from budget.errors import HoldRefused, LedgerUnavailable
from budget.store import RefusedCommit

__all__ = ["BUSY_TIMEOUT_S", "SqliteWriter"]

T = TypeVar("T")

#: Seconds a connection waits for another process's write lock.
BUSY_TIMEOUT_S = 15.0


class SqliteWriter:
    """One SQLite connection on one dedicated thread.

    Args:
        path: the database file.
        synchronous: ``"FULL"`` or ``"NORMAL"`` (see the module docstring).
    """

    def __init__(self, path: str | Path, synchronous: str) -> None:
        self.path = Path(path)
        self.synchronous = synchronous
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        self.conn: sqlite3.Connection | None = None
        self._thread_id: int | None = None
        self._identity: tuple[int, int] | None = None
        #: set once the path stops naming the open file (deleted or replaced):
        #: every later write fails closed with LedgerUnavailable
        self.lost: str = ""

    def open(self) -> None:
        """Start the writer thread and open its connection (idempotent)."""
        if self._executor is not None:
            return
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="ledger-writer"
        )
        self._executor.submit(self._connect).result()

    def _connect(self) -> None:
        conn = sqlite3.connect(
            self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=True
        )
        conn.execute(f"PRAGMA busy_timeout={int(BUSY_TIMEOUT_S * 1000)}")
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute(f"PRAGMA synchronous={self.synchronous}")
        self.conn = conn
        self._thread_id = threading.get_ident()
        st = os.stat(self.path)
        self._identity = (st.st_dev, st.st_ino)

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

    def _disconnect(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    def close(self) -> None:
        """Close the connection and stop the writer thread (idempotent)."""
        if self._executor is None:
            return
        self._executor.submit(self._disconnect).result()
        self._executor.shutdown(wait=True)
        self._executor = None

    async def call(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn(*args)`` on the writer thread and await its result.

        Raises:
            LedgerUnavailable: the writer is closed, or any storage failure (SQLite
                error, OS error such as a full disk) — never a raw ``sqlite3`` error.
        """
        if self._executor is None:
            raise LedgerUnavailable()
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self._executor, fn, *args)
        except RuntimeError as exc:  # executor shut down under us
            raise LedgerUnavailable() from exc
        except (sqlite3.Error, OSError) as exc:
            raise LedgerUnavailable() from exc

    async def txn(self, body: Callable[[sqlite3.Cursor], T], *, check_file: bool = False) -> T:
        """Run ``body`` in one ``BEGIN IMMEDIATE`` transaction on the writer thread
        (after :meth:`check_file` when asked); fail closed on any DB error.

        Raises:
            HoldRefused: ``body`` raised :class:`~budget.store.RefusedCommit` (what it
                wrote, the refusal event, is committed first).
            LedgerUnavailable: storage failed (nothing was committed).
        """

        def run() -> T:
            if check_file:
                self.check_file()
            return self.txn_sync(body)

        return await self.call(run)

    async def read(self, body: Callable[[sqlite3.Cursor], T]) -> T:
        """Run a read-only ``body`` in one deferred transaction (a consistent snapshot)."""
        return await self.call(self.read_sync, body)

    @staticmethod
    def _rollback(conn: sqlite3.Connection) -> None:
        """Roll back if a transaction is still open (SQLite may already have rolled
        it back itself, e.g. on SQLITE_FULL: "cannot rollback - no transaction is
        active" must not replace the real failure)."""
        if conn.in_transaction:
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")

    def txn_sync(self, body: Callable[[sqlite3.Cursor], T]) -> T:
        """:meth:`txn` on the writer thread itself."""
        conn = self.conn
        if conn is None:
            raise LedgerUnavailable()
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            raise LedgerUnavailable() from exc
        cur = conn.cursor()
        try:
            result = body(cur)
        except RefusedCommit as refused:
            try:
                conn.execute("COMMIT")
            except sqlite3.Error as exc:
                self._rollback(conn)
                raise LedgerUnavailable() from exc
            raise HoldRefused(refused.refusal) from None
        except (sqlite3.Error, OSError) as exc:
            self._rollback(conn)
            raise LedgerUnavailable() from exc
        except BaseException:
            self._rollback(conn)
            raise
        try:
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            self._rollback(conn)
            raise LedgerUnavailable() from exc
        return result

    def read_sync(self, body: Callable[[sqlite3.Cursor], T]) -> T:
        """:meth:`read` on the writer thread itself."""
        conn = self.conn
        if conn is None:
            raise LedgerUnavailable()
        try:
            conn.execute("BEGIN")
            try:
                return body(conn.cursor())
            finally:
                if conn.in_transaction:
                    conn.execute("COMMIT")
        except sqlite3.Error as exc:
            self._rollback(conn)
            raise LedgerUnavailable() from exc
