"""A user's messages in order across the replicas of a deployment.

One process keeps each user's queue in memory (:class:`bot.chat.service.ChatService`: the
first USER_MAX_INFLIGHT messages run, USER_QUEUE_MAX more wait, later ones are
refused). Replicas sharing a PostgreSQL database also see each other's: a message's
place in its user's queue is its place in this process's queue *plus* the user's
earlier messages in the same chat that another live process has taken in and not
finished — rows of ``seen_messages`` with status ``received``, a smaller
``message_id`` (Telegram numbers a chat's messages in the order they were sent) and a
``process_id`` whose heartbeat in ``budget_processes`` is younger than
PROCESS_DEAD_AFTER_SECONDS (a dead replica's messages do not block the user; they are
"lost" and the user is asked to resend, :meth:`bot.storage.repos.Intake.take_lost`). A message
waiting for its turn asks again every :data:`POLL_S` seconds (and at once when one of
this process's messages of that user ends).

Not covered: an earlier message another replica has received but not yet recorded
(the few milliseconds between delivery and the intake row) is not seen.
"""

from __future__ import annotations

from typing import Any, Protocol

from budget.kernel.clock import Clock
from budget.storage.postgres.lease import LIVENESS_KEY
from llm.keys.postgres import Transactor

__all__ = ["POLL_S", "LaneStore", "PgLanes"]

#: Seconds between two looks at the other replicas' unfinished messages while waiting.
POLL_S = 0.1

_AHEAD = (
    "SELECT count(*) FROM seen_messages WHERE user_id = $1 AND chat_id = $2"
    " AND message_id < $3 AND status = 'received' AND process_id <> $4 AND process_id IN"
    " (SELECT process_id FROM budget_processes WHERE heartbeat_at > $5)"
)
#: The same, of the processes that are surely running them: not those whose liveness
#: lock is free on the server lifetime of their last beat (their connection is gone:
#: :mod:`budget.storage.postgres.lease`; the statement takes the lock for its own
#: moment), which the sweep declares dead within two heartbeats.
_RUNNING = _AHEAD.replace(
    "heartbeat_at > $5)",
    "heartbeat_at > $5 AND (locked_on IS DISTINCT FROM pg_postmaster_start_time()"
    f" OR NOT pg_try_advisory_xact_lock({LIVENESS_KEY.format('process_id')})))",
)


class LaneStore(Protocol):
    """The other replicas' share of a user's queue."""

    async def ahead(self, user_id: int, chat_id: int, message_id: int) -> int:
        """How many of ``user_id``'s earlier messages in ``chat_id`` other live processes
        hold unfinished.

        Raises:
            budget.errors.LedgerUnavailable: the database cannot be read.
        """
        ...

    async def running_ahead(self, user_id: int, chat_id: int, message_id: int) -> int:
        """How many of those are surely being answered: their process is alive, not
        merely not yet declared dead (a refusal says "your request that is already
        running will still be answered" only then).

        Raises:
            budget.errors.LedgerUnavailable: the database cannot be read.
        """
        ...


class PgLanes:
    """:class:`LaneStore` on PostgreSQL (module docstring).

    Args:
        db: runs a statement on the ledger's pool.
        process_id: this process's id (its own messages are in its memory).
        clock: the one clock.
        dead_after_s: PROCESS_DEAD_AFTER_SECONDS.
    """

    __slots__ = ("_clock", "_db", "dead_after_s", "process_id")

    def __init__(self, db: Transactor, process_id: str, clock: Clock, dead_after_s: float) -> None:
        self._db = db
        self.process_id = process_id
        self._clock = clock
        self.dead_after_s = dead_after_s

    def __repr__(self) -> str:
        return f"PgLanes(process_id={self.process_id!r})"

    async def ahead(self, user_id: int, chat_id: int, message_id: int) -> int:
        """See :meth:`LaneStore.ahead`."""
        return await self._count(_AHEAD, user_id, chat_id, message_id)

    async def running_ahead(self, user_id: int, chat_id: int, message_id: int) -> int:
        """See :meth:`LaneStore.running_ahead`."""
        return await self._count(_RUNNING, user_id, chat_id, message_id)

    async def _count(self, sql: str, user_id: int, chat_id: int, message_id: int) -> int:
        now = self._clock.now()
        live_after = now.timestamp() - self.dead_after_s

        async def body(conn: Any) -> int:
            args = (user_id, chat_id, message_id, self.process_id, live_after)
            return int(await conn.fetchval(sql, *args))

        return await self._db.tx(now, body, single=True)
