"""Row-level SQL of the PostgreSQL ledger shared by its modules (inside a transaction).

The lock order every writing step follows, so that no two steps wait on each other
in a cycle (no deadlock between ledger steps): hold rows (by ``hold_id``), then
bucket rows (by key: :func:`book` upserts them in one statement sorted by
``level, scope, win, wkey``), then operation rows, then the kill switch rows (behind
:data:`AUTO_KILL_LOCK` for the automatic trigger, which a settle runs in a
transaction of its own after it committed). Statements run on the caller's
asyncpg connection inside its ``READ COMMITTED`` transaction; each is prepared once
per connection (asyncpg's statement cache). Also here: the DB-API cursor over
asyncpg that runs the shared synchronous row modules (reports, admin steps).

Times are epoch seconds of the ledger clock; money is integer µUSD.
"""

from __future__ import annotations

import asyncio
import functools
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple

from budget.config import LedgerConfig
from budget.policy.rules import (
    BucketKey,
    Scope,
    auto_kill_reason,
    auto_kill_since,
    auto_kill_threshold_musd,
    limit_of,
    load_scopes,
)
from budget.policy.steps import Booking, booking_rows
from budget.policy.windows import HoldKeys, window_keys
from budget.status import KillState
from budget.storage.sql.statements import EVENT_INSERT, KILL_COLS, KILL_UPSERT, event_row
from budget.types import Level, Window

__all__ = [
    "AUTO_KILL_LOCK",
    "BOOK",
    "KILLS_OF",
    "LIMITS",
    "BucketAmounts",
    "BurnRate",
    "PgCursor",
    "asyncpg_dsn",
    "auto_kill",
    "auto_kill_off",
    "book",
    "book_arrays",
    "booking_deltas",
    "bucket_values",
    "burn_rate",
    "event",
    "lock_corrections",
    "once",
    "overrides_of",
    "shift",
    "translate",
]

#: Advisory lock key serialising the automatic kill trigger's check-then-trip ("kopek-a").
AUTO_KILL_LOCK = 0x6B6F70656B2D61

#: The tripped switches that apply to a user ($1 user id as text) and team ($2, or ''),
#: as an array of ``KILL_COLS`` records (a subquery for a select list).
KILLS_OF = (
    f"ARRAY(SELECT ROW({KILL_COLS}) FROM budget_kill WHERE killed = 1"  # noqa: S608 - fixed columns
    " AND (scope_kind = 'global' OR (scope_kind = 'user' AND scope = {user})"
    " OR (scope_kind = 'team' AND scope = {team})))"
)
#: Every runtime limit override as an array of (level, scope, win, limit) records.
LIMITS = "ARRAY(SELECT ROW(level, scope, win, limit_musd) FROM budget_limits)"

#: Adds (settled, held, late, margin) deltas to buckets ($1..$4 keys, $5..$8 deltas:
#: arrays in key order), creating missing rows; locks them in key order; returns the
#: new values. ``margin_musd`` is the sum of the margins of the held holds booked
#: there (:mod:`budget.storage.postgres.holds`).
BOOK = (
    "INSERT INTO budget_buckets AS b (level, scope, win, wkey, settled_musd, held_musd,"
    " late_musd, margin_musd) SELECT * FROM unnest($1::text[], $2::text[], $3::text[],"
    " $4::text[], $5::bigint[], $6::bigint[], $7::bigint[], $8::bigint[])"
    " AS t(level, scope, win, wkey, s, h, l, m) ORDER BY level, scope, win, wkey"
    " ON CONFLICT (level, scope, win, wkey) DO UPDATE SET"
    " settled_musd = b.settled_musd + excluded.settled_musd,"
    " held_musd = b.held_musd + excluded.held_musd,"
    " late_musd = b.late_musd + excluded.late_musd,"
    " margin_musd = b.margin_musd + excluded.margin_musd"
    " RETURNING level, scope, win, wkey, settled_musd, held_musd, late_musd, margin_musd"
)


@dataclass(frozen=True, slots=True)
class BucketAmounts:
    """A bucket's deltas or values (µUSD): settled, held, late, and the margins of the
    held holds booked there."""

    settled: int = 0
    held: int = 0
    late: int = 0
    margin: int = 0

    def __add__(self, other: BucketAmounts) -> BucketAmounts:
        return BucketAmounts(
            self.settled + other.settled,
            self.held + other.held,
            self.late + other.late,
            self.margin + other.margin,
        )


def asyncpg_dsn(url: str) -> str:
    """``postgresql+asyncpg://…`` (SQLAlchemy's form, as in DATABASE_URL) → asyncpg's DSN."""
    return re.sub(r"^postgresql\+asyncpg://", "postgresql://", url)


@functools.lru_cache(maxsize=512)
def translate(sql: str) -> str:
    """``?`` placeholders → ``$1``, ``$2`` … (the shared SQL never quotes a ``?``)."""
    counter = iter(range(1, 1000))
    return re.sub(r"\?", lambda _: f"${next(counter)}", sql)


def shift(sql: str, by: int) -> str:
    """``sql`` (``?`` placeholders) as asyncpg's ``$n``, numbered from ``by`` + 1."""
    return re.sub(r"\$([0-9]+)", lambda m: f"${int(m.group(1)) + by}", translate(sql))


def once(sql: str, old: str, new: str) -> str:
    """``sql`` with its one ``old`` replaced (a changed shared statement fails here,
    at import, not in a step)."""
    assert sql.count(old) == 1, old
    return sql.replace(old, new)


def overrides_of(records: Iterable[Any]) -> dict[tuple[str, str, str], int | None]:
    """The runtime limit overrides from a :data:`LIMITS` array."""
    return {(r[0], r[1], r[2]): r[3] for r in records}


def book_arrays(deltas: Mapping[BucketKey, BucketAmounts]) -> list[list[Any]]:
    """The eight array arguments of :data:`BOOK`, in key order."""
    keys = sorted(deltas)
    amounts = [deltas[k] for k in keys]
    return [[k[i] for k in keys] for i in range(4)] + [
        [a.settled for a in amounts],
        [a.held for a in amounts],
        [a.late for a in amounts],
        [a.margin for a in amounts],
    ]


def booking_deltas(
    scopes: Sequence[Scope], keys: HoldKeys, b: Booking, margin_musd: int
) -> dict[BucketKey, BucketAmounts]:
    """The deltas of a hold's buckets for booking ``b`` and ``margin_musd`` added to
    (or, negative, taken from) their margins."""
    rows = booking_rows(scopes, keys, b)
    return {k: BucketAmounts(s, h, lt, margin_musd) for k, s, h, lt in rows}


def bucket_values(rows: Iterable[Any]) -> dict[BucketKey, BucketAmounts]:
    """Each bucket's values from rows :data:`BOOK` returned."""
    return {
        (r[0], r[1], r[2], r[3]): BucketAmounts(int(r[4]), int(r[5]), int(r[6]), int(r[7]))
        for r in rows
    }


async def book(
    conn: Any, deltas: Mapping[BucketKey, BucketAmounts]
) -> dict[BucketKey, BucketAmounts]:
    """Add µUSD deltas to buckets, creating the missing ones, in ONE statement that
    locks the rows in key order; returns every row's new values. A zero delta just
    locks the row."""
    return bucket_values(await conn.fetch(BOOK, *book_arrays(deltas)))


async def event(conn: Any, tz: str, now: datetime, kind: str, **fields: Any) -> None:
    """Append one ``budget_events`` row (fields as
    :func:`budget.storage.sql.statements.event_row`)."""
    await conn.execute(translate(EVENT_INSERT), *event_row(tz, now, kind, **fields))


def auto_kill_off(config: LedgerConfig) -> bool:
    """The burn-rate trigger is off whatever the limits say (no query needed)."""
    return config.auto_kill_musd_per_window == 0 or (
        config.auto_kill_musd_per_window is None and config.auto_kill_fraction == 0
    )


class BurnRate(NamedTuple):
    """What the burn-rate trigger sees now (µUSD).

    Attributes:
        threshold: :func:`budget.policy.rules.auto_kill_threshold_musd` (``None`` = off).
        killed: the global switch is tripped.
        spent: the settled spend of the auto-kill window (0 when off or tripped).
        day_key: today's day key (``BUDGET_TZ``).
        day_settled: the global day bucket's settled spend of ``day_key``, read
            before ``spent`` (0 if the row does not exist yet).
    """

    threshold: int | None
    killed: bool
    spent: int
    day_key: str
    day_settled: int


async def burn_rate(conn: Any, config: LedgerConfig, now: datetime) -> BurnRate:
    """:class:`BurnRate` now. Two statements, no lock: each sees what was committed
    before it started (the bucket, in the first, no later than the spend)."""
    day_key = window_keys(now, config.tz).day_key
    row = await conn.fetchrow(
        f"SELECT {LIMITS}, (SELECT ROW(killed, unkilled_at) FROM budget_kill"  # noqa: S608 - fixed
        " WHERE scope_kind = 'global' AND scope = ''), (SELECT settled_musd FROM budget_buckets"
        " WHERE level = 'global' AND scope = '' AND win = 'day' AND wkey = $1)",
        day_key,
    )
    limits = overrides_of(row[0])
    threshold = auto_kill_threshold_musd(
        config, limit_of(config, limits, Level.GLOBAL, "", Window.DAY)
    )
    killed, unkilled_at = row[1] if row[1] is not None else (0, None)
    day_settled = int(row[2] or 0)
    if threshold is None or killed:
        return BurnRate(threshold, bool(killed), 0, day_key, day_settled)
    # the window back from now, never before the last reset (as the SQLite store)
    since = auto_kill_since(config, now, None).timestamp()
    if unkilled_at is not None:
        since = max(since, float(unkilled_at))
    spent = int(
        await conn.fetchval(
            "SELECT COALESCE(SUM(actual_musd), 0) FROM budget_holds WHERE ended_at > $1"
            " AND state IN ('settled', 'expired') AND actual_musd > 0",
            since,
        )
    )
    return BurnRate(threshold, False, spent, day_key, day_settled)


async def auto_kill(conn: Any, config: LedgerConfig, now: datetime) -> KillState | None:
    """Trip the global switch when the settled spend of the auto-kill window is over
    the threshold (:func:`budget.policy.rules.auto_kill_threshold_musd`); the new state or
    ``None`` (off, under, or already tripped: the first reason stays). Inside a
    transaction, serialised across processes by :data:`AUTO_KILL_LOCK` (one trip)."""
    if auto_kill_off(config):
        return None  # off whatever the limits say: no query
    await conn.execute("SELECT pg_advisory_xact_lock($1)", AUTO_KILL_LOCK)
    threshold, killed, spent, _, _ = await burn_rate(conn, config, now)
    if threshold is None or killed or spent <= threshold:
        return None
    reason = auto_kill_reason(spent, threshold, config.auto_kill_window_s)
    t = now.timestamp()
    await conn.execute(translate(KILL_UPSERT), "global", "", 1, reason, 1, None, t, None)
    await event(conn, config.tz, now, "kill", scope="global:", detail=reason)
    return KillState(True, reason, True, None, now, "global", "")


class PgCursor:
    """A DB-API-like cursor (:class:`budget.storage.store.Cursor`) over one asyncpg connection,
    used from a worker thread: each statement runs on the event loop ``loop``. Runs
    the shared synchronous row modules (reports, admin steps) on PostgreSQL."""

    __slots__ = ("_conn", "_loop", "_rows", "rowcount")

    def __init__(self, conn: Any, loop: asyncio.AbstractEventLoop) -> None:
        self._conn = conn
        self._loop = loop
        self._rows: list[Any] = []
        self.rowcount = -1

    def _run(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def execute(self, sql: str, parameters: Any = (), /) -> PgCursor:
        query = translate(sql)
        if query.lstrip()[:6].upper() == "SELECT":
            self._rows = list(self._run(self._conn.fetch(query, *parameters)))
            self.rowcount = len(self._rows)
        else:
            status = str(self._run(self._conn.execute(query, *parameters)))
            self._rows = []
            tail = status.rsplit(" ", 1)[-1]
            self.rowcount = int(tail) if tail.isdigit() else -1
        return self

    def executemany(self, sql: str, seq_of_parameters: Any, /) -> PgCursor:
        self._run(self._conn.executemany(translate(sql), list(seq_of_parameters)))
        self._rows = []
        return self

    def fetchone(self) -> Any:
        return self._rows.pop(0) if self._rows else None

    def fetchall(self) -> list[Any]:
        rows, self._rows = self._rows, []
        return rows


async def lock_corrections(conn: Any, hold_ids: Sequence[str]) -> None:
    """Lock, in the one lock order, every row ``/reconcile apply`` may change: the
    holds ``hold_ids`` (by id), the buckets of their windows (by key), their
    operations (by id)."""
    rows = await conn.fetch(
        "SELECT scopes, hour_key, day_key, operation_id, month_key FROM budget_holds"
        " WHERE hold_id = ANY($1::text[]) ORDER BY hold_id FOR UPDATE",
        list(hold_ids),
    )
    nothing = Booking(0, 0, 0, 0, 0)
    keys = {
        key: BucketAmounts()
        for scopes, hk, dk, _, mk in rows
        for key, *_ in booking_rows(load_scopes(scopes), HoldKeys(hk, dk, mk), nothing)
    }
    if keys:
        await book(conn, keys)
    await conn.execute(
        "SELECT 1 FROM budget_operations WHERE operation_id = ANY($1::text[])"
        " ORDER BY operation_id FOR UPDATE",
        sorted({r[3] for r in rows}),
    )
