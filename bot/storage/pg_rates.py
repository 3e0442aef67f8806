"""USER_MAX_UPDATES_PER_MINUTE across the replicas of a deployment: table
``update_rates`` on the shared PostgreSQL database (:mod:`bot.middlewares.rate`).

One row per payer: the epoch times of the updates let through in the last 60 s (a JSON
list, at most the limit long), when the payer was last told "too fast", and the last
update's time. Each update that this process's own window lets through asks here once:
one statement on the ledger's pool (its own transaction) that creates the payer's row
or locks it, drops the times older than the window and appends now only below the
limit — the same sliding window as in one process, over every replica's updates
(:data:`_COUNT`; the locked transaction of three statements when it finds the row
created by another replica after its snapshot:
``docs/decisions/312-an-update-is-counted-in-one-statement.md``). A flood is cut by each
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
#: One update counted in one statement: a new payer's row inserted with now in it (below a
#: limit ``$4`` above 0), else the row locked (``FOR UPDATE`` reads its newest version),
#: its times after the horizon ``$3`` kept and now (``$5``: ``[now]`` as JSON text, the
#: digits Python writes) appended below the limit; one row, whether it was let through.
#: No row: the payer's row was created by another replica after this statement's
#: snapshot (both inserted at once) — :meth:`PgUpdateRates.allow` asks again.
_COUNT = (
    "WITH quick AS (SELECT set_config('synchronous_commit', 'off', true) AS v),"
    " ins AS (INSERT INTO update_rates (payer_id, times, noticed_at, last_at)"
    " SELECT $1, CASE WHEN $4 > 0 THEN $5 ELSE '[]' END, NULL, $2 FROM quick"
    " ON CONFLICT (payer_id) DO NOTHING RETURNING $4 > 0 AS allowed),"
    " cur AS (SELECT times FROM update_rates WHERE payer_id = $1"
    " AND NOT EXISTS (SELECT FROM ins) AND EXISTS (SELECT v FROM quick) FOR UPDATE),"
    " upd AS (UPDATE update_rates AS u SET last_at = $2, times = (CASE WHEN k.n < $4"
    " THEN k.kept || $5::jsonb ELSE k.kept END)::text FROM cur,"
    " LATERAL (SELECT COALESCE(jsonb_agg(x.e ORDER BY x.i), '[]'::jsonb) AS kept,"
    " count(*) AS n FROM jsonb_array_elements(cur.times::jsonb) WITH ORDINALITY AS x(e, i)"
    " WHERE x.e::float8 > $3) AS k WHERE u.payer_id = $1 RETURNING k.n < $4 AS allowed)"
    " SELECT allowed FROM ins UNION ALL SELECT allowed FROM upd"
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

        async def counted(conn: Any) -> bool | None:
            done: bool | None = await conn.fetchval(
                _COUNT, payer_id, t, horizon, limit, json.dumps([t])
            )
            return done

        async def locked(conn: Any) -> bool:
            row = await conn.fetchrow(_LOCK, payer_id, t)
            times = [x for x in json.loads(row["times"]) if x > horizon]
            allowed = len(times) < limit
            if allowed:
                times.append(t)
            await conn.execute(_WRITE_TIMES, payer_id, json.dumps(times), t)
            return allowed

        allowed = await self._db.tx(now, counted, single=True)
        if allowed is None:  # created by another replica meanwhile: it is there now
            allowed = await self._db.tx(now, locked)
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
