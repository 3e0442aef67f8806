"""Retention of the ledger's per-attempt rows: prune what is older than ``days`` ledger
days, in bounded batches, once per day per database, keeping the sums that the books
read (``docs/decisions/140-retention-keeps-sums.md``).

:class:`LedgerRetention` runs one *round*: it claims the day's round (the first process
on the database to ask wins; the others skip it), then prunes each table of
:data:`TABLES` one batch (one step of its own) at a time until a batch finds fewer
rows than asked, pausing :data:`PAUSE_S` after each: a hold queued meanwhile runs in a
group of its own, so it waits at most one batch and never for a batch's commit. The rules of what is
pruned and what is kept are :mod:`budget.storage.sql.retention`'s.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta

from budget.kernel.clock import Clock
from budget.policy.windows import window_keys
from budget.storage.base import LedgerStore

__all__ = [
    "DEFAULT_BATCH",
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
#: Seconds between two steps (the clock's sleep): the writer's time goes to the holds
#: queued meanwhile first, a step never shares their group commit (bench/retention.py).
PAUSE_S = 0.02
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
        pause_s: seconds slept (``clock.sleep``) after each step.

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
    ) -> None:
        if days < MIN_DAYS or batch < 1:
            raise ValueError(f"retention needs days >= {MIN_DAYS} and batch >= 1")
        self._store = store
        self._tz = tz
        self._clock = clock
        self.days = days
        self.batch = batch
        self.pause_s = pause_s

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
        for table in TABLES:
            report.rows[table] = 0
            while True:
                asked = self.batch  # the batch may change between steps (the bench's finish)
                step = await self._store.prune_batch(table, before, asked)
                report.batches += 1
                report.rows[table] += step.rows
                report.booked_musd += step.booked_musd
                await self.pause()
                if step.rows < asked:
                    break
        self._log(report)
        return report

    async def pause(self) -> None:
        """The pause after a step (:data:`PAUSE_S`)."""
        await self._clock.sleep(self.pause_s)

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
