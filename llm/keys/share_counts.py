"""The fair share's counts shared by the processes on one PostgreSQL database: tables
``free_share_use`` and ``free_share_active`` (:class:`llm.keys.shares.FreeShares` with a
store; one process on SQLite keeps them in memory, as before).

* ``free_share_use``: one row per (BUDGET_TZ day, free key, subject kind, subject id)
  with the requests and tokens served; what a process served is added in an upsert
  (``ON CONFLICT … DO UPDATE SET requests = requests + excluded.requests``), so two
  replicas serving the same subject add up, never overwrite. Rows of days before are
  deleted by a process's first statement of a new day.
* ``free_share_active``: one row per user with when they last asked (epoch seconds of
  the injected clock's wall time) and the group they asked in (``NULL``: privately), so
  "someone else is active" is true on every replica.

A chat request costs ONE statement, its own transaction (:meth:`PgShareCounts.ask`,
decision 282): the asker marked active, what this process served since its last
statement added, the day's old rows pruned (once a day), and — read in the same
statement, from the snapshot before those writes — the subjects' use of the free keys
and whether someone else is active. Nothing is written after the answer: it waits in
the process for its next chat request's statement.

The statement commits without waiting for the disk (``synchronous_commit = off`` for
its transaction: others see it at once); a server crash may lose the last counts — a
share then allows a few requests more, no money. Storage errors are the store's
(:class:`budget.errors.LedgerUnavailable`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from budget.kernel.clock import Clock
from llm.keys.postgres import Transactor

__all__ = ["Asked", "PgShareCounts", "ShareStore"]

#: ``("user", id)`` or ``("chat", id)`` (:data:`llm.keys.shares.Subject`).
_Subject = tuple[str, int]
#: ``(key, subject)``: one row of a day's counts.
_Row = tuple[str, _Subject]

# $1 user, $2 chat (NULL: privately), $3 seen_at, $4 day, $5..$9 the counts to add
# (key, kind, subject, requests, tokens), $10 prune the days before $4, $11 active
# since, $12..$14 the rows to read (key, kind, subject).
_ASK = (
    "WITH seen AS (INSERT INTO free_share_active (user_id, chat_id, seen_at)"
    " VALUES ($1, $2, $3) ON CONFLICT (user_id) DO UPDATE SET chat_id = $2, seen_at = $3),"
    " added AS (INSERT INTO free_share_use (day, key, kind, subject, requests, tokens)"
    " SELECT $4, a.k, a.kd, a.s, a.r, a.t FROM unnest($5::text[], $6::text[], $7::bigint[],"
    " $8::bigint[], $9::bigint[]) AS a(k, kd, s, r, t) ON CONFLICT (day, key, kind, subject)"
    " DO UPDATE SET requests = free_share_use.requests + excluded.requests,"
    " tokens = free_share_use.tokens + excluded.tokens),"
    " pruned AS (DELETE FROM free_share_use WHERE $10::boolean AND day < $4)"
    " SELECT set_config('synchronous_commit', 'off', true) AS quick,"
    " EXISTS (SELECT 1 FROM free_share_active WHERE seen_at > $11 AND user_id <> $1) AS others,"
    " EXISTS (SELECT 1 FROM free_share_active WHERE seen_at > $11 AND user_id <> $1"
    " AND chat_id IS DISTINCT FROM $2) AS outsiders,"
    " array_agg(key) AS keys, array_agg(kind) AS kinds, array_agg(subject) AS subjects,"
    " array_agg(requests) AS requests, array_agg(tokens) AS tokens"
    " FROM free_share_use WHERE day = $4 AND (key, kind, subject) IN"
    " (SELECT * FROM unnest($12::text[], $13::text[], $14::bigint[]))"
)


@dataclass(frozen=True, slots=True)
class Asked:
    """What one chat request's statement read (before its own writes).

    Attributes:
        use: (requests, tokens) of each (key, subject) row asked for that has any.
        others: another user asked within the window (someone else for a user's share).
        outsiders: another user asked within the window, last outside the asker's
            group (someone else for the group's share; privately: as ``others``).
    """

    use: Mapping[_Row, tuple[int, int]]
    others: bool
    outsiders: bool


class ShareStore(Protocol):
    """Where the share's counts and who is active live when processes share them."""

    async def ask(
        self,
        day: str,
        user_id: int,
        chat_id: int | None,
        within_s: float,
        add: Mapping[_Row, tuple[int, int]],
        read: Sequence[_Row],
    ) -> Asked:
        """One statement: ``user_id`` asked now (in group ``chat_id``, or privately);
        ``add``'s (requests, tokens) are added to ``day``'s rows; ``read``'s rows of
        ``day`` and who else asked in the last ``within_s`` seconds are returned as
        they were before those writes."""
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

    async def ask(
        self,
        day: str,
        user_id: int,
        chat_id: int | None,
        within_s: float,
        add: Mapping[_Row, tuple[int, int]],
        read: Sequence[_Row],
    ) -> Asked:
        """See :meth:`ShareStore.ask` (rows added in a sorted order: two processes'
        statements lock shared rows alike)."""
        now = self._clock.now()
        seen_at = now.timestamp()
        rows = sorted(add.items())
        args = (
            [k for (k, _), _ in rows],
            [s[0] for (_, s), _ in rows],
            [s[1] for (_, s), _ in rows],
            [n[0] for _, n in rows],
            [max(0, n[1]) for _, n in rows],
            day != self._day,
            seen_at - within_s,
            [k for k, _ in read],
            [s[0] for _, s in read],
            [s[1] for _, s in read],
        )

        async def body(conn: Any) -> Any:
            return await conn.fetchrow(_ASK, user_id, chat_id, seen_at, day, *args)

        row = await self._db.tx(now, body, single=True)
        self._day = day
        found = zip(
            row["keys"] or (),
            row["kinds"] or (),
            row["subjects"] or (),
            row["requests"] or (),
            row["tokens"] or (),
            strict=True,
        )
        use = {(k, (kd, int(s))): (int(r), int(t)) for k, kd, s, r, t in found}
        return Asked(use, bool(row["others"]), bool(row["outsiders"]))
