"""The shared rows of :mod:`llm.keys.admission` on PostgreSQL: table ``provider_keys``.

One row per provider key name; times are epoch seconds of the injected clock (``double
precision``), token and request counts ``BIGINT``, the last rate-limit headers a JSON
object. Every change is one transaction on the ledger's pool
(:meth:`budget.storage.postgres.store.PgStore.tx`: retried on conflicts, storage errors become
:class:`budget.errors.LedgerUnavailable`), optimistic first: the pure transition in
Python applied to the row as this process last read or wrote it and — when it changes
the row — one ``UPDATE`` that writes only if the row is still that (compare and set).
That is what the locked path below would have done at the moment of the ``UPDATE``. A
failed compare and set returns the row as its statement saw it, and the transition is
tried again on that; a transition that changes nothing on the known row looks at the
row itself first (one read: a 429 another replica wrote is seen without polling lag),
and then needs no write and no lock — it saw the row as committed when read. When the
row is missing or keeps changing under it, the locked path: an upsert that locks the row
(creating it), the transition again, an ``UPDATE`` when something changed — a transition
may run several times, as a retried transaction runs its body again. This process's own
changes of a key take turns (an ``asyncio.Lock`` per key), so they never conflict with
each other. One round trip for a call's change instead of four (``BEGIN``, lock, write,
``COMMIT``: ``docs/decisions/311-key-rows-compare-and-set.md``).
Reads take no lock. A change commits without waiting for the disk
(``synchronous_commit = off`` for its transaction: other processes see it at once, as any
commit; a server crash may lose the last ones — a cooldown or a window forgotten costs
at most a refused request, no money).
"""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from functools import partial
from typing import Any, Protocol, TypeVar

from budget.kernel.clock import Clock
from llm.keys.admission import Changed, SharedKey
from llm.keys.breaker import Circuit
from llm.keys.pacing import KeyPace
from llm.types import RateLimitInfo

__all__ = ["PgKeyStates", "Transactor"]

T = TypeVar("T")

_READ = (
    "SELECT name, open_until, open_reason, trial_until, remaining_tokens, tokens_reset_at,"
    " limit_tokens, remaining_requests, requests_reset_at, headers, disabled"
    " FROM provider_keys WHERE name = ANY($1::text[])"
)
_LOCK = (
    "INSERT INTO provider_keys (name, open_reason, headers, disabled, updated_at)"
    " VALUES ($1, '', '{}', '', $2) ON CONFLICT (name) DO UPDATE SET name = excluded.name"
    " RETURNING name, open_until, open_reason, trial_until, remaining_tokens,"
    " tokens_reset_at, limit_tokens, remaining_requests, requests_reset_at, headers, disabled,"
    " set_config('synchronous_commit', 'off', true)"
)
#: The row as stored, one statement (no lock: the compare and set below checks it).
_PEEK = (
    "SELECT open_until, open_reason, trial_until, remaining_tokens, tokens_reset_at,"
    " limit_tokens, remaining_requests, requests_reset_at, headers, disabled"
    " FROM provider_keys WHERE name = $1"
)
#: The columns a compare and set checks, in :data:`_PEEK`'s order.
_COLUMNS = (
    "open_until",
    "open_reason",
    "trial_until",
    "remaining_tokens",
    "tokens_reset_at",
    "limit_tokens",
    "remaining_requests",
    "requests_reset_at",
    "headers",
    "disabled",
)
_WRITE = (
    "UPDATE provider_keys SET open_until = $2, open_reason = $3, trial_until = $4,"
    " remaining_tokens = $5, tokens_reset_at = $6, limit_tokens = $7,"
    " remaining_requests = $8, requests_reset_at = $9, headers = $10, disabled = $11,"
    " updated_at = $12 WHERE name = $1"
)
#: :data:`_WRITE` only while the row is as known (``$13``…: the values known, in
#: :data:`_COLUMNS` order), committing by itself without waiting for the disk; returns
#: whether it wrote and the row as this statement's snapshot saw it (the fresher row to
#: try again with when it did not; no row: the key's row is gone).
_WRITE_IF_UNCHANGED = (
    "WITH quick AS (SELECT set_config('synchronous_commit', 'off', true) AS v),"
    " w AS (UPDATE provider_keys SET open_until = $2, open_reason = $3, trial_until = $4,"
    " remaining_tokens = $5, tokens_reset_at = $6, limit_tokens = $7,"
    " remaining_requests = $8, requests_reset_at = $9, headers = $10, disabled = $11,"
    " updated_at = $12 WHERE name = $1 AND EXISTS (SELECT v FROM quick)"
    " AND (open_until, open_reason, trial_until, remaining_tokens, tokens_reset_at,"
    " limit_tokens, remaining_requests, requests_reset_at, headers, disabled)"
    " IS NOT DISTINCT FROM ($13, $14, $15, $16, $17, $18, $19, $20, $21, $22) RETURNING 1)"
    " SELECT EXISTS (SELECT FROM w) AS written, open_until, open_reason, trial_until,"
    " remaining_tokens, tokens_reset_at, limit_tokens, remaining_requests,"
    " requests_reset_at, headers, disabled FROM provider_keys WHERE name = $1"
)
#: Compare-and-set attempts before the locked transaction.
ATTEMPTS = 3

#: A row's values in :data:`_COLUMNS` order, as stored.
Raw = tuple[Any, ...]


class Transactor(Protocol):
    """What the rows need of :class:`budget.storage.postgres.store.PgStore`."""

    async def tx(
        self, now: datetime, body: Callable[[Any], Awaitable[T]], *, single: bool = False
    ) -> T: ...


def _row(record: Any) -> SharedKey:
    headers: dict[str, str] = json.loads(record["headers"] or "{}")
    return SharedKey(
        circuit=Circuit(
            open_until=record["open_until"],
            trial_until=record["trial_until"],
            reason=record["open_reason"],
        ),
        pace=KeyPace(
            remaining_tokens=record["remaining_tokens"],
            tokens_reset_at=record["tokens_reset_at"],
            limit_tokens=record["limit_tokens"],
            remaining_requests=record["remaining_requests"],
            requests_reset_at=record["requests_reset_at"],
            last=RateLimitInfo(raw=headers) if headers else None,
        ),
        disabled=record["disabled"],
    )


def _values(row: SharedKey) -> tuple[Any, ...]:
    c, p = row.circuit, row.pace
    headers = json.dumps(p.last.raw if p.last is not None else {}, sort_keys=True)
    return (
        c.open_until,
        c.reason,
        c.trial_until,
        p.remaining_tokens,
        p.tokens_reset_at,
        p.limit_tokens,
        p.remaining_requests,
        p.requests_reset_at,
        headers,
        row.disabled,
    )


class PgKeyStates:
    """:class:`llm.keys.admission.KeyStateStore` on PostgreSQL (module docstring).

    Args:
        db: runs a transaction body on one connection (the ledger's store).
        clock: the one clock (``updated_at``; the transaction's ``now``).
    """

    __slots__ = ("_clock", "_db", "_known", "_turns")

    def __init__(self, db: Transactor, clock: Clock) -> None:
        self._db = db
        self._clock = clock
        #: Each key's row as this process last read or wrote it (a compare and set
        #: against it costs one round trip; a stale one fails and reads the row).
        self._known: dict[str, Raw] = {}
        #: One change of a key at a time in this process (its own changes never
        #: conflict with each other).
        self._turns: dict[str, asyncio.Lock] = {}

    def __repr__(self) -> str:
        return "PgKeyStates(provider_keys)"

    async def read(self, names: Sequence[str]) -> dict[str, SharedKey]:
        """See :meth:`llm.keys.admission.KeyStateStore.read`."""

        async def body(conn: Any) -> list[Any]:
            return list(await conn.fetch(_READ, list(names)))

        rows = await self._db.tx(self._clock.now(), body, single=True)
        for r in rows:
            self._known[r["name"]] = tuple(r[c] for c in _COLUMNS)
        return {r["name"]: _row(r) for r in rows}

    async def change(self, name: str, fn: Callable[[SharedKey], T]) -> Changed[T]:
        """See :meth:`llm.keys.admission.KeyStateStore.change` (module docstring: compare
        and set against the row as known, the locked transaction when the row is missing
        or keeps changing under it)."""
        turn = self._turns.get(name)
        if turn is None:
            turn = self._turns[name] = asyncio.Lock()
        async with turn:
            now = self._clock.now()
            done = await self._db.tx(now, partial(self._optimistic, name, fn, now), single=True)
            if done is not None:
                return done
            self._known.pop(name, None)
            return await self._locked(name, fn, now)

    async def _optimistic(
        self, name: str, fn: Callable[[SharedKey], T], now: datetime, conn: Any
    ) -> Changed[T] | None:
        """The change by compare and set on ``conn`` (statements of their own); ``None``
        when the row is missing or was written by another process at every attempt."""
        raw, fresh = self._known.get(name), False
        for _ in range(ATTEMPTS):
            if raw is None:
                record = await conn.fetchrow(_PEEK, name)
                if record is None:
                    return None
                raw, fresh = tuple(record), True
            row = _row(dict(zip(_COLUMNS, raw, strict=True)))
            before = _values(row)
            result = fn(row)
            after = _values(row)
            if after == before:
                if not fresh:  # decided on the row as known: look at the row itself
                    raw = None
                    continue
                self._known[name] = raw
                return Changed(result, copy.deepcopy(row))
            seen = await conn.fetchrow(_WRITE_IF_UNCHANGED, name, *after, now.timestamp(), *raw)
            if seen is not None and seen["written"]:
                self._known[name] = after
                return Changed(result, copy.deepcopy(row))
            if seen is None:
                return None
            raw, fresh = tuple(seen[c] for c in _COLUMNS), True
        return None

    async def _locked(self, name: str, fn: Callable[[SharedKey], T], now: datetime) -> Changed[T]:
        """The change in one transaction holding the row's lock (created when missing)."""

        async def body(conn: Any) -> Changed[T]:
            record = await conn.fetchrow(_LOCK, name, now.timestamp())
            row = _row(record)
            before = _values(row)
            result = fn(row)
            after = _values(row)
            if after != before:
                await conn.execute(_WRITE, name, *after, now.timestamp())
                self._known[name] = after
            else:
                self._known[name] = tuple(record[c] for c in _COLUMNS)
            return Changed(result, copy.deepcopy(row))

        return await self._db.tx(now, body)
