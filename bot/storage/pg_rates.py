"""USER_MAX_UPDATES_PER_MINUTE across the replicas of a deployment: table
``update_rates`` on the shared PostgreSQL database (:mod:`bot.middlewares.rate`).

One row per payer: the epoch times of the updates let through in the last 60 s (a JSON
list, at most the limit long), when the payer was last told "too fast", and the last
update's time. Each update that this process's own window lets through asks here once:
one transaction on the ledger's pool that locks the payer's row (creating it), drops
the times older than the window and appends now only below the limit — the same
sliding window as in one process, over every replica's updates. A flood is cut by each
replica's own window first, so the database sees at most the limit per replica per
minute for one payer. Rows idle for a window are deleted, at most once a window per
process. Writes do not wait for the disk (``synchronous_commit = off`` for their
transaction; others see them at once): a server crash may forget the last updates'
times, which costs at most a few updates let through.
"""

from __future__ import annotations

import json
from typing import Any

from budget.kernel.clock import Clock
from llm.keys.postgres import Transactor

__all__ = ["PgUpdateRates"]

_LOCK = (
    "INSERT INTO update_rates (payer_id, times, noticed_at, last_at) VALUES ($1, '[]', NULL, $2)"
    " ON CONFLICT (payer_id) DO UPDATE SET payer_id = excluded.payer_id"
    " RETURNING times, noticed_at, set_config('synchronous_commit', 'off', true)"
)
_WRITE_TIMES = "UPDATE update_rates SET times = $2, last_at = $3 WHERE payer_id = $1"
_WRITE_NOTICE = "UPDATE update_rates SET noticed_at = $2 WHERE payer_id = $1"
_PRUNE = "DELETE FROM update_rates WHERE last_at <= $1"


class PgUpdateRates:
    """The shared sliding window of :class:`bot.middlewares.rate.UpdateRateMiddleware`.

    Args:
        db: runs a transaction body on one connection (the ledger's store).
        clock: the one clock (epoch seconds in the rows).
        window_s: the window, seconds.
    """

    __slots__ = ("_clock", "_db", "_pruned_at", "window_s")

    def __init__(self, db: Transactor, clock: Clock, window_s: float = 60.0) -> None:
        self._db = db
        self._clock = clock
        self.window_s = window_s
        self._pruned_at: float | None = None

    def __repr__(self) -> str:
        return f"PgUpdateRates(window_s={self.window_s})"

    async def allow(self, payer_id: int, limit: int) -> bool:
        """Count one update of ``payer_id`` across the deployment; False when ``limit``
        updates were let through in the last window already.

        Raises:
            budget.errors.LedgerUnavailable: the database cannot be written.
        """
        now = self._clock.now()
        t = now.timestamp()
        horizon = t - self.window_s

        async def body(conn: Any) -> bool:
            row = await conn.fetchrow(_LOCK, payer_id, t)
            times = [x for x in json.loads(row["times"]) if x > horizon]
            allowed = len(times) < limit
            if allowed:
                times.append(t)
            await conn.execute(_WRITE_TIMES, payer_id, json.dumps(times), t)
            return allowed

        allowed = await self._db.tx(now, body)
        if self._prune_due():

            async def prune(conn: Any) -> None:
                await conn.execute(_PRUNE, horizon)

            await self._db.tx(now, prune, single=True)
        return allowed

    async def notice_due(self, payer_id: int) -> bool:
        """True (and remembered) when no replica told ``payer_id`` "too fast" in the
        last window.

        Raises:
            budget.errors.LedgerUnavailable: the database cannot be written.
        """
        now = self._clock.now()
        t = now.timestamp()

        async def body(conn: Any) -> bool:
            row = await conn.fetchrow(_LOCK, payer_id, t)
            last = row["noticed_at"]
            if last is not None and t - last < self.window_s:
                return False
            await conn.execute(_WRITE_NOTICE, payer_id, t)
            return True

        return await self._db.tx(now, body)

    def _prune_due(self) -> bool:
        mono = self._clock.monotonic()
        if self._pruned_at is not None and mono - self._pruned_at < self.window_s:
            return False
        self._pruned_at = mono
        return True
