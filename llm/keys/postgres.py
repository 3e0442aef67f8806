"""The shared rows of :mod:`llm.keys.admission` on PostgreSQL: table ``provider_keys``.

One row per provider key name; times are epoch seconds of the injected clock (``double
precision``), token and request counts ``BIGINT``, the last rate-limit headers a JSON
object. Every change is one transaction on the ledger's pool
(:meth:`budget.storage.postgres.store.PgStore.tx`: retried on conflicts, storage errors become
:class:`budget.errors.LedgerUnavailable`): an upsert that locks the row (creating it),
the pure transition in Python, an ``UPDATE`` when something changed. Reads take no
lock. A change commits without waiting for the disk (``synchronous_commit = off`` for
its transaction: other processes see it at once, as any commit; a server crash may lose
the last ones — a cooldown or a window forgotten costs at most a refused request, no
money).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
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
_WRITE = (
    "UPDATE provider_keys SET open_until = $2, open_reason = $3, trial_until = $4,"
    " remaining_tokens = $5, tokens_reset_at = $6, limit_tokens = $7,"
    " remaining_requests = $8, requests_reset_at = $9, headers = $10, disabled = $11,"
    " updated_at = $12 WHERE name = $1"
)


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

    __slots__ = ("_clock", "_db")

    def __init__(self, db: Transactor, clock: Clock) -> None:
        self._db = db
        self._clock = clock

    def __repr__(self) -> str:
        return "PgKeyStates(provider_keys)"

    async def read(self, names: Sequence[str]) -> dict[str, SharedKey]:
        """See :meth:`llm.keys.admission.KeyStateStore.read`."""

        async def body(conn: Any) -> list[Any]:
            return list(await conn.fetch(_READ, list(names)))

        rows = await self._db.tx(self._clock.now(), body, single=True)
        return {r["name"]: _row(r) for r in rows}

    async def change(self, name: str, fn: Callable[[SharedKey], T]) -> Changed[T]:
        """See :meth:`llm.keys.admission.KeyStateStore.change`."""
        now = self._clock.now()

        async def body(conn: Any) -> Changed[T]:
            row = _row(await conn.fetchrow(_LOCK, name, now.timestamp()))
            before = _values(row)
            result = fn(row)
            after = _values(row)
            if after != before:
                await conn.execute(_WRITE, name, *after, now.timestamp())
            return Changed(result, copy.deepcopy(row))

        return await self._db.tx(now, body)
