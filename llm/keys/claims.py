"""Leases of provider calls in flight on PostgreSQL: table ``call_leases``
(:class:`llm.keys.slots.DeploymentSlots`).

A lease is a row (its id, the process holding it, the call's priority, when it was
taken and when it lapses, epoch seconds of the injected clock). Taking one is ONE
statement, its own transaction: the function ``kopek_take_call_lease`` (migration
``0054_call_lease_function``) takes a transaction-scoped advisory lock (so the count and
the insert cannot interleave with another process's: the limit is exact), then, in a
statement of its own that sees every lease committed before the lock was granted,
deletes the leases that lapsed or whose process is dead — its heartbeat in
``budget_processes`` older than ``dead_after_s``, or no row at all (it stopped) —
counts the rest and inserts the new row only below the limit. The lock is held for the
server's work alone, not across round trips: with three replicas asking at once the
four round trips of the old transaction (``BEGIN``, the lock, the take, ``COMMIT``) kept
~9 pool connections waiting for the lock on average
(``docs/decisions/293-a-call-lease-is-one-round-trip.md``). Giving one back deletes
its row. Neither waits for the disk (``synchronous_commit = off`` for that
transaction; others see it at once): a server crash loses every connection, and with
them every call a lease stood for; a lost give-back lapses at the TTL.
"""

from __future__ import annotations

from typing import Any

from budget.kernel.clock import Clock
from llm.keys.postgres import Transactor

__all__ = ["CallClaims"]

#: Takes lease ``$1`` below the limit ``$6`` (module docstring): one round trip.
_TAKE = "SELECT kopek_take_call_lease($1, $2, $3, $4, $5, $6, $7)"
_GIVE_BACK = (
    "WITH quick AS (SELECT set_config('synchronous_commit', 'off', true) AS v)"
    " DELETE FROM call_leases WHERE lease_id = $1 AND EXISTS (SELECT v FROM quick)"
)


class CallClaims:
    """:class:`llm.keys.slots.CallClaimStore` on PostgreSQL (module docstring).

    Args:
        db: runs a transaction body on one connection (the ledger's store).
        process_id: this process's id in ``budget_processes`` (its heartbeat keeps its
            leases counted).
        clock: the one clock.
        ttl_s: a lease lapses this many seconds after it was taken, seconds
            (HOLD_TTL_SECONDS: a call's hold has lapsed by then too).
        dead_after_s: PROCESS_DEAD_AFTER_SECONDS.
    """

    __slots__ = ("_clock", "_db", "dead_after_s", "process_id", "ttl_s")

    def __init__(
        self, db: Transactor, process_id: str, clock: Clock, *, ttl_s: float, dead_after_s: float
    ) -> None:
        self._db = db
        self.process_id = process_id
        self._clock = clock
        self.ttl_s = ttl_s
        self.dead_after_s = dead_after_s

    def __repr__(self) -> str:
        return f"CallClaims(process_id={self.process_id!r}, ttl_s={self.ttl_s})"

    async def try_take(self, lease_id: str, priority: int, limit: int) -> bool:
        """See :meth:`llm.keys.slots.CallClaimStore.try_take`."""
        now = self._clock.now()
        t = now.timestamp()

        async def body(conn: Any) -> bool:
            live_after = t - self.dead_after_s
            args = (lease_id, self.process_id, priority, t, t + self.ttl_s, limit, live_after)
            return bool(await conn.fetchval(_TAKE, *args))

        return await self._db.tx(now, body, single=True)

    async def give_back(self, lease_id: str) -> None:
        """See :meth:`llm.keys.slots.CallClaimStore.give_back`."""

        async def body(conn: Any) -> None:
            await conn.execute(_GIVE_BACK, lease_id)

        await self._db.tx(self._clock.now(), body, single=True)

    async def held(self) -> int:
        """Leases held now by live processes (for tests and ``/budget``)."""
        now = self._clock.now()
        t = now.timestamp()

        async def body(conn: Any) -> int:
            n = await conn.fetchval(
                "SELECT count(*) FROM call_leases WHERE expires_at > $1 AND process_id IN"
                " (SELECT process_id FROM budget_processes WHERE heartbeat_at >= $2)",
                t,
                t - self.dead_after_s,
            )
            return int(n)

        return await self._db.tx(now, body, single=True)
