"""The fair share's counts shared by the processes on one PostgreSQL database: tables
``free_share_use`` and ``free_share_active`` (:class:`llm.keys.shares.FreeShares` with a
store; one process on SQLite keeps them in memory, as before).

* ``free_share_use``: one row per (BUDGET_TZ day, free key, subject kind, subject id)
  with the requests and tokens served; a request served adds to it in one upsert
  (``ON CONFLICT … DO UPDATE SET requests = requests + 1``), so two replicas serving the
  same subject add up, never overwrite. Rows of days before are deleted by the first
  booking of a new day.
* ``free_share_active``: one row per user with when they last asked (epoch seconds of
  the injected clock's wall time) and the group they asked in (``NULL``: privately), so
  "someone else is active" is true on every replica.

Each write commits without waiting for the disk (``synchronous_commit = off`` for its
transaction: others see it at once); a server crash may lose the last counts — a share
then allows a few requests more, no money. Storage errors are the store's
(:class:`budget.errors.LedgerUnavailable`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from budget.kernel.clock import Clock
from llm.keys.postgres import Transactor

__all__ = ["PgShareCounts", "ShareStore"]

#: ``("user", id)`` or ``("chat", id)`` (:data:`llm.keys.shares.Subject`).
_Subject = tuple[str, int]

_QUICK = "SELECT set_config('synchronous_commit', 'off', true)"
_READ = (
    "SELECT kind, subject, requests, tokens FROM free_share_use WHERE day = $1 AND key = $2"
    " AND (kind, subject) IN (SELECT * FROM unnest($3::text[], $4::bigint[]))"
)
_ADD = (
    "INSERT INTO free_share_use (day, key, kind, subject, requests, tokens) VALUES"
    " ($1, $2, $3, $4, 1, $5) ON CONFLICT (day, key, kind, subject) DO UPDATE SET"
    " requests = free_share_use.requests + 1, tokens = free_share_use.tokens + $5"
)
_PRUNE = "DELETE FROM free_share_use WHERE day <> $1"
_SEEN = (
    "INSERT INTO free_share_active (user_id, chat_id, seen_at) VALUES ($1, $2, $3)"
    " ON CONFLICT (user_id) DO UPDATE SET chat_id = $2, seen_at = $3"
)
_ACTIVE = "SELECT user_id, chat_id FROM free_share_active WHERE seen_at > $1"


class ShareStore(Protocol):
    """Where the share's counts and who is active live when processes share them."""

    async def use(
        self, day: str, key: str, who: Sequence[_Subject]
    ) -> dict[_Subject, tuple[int, int]]:
        """Each of ``who``'s (requests, tokens) at ``key`` on ``day`` (absent: none)."""
        ...

    async def add(self, day: str, key: str, who: Sequence[_Subject], tokens: int) -> None:
        """One request of ``tokens`` served by ``key`` on ``day``, for each of ``who``."""
        ...

    async def seen(self, user_id: int, chat_id: int | None) -> None:
        """``user_id`` asked now (in group ``chat_id``, or privately)."""
        ...

    async def active(self, within_s: float) -> list[tuple[int, int | None]]:
        """Users (with the group they last asked in) who asked in the last ``within_s``
        seconds."""
        ...


class PgShareCounts:
    """:class:`ShareStore` on PostgreSQL (module docstring).

    Args:
        db: runs a transaction body on one connection (the ledger's store).
        clock: the one clock (wall time for activity).
    """

    __slots__ = ("_clock", "_day", "_db")

    def __init__(self, db: Transactor, clock: Clock) -> None:
        self._db, self._clock = db, clock
        self._day = ""  # the day this process last pruned for

    def __repr__(self) -> str:
        return "PgShareCounts(free_share_use, free_share_active)"

    async def use(
        self, day: str, key: str, who: Sequence[_Subject]
    ) -> dict[_Subject, tuple[int, int]]:
        """See :meth:`ShareStore.use`."""
        kinds, ids = [s[0] for s in who], [s[1] for s in who]

        async def body(conn: Any) -> list[Any]:
            return list(await conn.fetch(_READ, day, key, kinds, ids))

        rows = await self._db.tx(self._clock.now(), body, single=True)
        return {
            (r["kind"], int(r["subject"])): (int(r["requests"]), int(r["tokens"])) for r in rows
        }

    async def add(self, day: str, key: str, who: Sequence[_Subject], tokens: int) -> None:
        """See :meth:`ShareStore.add`."""
        prune = day != self._day

        async def body(conn: Any) -> None:
            await conn.execute(_QUICK)
            if prune:
                await conn.execute(_PRUNE, day)
            for kind, subject in who:
                await conn.execute(_ADD, day, key, kind, subject, max(0, tokens))

        await self._db.tx(self._clock.now(), body)
        self._day = day

    async def seen(self, user_id: int, chat_id: int | None) -> None:
        """See :meth:`ShareStore.seen`."""
        now = self._clock.now()

        async def body(conn: Any) -> None:
            await conn.execute(_QUICK)
            await conn.execute(_SEEN, user_id, chat_id, now.timestamp())

        await self._db.tx(now, body)

    async def active(self, within_s: float) -> list[tuple[int, int | None]]:
        """See :meth:`ShareStore.active`."""
        now = self._clock.now()

        async def body(conn: Any) -> list[Any]:
            return list(await conn.fetch(_ACTIVE, now.timestamp() - within_s))

        rows = await self._db.tx(now, body, single=True)
        return [
            (int(r["user_id"]), None if r["chat_id"] is None else int(r["chat_id"])) for r in rows
        ]
