"""RETENTION_DAYS: once a day, prune the ledger's per-attempt rows and events, the intake
records and the chat history older than the window, in bounded batches
(``docs/decisions/140-retention-keeps-sums.md``).

One round per ledger day per database (the first process to claim it; other replicas
skip), first :data:`FIRST_ROUND_DELAY_S` after start, then looked for every
:data:`ROUND_EVERY_S`. The ledger's part is :class:`budget.retention.LedgerRetention`
(its sums kept); then ``seen_messages`` (by ``received_at``) and ``chat_turns`` (by
``created_at``) older than the first kept day's start in BUDGET_TZ, nothing kept of
them. Each batch is one step: on SQLite one step of the ledger's writer (the file's one
writer, ``docs/decisions/061-one-writer-per-sqlite-file.md``) alone in its transaction,
once the writer is idle (``docs/decisions/286-pruning-waits-for-an-idle-writer.md``),
on PostgreSQL one short transaction.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from dataclasses import dataclass, field
from datetime import date, datetime, time
from functools import partial
from typing import Any
from zoneinfo import ZoneInfo

import sqlalchemy as sa
from sqlalchemy.dialects import sqlite
from sqlalchemy.ext.asyncio import AsyncEngine

from bot.storage.tables import ChatTurn, SeenMessage, metadata
from budget.kernel.clock import Clock
from budget.kernel.failure_log import FailureLog
from budget.kernel.tasks import cancel_and_wait
from budget.ledger import Ledger
from budget.policy.windows import day_bounds, window_keys
from budget.retention import LedgerRetention, RoundReport, cutoff_day

__all__ = ["FIRST_ROUND_DELAY_S", "ROUND_EVERY_S", "RetentionJob", "RetentionReport"]

log = logging.getLogger(__name__)

#: Seconds after start before the first round (start-up's own writes come first).
FIRST_ROUND_DELAY_S = 300.0
#: Seconds between two looks for the day's round.
ROUND_EVERY_S = 3_600.0

_DIALECT = sqlite.dialect()
#: the bot's tables a round prunes: (table, its time column)
_BOT_TABLES: tuple[tuple[sa.Table, str], ...] = (
    (metadata.tables[SeenMessage.__tablename__], "received_at"),
    (metadata.tables[ChatTurn.__tablename__], "created_at"),
)


@dataclass(slots=True)
class RetentionReport:
    """A round: the ledger's part and the bot's rows pruned per table."""

    ledger: RoundReport
    bot_rows: dict[str, int] = field(default_factory=dict)

    @property
    def total(self) -> int:
        """Rows pruned in every table."""
        return self.ledger.total + sum(self.bot_rows.values())


def _sqlite_batch(cur: sqlite3.Cursor, *, table: str, column: str, before: Any, batch: int) -> int:
    cur.execute(
        f"DELETE FROM {table} WHERE id IN (SELECT id FROM {table}"  # noqa: S608 - fixed names
        f" WHERE {column} < ? LIMIT ?)",
        (before, batch),
    )
    return cur.rowcount


class RetentionJob:
    """The daily pruning of one process (module docstring).

    Args:
        ledger: the ledger (its store runs the ledger's part and, on SQLite, the writer
            takes the bot's batches).
        engine: the bot's database (PostgreSQL batches of the bot's tables).
        tz: BUDGET_TZ.
        clock: the bot's clock.
        days, batch: RETENTION_DAYS (> 0), RETENTION_BATCH_ROWS.
    """

    def __init__(
        self,
        ledger: Ledger,
        engine: AsyncEngine,
        tz: str,
        clock: Clock,
        *,
        days: int,
        batch: int,
    ) -> None:
        self._store = ledger.store
        self._engine = engine
        self._tz = tz
        self._clock = clock
        self._ledger = LedgerRetention(ledger.store, tz, clock, days=days, batch=batch)
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Start the daily loop (idempotent)."""
        if self._task is None:
            self._task = asyncio.create_task(self._loop(), name="retention")

    async def stop(self) -> None:
        """Stop the loop (a batch in flight is finished or rolled back whole)."""
        await cancel_and_wait(self._task)
        self._task = None

    async def _loop(self) -> None:
        failures = FailureLog(log, "retention round")
        await self._clock.sleep(FIRST_ROUND_DELAY_S)
        while True:
            try:
                await self.run_round()
            except Exception as exc:  # noqa: BLE001 - logged; the next look tries again
                failures.failed(exc)
            else:
                failures.ok()
            await self._clock.sleep(ROUND_EVERY_S)

    async def run_round(self, *, claim: bool = True) -> RetentionReport:
        """Today's round, when this process claims it (``claim=False``: regardless).

        Raises:
            LedgerUnavailable, sqlalchemy.exc.SQLAlchemyError: storage failed (what was
                pruned stays pruned; the next round goes on).
        """
        now = self._clock.now()
        if claim:
            today = window_keys(now, self._tz).day_key
            if not await self._store.claim_round(now, "round", today):
                return RetentionReport(RoundReport(False, ""))
        report = RetentionReport(await self._ledger.run_round(claim=False))
        first_kept = cutoff_day(now, self._tz, self._ledger.days)
        before = _day_start(first_kept, self._tz)
        for table, column in _BOT_TABLES:
            report.bot_rows[table.name] = await self._prune_bot(table, column, before)
        if any(report.bot_rows.values()):
            log.info(
                "retention: pruned %s of days before %s",
                ", ".join(f"{t} {n}" for t, n in report.bot_rows.items() if n),
                first_kept,
            )
        return report

    async def _prune_bot(self, table: sa.Table, name: str, before: datetime) -> int:
        column = table.c[name]
        total = 0
        batch = self._ledger.batch
        writer = self._store.writer
        while True:
            await self._ledger.turn()  # SQLite: an idle writer, or the floor
            if writer is not None:
                bound = column.type.dialect_impl(_DIALECT).bind_processor(_DIALECT)
                value = bound(before) if bound is not None else before
                body = partial(
                    _sqlite_batch, table=table.name, column=column.name, before=value, batch=batch
                )
                rows = await writer.txn(body, alone=True)
            else:
                ids = sa.select(table.c.id).where(column < before).limit(batch)
                async with self._engine.begin() as conn:
                    result = await conn.execute(sa.delete(table).where(table.c.id.in_(ids)))
                rows = int(result.rowcount or 0)
            total += rows
            await self._ledger.stepped()
            await self._ledger.pause()
            if rows < batch:
                return total


def _day_start(day_key: str, tz: str) -> datetime:
    """The aware UTC instant at which ledger day ``day_key`` (``YYYY-MM-DD``) begins."""
    noon = datetime.combine(date.fromisoformat(day_key), time(12), tzinfo=ZoneInfo(tz))
    return day_bounds(noon, tz)[1]
