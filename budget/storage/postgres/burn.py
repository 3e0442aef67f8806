"""When a PostgreSQL ledger process runs the burn-rate trigger after its settles.

:class:`BurnCheckTimer` is the schedule; the check itself (a read, then a trip in a
transaction of its own when over) is :meth:`budget.storage.postgres.store.PgStore._burn_check`,
the statements :func:`budget.storage.postgres.rows.burn_rate` and
:func:`budget.storage.postgres.rows.auto_kill`.
Money is integer µUSD; times are the ledger clock's monotonic seconds.
"""

from __future__ import annotations

import asyncio

from budget.storage.postgres.rows import BurnRate

__all__ = ["AUTO_KILL_CHECK_S", "BurnCheckTimer"]

#: Seconds (ledger clock) a process lets pass between two burn-rate checks after its
#: settles, unless its own spend since the last check could cross the threshold.
AUTO_KILL_CHECK_S = 0.25


class BurnCheckTimer:
    """When one process runs the burn-rate trigger after its settles.

    The trigger (:func:`budget.storage.postgres.rows.auto_kill`) sums the holds ended in the
    auto-kill window; run in every paid settle's transaction, under a global lock,
    it cost as much as the settle. Now it runs after the settle committed (tripping
    is a follow-on step, idempotent: the first reason stays), and only when due. A
    check (:func:`budget.storage.postgres.rows.burn_rate`, no lock) reads the threshold, the
    window's spend and the global day bucket's settled spend; a settle adds its
    actual cost to ``pending`` once committed and knows that bucket's new value
    (its own statement returned it). It runs the check when :meth:`due`: this
    process never checked, or ``AUTO_KILL_CHECK_S`` passed since it last did, or
    the spend seen then + this process's spend since + the growth of today's global
    bucket since (every process's settles of today's holds) could be over the
    threshold. The window only slides forward, so its spend grows only by settles
    and expiries (a sweep's expiries are checked in the sweep's transaction): a
    settle that crosses the threshold is checked at once — in this process or any
    other — unless the crossing spend hides from today's bucket (holds granted on
    another day, or other processes' late corrections taking settled spend out of
    it at the same time); that is seen by the next check of any process: a settle
    after ``AUTO_KILL_CHECK_S``, or the sweep (``sweep_interval_s``), which checks
    whenever this process settled anything since its last check.

    Attributes:
        at: the ledger clock's monotonic time of the last check (``None`` = never).
        seen: what the last check saw.
        pending: this process's settled spend since that check (µUSD).
    """

    __slots__ = ("at", "lock", "pending", "seen")

    def __init__(self) -> None:
        self.at: float | None = None
        self.seen = BurnRate(None, False, 0, "", 0)
        self.pending = 0
        self.lock = asyncio.Lock()

    def due(self, monotonic: float, day_key: str, day_settled: int | None) -> bool:
        """Should a settle run the check now? ``day_key``, ``day_settled``: the
        settled hold's day and its global day bucket's settled spend after it (µUSD,
        ``None`` = not touched); see the class docstring."""
        if self.at is None or monotonic - self.at >= AUTO_KILL_CHECK_S:
            return True
        seen = self.seen
        if seen.threshold is None:
            return False
        grown = 0
        if day_settled is not None and day_key == seen.day_key:
            grown = max(0, day_settled - seen.day_settled)
        return seen.spent + self.pending + grown > seen.threshold
