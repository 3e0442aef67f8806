"""Retention of the ledger's per-attempt rows: prune what is older than ``days`` ledger
days, in bounded batches, once per day per database, keeping the sums that the books
read (``docs/decisions/140-retention-keeps-sums.md``).

:class:`LedgerRetention` runs one *round*: it claims the day's round (the first process
on the database to ask wins; the others skip it), then prunes each table of
:data:`TABLES` one batch (one step of its own) at a time until a batch finds fewer
rows than asked. On SQLite a batch waits for the writer to be idle (nothing queued or
running for :data:`IDLE_S`, looked at on the injected clock), or for :data:`FLOOR_S`
since the batch before (so a constant load still sees one batch a second: 10 rows a
second at the default batch, 864,000 rows a day), and runs alone in its transaction:
its commit and fsync are shared with no hot-path step
(``docs/decisions/286-pruning-waits-for-an-idle-writer.md``).
On PostgreSQL every batch is its own short transaction, :data:`PAUSE_S` apart. The
rules of what is pruned and what is kept are :mod:`budget.storage.sql.retention`'s.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from typing import TYPE_CHECKING

from budget.kernel.clock import Clock
from budget.policy.windows import window_keys
from budget.storage.base import LedgerStore

if TYPE_CHECKING:
    from budget.kernel.sqlite_writer import SqliteWriter

__all__ = [
    "DEFAULT_BATCH",
    "FLOOR_S",
    "IDLE_S",
    "MIN_DAYS",
    "PAUSE_S",
    "TABLES",
    "LedgerRetention",
    "RoundReport",
    "cutoff_day",
]

log = logging.getLogger(__name__)

#: The ledger's tables a round prunes, in this order.
TABLES = (
    "budget_holds",
    "budget_operations",
    "budget_requests",
    "budget_events",
    "budget_messages",
)
#: Rows one step prunes at most (``RETENTION_BATCH_ROWS``' default).
DEFAULT_BATCH = 10
#: Seconds between two steps on PostgreSQL (the clock's sleep).
PAUSE_S = 0.02
#: SQLite: seconds the writer must have been idle (nothing queued or running) before a
#: step; also how often it is looked at.
IDLE_S = 0.005
#: SQLite: seconds after a step when the next runs even if the writer never went idle.
FLOOR_S = 1.0
#: The fewest days kept: the dashboard's daily chart reads 30 days of holds.
MIN_DAYS = 31


def cutoff_day(now: datetime, tz: str, days: int) -> str:
    """The first ledger day kept (``YYYY-MM-DD``): ``days`` days before today in ``tz``
    (today and the ``days`` days before it are kept)."""
    today = date.fromisoformat(window_keys(now, tz).day_key)
    return (today - timedelta(days=days)).isoformat()


@dataclass(slots=True)
class RoundReport:
    """One round: whether this process ran it, the first day kept, rows pruned per
    table, µUSD of the booked attempts moved into the sums, steps run."""

    ran: bool
    before_day: str
    rows: dict[str, int] = field(default_factory=dict)
    booked_musd: int = 0
    batches: int = 0

    @property
    def total(self) -> int:
        """Rows pruned in every table."""
        return sum(self.rows.values())


class LedgerRetention:
    """Prunes the ledger's per-attempt rows older than ``days`` ledger days.

    Args:
        store: the ledger's store (its steps run the pruning).
        tz: BUDGET_TZ (the ledger's day windows).
        clock: the ledger's clock.
        days: RETENTION_DAYS (at least :data:`MIN_DAYS`).
        batch: RETENTION_BATCH_ROWS: rows per step at most.
        pause_s: seconds slept (``clock.sleep``) after each step (PostgreSQL).
        idle_s, floor_s: SQLite: :data:`IDLE_S`, :data:`FLOOR_S` (``idle_s`` 0: no wait).
        checkpoint: SQLite: a passive WAL checkpoint after a step, when idle (off:
            the bench showed no gain, ``docs/benchmarks.md``).

    Raises:
        ValueError: ``days`` below :data:`MIN_DAYS` or ``batch`` below 1.
    """

    JOB = "ledger"

    def __init__(
        self,
        store: LedgerStore,
        tz: str,
        clock: Clock,
        *,
        days: int,
        batch: int = DEFAULT_BATCH,
        pause_s: float = PAUSE_S,
        idle_s: float = IDLE_S,
        floor_s: float = FLOOR_S,
        checkpoint: bool = False,
    ) -> None:
        if days < MIN_DAYS or batch < 1:
            raise ValueError(f"retention needs days >= {MIN_DAYS} and batch >= 1")
        self._store = store
        self._tz = tz
        self._clock = clock
        self.days = days
        self.batch = batch
        self.pause_s = pause_s
        self.idle_s = idle_s
        self.floor_s = floor_s
        self.checkpoint = checkpoint
        self._last = -math.inf  # the clock's monotonic reading after the last step

    async def run_round(self, *, claim: bool = True) -> RoundReport:
        """Claim today's round (``claim=False``: run it regardless) and prune.

        Raises:
            LedgerUnavailable: storage failed (what was pruned before stays pruned, its
                sums with it; the next round goes on).
        """
        now = self._clock.now()
        before = cutoff_day(now, self._tz, self.days)
        today = window_keys(now, self._tz).day_key
        if claim and not await self._store.claim_round(now, self.JOB, today):
            return RoundReport(False, before)
        report = RoundReport(True, before)
        self._last = self._clock.monotonic()
        for table in TABLES:
            report.rows[table] = 0
            while True:
                asked = self.batch  # the batch may change between steps (the bench's finish)
                await self.turn()
                step = await self._store.prune_batch(table, before, asked)
                await self.stepped()
                report.batches += 1
                report.rows[table] += step.rows
                report.booked_musd += step.booked_musd
                await self.pause()
                if step.rows < asked:
                    break
        self._log(report)
        return report

    async def pause(self) -> None:
        """The pause after a step: :data:`PAUSE_S` on PostgreSQL; none on SQLite, whose
        wait is :meth:`turn`'s, before the next."""
        if self._store.writer is None:
            await self._clock.sleep(self.pause_s)

    async def turn(self) -> None:
        """SQLite: wait until the writer has been idle for :attr:`idle_s` (idle at two
        looks that far apart, nothing queued between them), or until :attr:`floor_s`
        has passed since the last step (:meth:`stepped`); at once elsewhere."""
        writer = self._store.writer
        if writer is None or self.idle_s <= 0:
            return
        seen = -1  # steps queued at the last look that found the writer idle
        while self._clock.monotonic() - self._last < self.floor_s:
            if writer.idle and writer.queued == seen:
                return
            seen = writer.queued if writer.idle else -1
            await self._clock.sleep(self.idle_s)

    async def stepped(self) -> None:
        """After a step: note its time (the floor counts from it) and, on SQLite, when
        the writer is idle and :attr:`checkpoint` is on, checkpoint the WAL (passive:
        it waits for no reader), so the pruning's pages are not written back by a
        hot-path commit's automatic checkpoint."""
        self._last = self._clock.monotonic()
        writer = self._store.writer
        if writer is not None and self.checkpoint and writer.idle:
            await writer.call(_checkpoint, writer)

    @staticmethod
    def _log(report: RoundReport) -> None:
        if report.total:
            log.info(
                "retention: pruned %d ledger rows of days before %s (%s); %d µUSD of booked"
                " attempts kept as sums",
                report.total,
                report.before_day,
                ", ".join(f"{t} {n}" for t, n in report.rows.items() if n),
                report.booked_musd,
            )


def _checkpoint(writer: SqliteWriter) -> None:
    """On the writer thread, outside any transaction: a passive WAL checkpoint."""
    conn = writer.conn
    if conn is not None:
        conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
