"""The SQLite ledger store: :class:`budget.storage.base.LedgerStore` on one SQLite file.

Every step is the base's, on the portable SQL (:mod:`budget.storage.sql`); this engine is
its runner: :mod:`budget.kernel.sqlite_writer` (one connection on one writer thread, the
steps queued run in one ``BEGIN IMMEDIATE`` group transaction, a savepoint each, errors
translated to ``LedgerUnavailable``). Its steps run one at a time, so it admits an
operation with its first hold in one step (:attr:`SqliteStore.defers_admission`).

Durable and grouped steps (``docs/decisions/011-sqlite-single-writer.md``): a granted hold, the kill
switch, limits, teams, corrections and the sweep are *durable* (the WAL is fsync'd after
their group's commit, before they are answered; a refused hold is not fsync'd);
operation and request admission, settle, release and the message counter are *grouped*
(committed before they are answered, fsync'd by the next durable group); the end of an
operation and calibration samples are *posted* (queued at once, committed with the next
group, not waited for: :meth:`SqliteWriter.post`). A power cut
can lose only grouped steps: a lost settle or release leaves its hold, which the next
start books at its bound, ceiling plus admission margin (never less than real); a lost
admission took no money.

One bot process per file (:mod:`budget.kernel.instance_lock`): the holds of any other
process id are swept at start. Times are epoch seconds from the ledger's clock;
money is integer µUSD.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import ClassVar, TypeVar

from budget.config import LedgerConfig
from budget.errors import LedgerUnavailable
from budget.kernel.sqlite_writer import BUSY_TIMEOUT_S, SqliteWriter
from budget.storage.base import Body, LedgerStore
from budget.storage.store import DURABLE, SettleOutcome, SweepOutcome, UnknownOperation, Write

__all__ = ["BUSY_TIMEOUT_S", "SettleOutcome", "SqliteStore", "SweepOutcome", "UnknownOperation"]

T = TypeVar("T")


class SqliteStore(LedgerStore):
    """The single-writer SQLite ledger store.

    Args:
        path: the database file (schema created by Alembic, or
            :func:`budget.storage.tables.create_schema` in tests).
        config: limits and knobs.
        process_id: identifies this process's holds (swept by the next start).
    """

    name: ClassVar[str] = "sqlite"
    defers_admission: ClassVar[bool] = True
    writer: SqliteWriter

    def __init__(self, path: str | Path, config: LedgerConfig, process_id: str) -> None:
        self.path = Path(path)
        self.config = config
        self.process_id = process_id
        self.writer = SqliteWriter(self.path, config.synchronous, unavailable=LedgerUnavailable)

    @property
    def location(self) -> str:
        """The database path."""
        return str(self.path)

    @property
    def lost(self) -> str:
        """``"deleted"``/``"replaced"`` once the path no longer names the open file."""
        return self.writer.lost

    async def open(self) -> None:
        """Start the writer thread and open its connection (idempotent)."""
        await asyncio.to_thread(self.writer.open)

    async def close(self) -> None:
        """Close the connection and stop the writer thread (idempotent)."""
        await asyncio.to_thread(self.writer.close)

    async def _write(self, body: Body[T], how: Write = DURABLE) -> T:
        """One step of a group transaction on the writer thread (the file's write lock
        covers every row: no row lock is taken)."""
        return await self.writer.txn(
            body, check_file=how.check_file, durable=how.durable, alone=how.alone
        )

    async def _read(self, body: Body[T]) -> T:
        return await self.writer.read(body)

    async def _post(self, body: Body[None], what: str) -> None:
        """Queued at once, committed with the next group, not waited for
        (:meth:`SqliteWriter.post`)."""
        self.writer.post(body, what)

    def __repr__(self) -> str:
        return f"SqliteStore(path={str(self.path)!r}, process_id={self.process_id!r})"
