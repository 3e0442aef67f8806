"""PostgreSQL SQL of operations, requests and holds: the ledger's hot path on asyncpg.

Each function is the body of ONE ``READ COMMITTED`` transaction on the connection it
is given (:meth:`budget.pg_store.PgStore.tx` retries it on a serialization failure or
a deadlock, then fails closed). No global lock: each step locks only the rows it
touches, in the one order of :mod:`budget.pg_rows` (holds, buckets by key,
operations), so concurrent steps of several processes never lose an update and never
deadlock each other:

* ``reserve`` — read the operation, the kill switches and the runtime limits (one
  statement, no lock; skipped when this process knows the operation and the limits,
  :class:`Known`: the statement then checks the kill switches and the limits'
  digest itself, :data:`_GRANT_KNOWN`); then ONE statement, committing by itself
  (:data:`_GRANT_AT_ONCE`), adds the ceiling to ``held_musd`` and the hold's margin to
  ``margin_musd`` of every bucket of the hold (user, team, global, provider × day,
  hour), creating the missing rows and locking them all in key order, charges the
  operation (only if its cost cap still allows), inserts the hold, and fails —
  nothing written — unless every bucket's new settled + held + margins is within its
  limit (:func:`budget.policy.check_hold`'s rule). So the hot global rows stay
  locked for that statement and its commit's flush only, with no round trip to the
  client in between; two round trips in all (one without the read). When it does not fit, the locked
  transaction decides: BEGIN, the same read, the same writes returning the buckets'
  values, :func:`budget.policy.check_hold` in Python (which builds the refusal), and
  COMMIT or — a refusal — ROLLBACK (nothing held anywhere; only the refusal event is
  written).
* Margins: ``budget_buckets.margin_musd`` is the sum of the margins of the held
  holds booked there (``budget_holds.margin_booked = 1``); a hold's settle, release
  or expiry takes its margin out. A hold an older version granted (migration 0021,
  during a rolling deploy) is not booked: its end takes nothing out, and the next
  :func:`sweep` adds its margin to its buckets (until then a hold checked here does
  not count that margin).
* ``settle``/``release`` — read the hold (no lock), then ONE statement committing by
  itself (:func:`_end_at_once`) ends it only if it is still held as read, and then
  books the deltas (:mod:`budget.steps`) on its buckets (key order) and its
  operation: the bucket rows stay locked for that statement and its commit only. Two
  round trips. A late or over-ceiling settle, a late release (they record events),
  or a hold changed between the read and the statement (nothing written) go
  through the locked transaction: lock the hold row, one statement books the same
  deltas, the events, COMMIT. Settled spend's burn-rate check is the caller's,
  after the commit (:class:`budget.pg_store.BurnGate`); a sweep's is in its
  transaction.
* ``begin_operation`` — a per-user advisory lock, then the admission counts.

Rules from :mod:`budget.policy` and :mod:`budget.steps`, statements shared with
SQLite from :mod:`budget.ledger_sql`; times are epoch seconds of the ledger clock,
money integer µUSD.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from datetime import datetime
from typing import Any, NamedTuple

import asyncpg

from budget.config import LedgerConfig
from budget.errors import UnknownHold
from budget.ledger_sql import (
    HOLD_EXPIRE,
    HOLD_INSERT,
    HOLD_RELEASE,
    HOLD_ROW,
    HOLD_SETTLE,
    OPERATION_INSERT,
    REQUEST_INSERT,
    HoldRow,
    hold_values,
    operation_row,
    settle_events,
    settled_row,
)
from budget.pg_rows import (
    BOOK,
    KILLS_OF,
    LIMITS,
    Amounts,
    Refused,
    auto_kill,
    book,
    book_arrays,
    booking_deltas,
    bucket_values,
    event,
    translate,
)
from budget.pg_rows import overrides_of as _overrides
from budget.policy import (
    BucketKey,
    HoldState,
    build_buckets,
    check_hold,
    dump_scopes,
    limit_of,
    load_scopes,
    pick_kill,
    provider_caps,
    release_transition,
    scopes_for,
    utc,
)
from budget.protocol import HoldTicket, OperationTicket
from budget.sqlite_holds import plan_of
from budget.sqlite_rows import kill_state
from budget.steps import (
    Booking,
    admission_refusal,
    expiry_booking,
    release_booking,
    request_refusal,
    reserve_refusal,
)
from budget.store import Pricer, SettleOutcome, SweepOutcome, UnknownOperation
from budget.types import Level, Origin, Refusal, RefusalReason, Usage, Window
from budget.windows import window_keys

__all__ = [
    "Settled",
    "begin_operation",
    "begin_request",
    "end_operation",
    "release",
    "reserve",
    "settle",
    "sweep",
]

_ADMISSION_LOCK = "SELECT pg_advisory_xact_lock(hashtextextended('kopek-admission:' || $1, 0))"
_ADMISSION_READ = (
    "SELECT (SELECT team FROM budget_team_members WHERE user_id = $1),"  # noqa: S608 - fixed fragments
    + KILLS_OF.format(
        user="$2",
        team="COALESCE((SELECT team FROM budget_team_members WHERE user_id = $1), '')",
    )
    + ", (SELECT COUNT(*) FROM budget_operations WHERE user_id = $1 AND ended_at IS NULL"
    " AND expires_at > $3), (SELECT COUNT(*) FROM budget_operations WHERE user_id = $1"
    " AND started_at > $4), (SELECT MIN(started_at) FROM budget_operations"
    " WHERE user_id = $1 AND started_at > $4)"
)
_REQUEST_READ = (
    "SELECT user_id, max_requests, requests, EXISTS (SELECT 1 FROM budget_requests"
    " WHERE operation_id = $1 AND fingerprint = $2) FROM budget_operations"
    " WHERE operation_id = $1 AND ended_at IS NULL FOR UPDATE"
)
_REQUEST_WRITE = (
    "WITH r AS (" + translate(REQUEST_INSERT) + ") UPDATE budget_operations"  # noqa: S608 - fixed fragments
    " SET requests = requests + 1 WHERE operation_id = $2"
)
#: A digest of every runtime limit override (it changes whenever one is set or cleared).
_LIMITS_DIGEST = (
    "(SELECT md5(ARRAY(SELECT ROW(level, scope, win, limit_musd) FROM budget_limits"
    " ORDER BY level, scope, win)::text))"
)
_RESERVE_READ = (
    "SELECT o.user_id, o.origin, o.team, o.max_musd, o.committed_musd, "  # noqa: S608 - fixed fragments
    + KILLS_OF.format(user="o.user_id::text", team="COALESCE(o.team, '')")
    + ", "
    + LIMITS
    + ", "
    + _LIMITS_DIGEST
    + " FROM budget_operations o WHERE o.operation_id = $1 AND o.ended_at IS NULL"
)


def _shift(sql: str, by: int) -> str:
    """``sql`` (``?`` placeholders) as asyncpg's ``$n``, numbered from ``by`` + 1."""
    return re.sub(r"\$(\d+)", lambda m: f"${int(m.group(1)) + by}", translate(sql))


def _once(sql: str, old: str, new: str) -> str:
    """``sql`` with its one ``old`` replaced (a changed shared statement fails here,
    at import, not in a step)."""
    assert sql.count(old) == 1, old
    return sql.replace(old, new)


#: A granted hold whose margin this store books in its buckets (``margin_booked``).
_HOLD_INSERT = _once(
    _once(HOLD_INSERT, "margin_musd)", "margin_musd, margin_booked)"), "?,?)", "?,?,1)"
)
#: A hold's grant in ONE statement: add the ceiling to held and the margin to the
#: margins of every bucket of the hold ($1..$8, :data:`budget.pg_rows.BOOK`: created
#: if missing, locked in key order — first, the lock order), then charge the
#: operation if its cap allows ($9 ceiling, $10 expiry; after the buckets: the
#: subquery on ``b`` runs first), insert the hold ($11..$31); returns whether the
#: operation was charged and the buckets' new values. The transaction's COMMIT
#: follows it at once (or a ROLLBACK, if the policy refuses).
_GRANT_WRITES = (
    "WITH b AS (" + BOOK + "), o AS (UPDATE budget_operations"  # noqa: S608 - fixed fragments
    " SET committed_musd = committed_musd + $9, expires_at = GREATEST(expires_at, $10)"
    " WHERE operation_id = $12 AND ended_at IS NULL AND committed_musd + $9 <= max_musd"
    " AND (SELECT COUNT(*) FROM b) >= 0 RETURNING 1), h AS (" + _shift(_HOLD_INSERT, 10) + ")"
)
_GRANT = (
    _GRANT_WRITES  # noqa: S608 - fixed fragments
    + " SELECT (SELECT COUNT(*) FROM o), ARRAY(SELECT ROW(level, scope, win,"
    " wkey, settled_musd, held_musd, late_musd, margin_musd) FROM b)"
)
#: The same grant as a transaction of its own (autocommit: its commit, with the
#: flush, follows it in the server, no round trip under the bucket locks), committed
#: only when it fits: $32 is each bucket's limit (key order, NULL = none) and the
#: statement fails with ``CardinalityViolationError`` (a scalar subquery of 2 rows:
#: nothing written) when the operation was not charged or a bucket's new
#: settled + held + margins passes its limit — :func:`budget.policy.check_hold`'s
#: rule (ceiling + margin ≤ limit − settled − held − other margins) on the values after.
_GRANT_AT_ONCE = (
    _GRANT_WRITES  # noqa: S608 - fixed fragments
    + " SELECT (SELECT 1 FROM generate_series(1, CASE WHEN"
    " (SELECT COUNT(*) FROM o) = 1 AND NOT EXISTS (SELECT 1 FROM b JOIN unnest($1::text[],"
    " $2::text[], $3::text[], $4::text[], $32::bigint[]) AS l(level, scope, win, wkey, lim)"
    " USING (level, scope, win, wkey) WHERE b.settled_musd + b.held_musd + b.margin_musd"
    " > l.lim) THEN 1 ELSE 2 END))"
)
#: The same grant without the read before it, from what this process knows
#: (:class:`Known`): it also fails (nothing written) when a kill switch of the user
#: ($34, as text), their team ($35, or '') or everyone is tripped, or when the runtime
#: limits' digest is no longer $33 (the limits the caps and scopes came from).
_GRANT_KNOWN = _once(
    _GRANT_AT_ONCE,
    " > l.lim) THEN 1",
    " > l.lim) AND NOT EXISTS (SELECT 1 FROM budget_kill WHERE killed = 1 AND (scope_kind"  # noqa: S608 - fixed fragments
    " = 'global' OR (scope_kind = 'user' AND scope = $34) OR (scope_kind = 'team' AND"
    f" scope = $35))) AND {_LIMITS_DIGEST} = $33 THEN 1",
)
#: A hold's row (``HOLD_ROW`` columns, then the margin its buckets hold for it).
_HOLD_ROW = _once(
    translate(HOLD_ROW), " FROM budget_holds", ", margin_musd * margin_booked FROM budget_holds"
)
_HOLD_LOCK = _HOLD_ROW + " FOR UPDATE"
#: The same, and this transaction commits without waiting for its WAL flush.
_HOLD_LOCK_ASYNC = (
    _once(
        _HOLD_ROW,
        " FROM budget_holds",
        ", set_config('synchronous_commit', 'off', true) FROM budget_holds",
    )
    + " FOR UPDATE"
)


def _end_write(hold_sql: str) -> str:
    """One statement booking a hold's end: its buckets ($1..$8, locked in key order
    by :data:`budget.pg_rows.BOOK`), then its operation ($9 delta, $10 operation id)
    and the hold row itself (``hold_sql``, numbered from $11; already locked)."""
    return (
        f"WITH h AS ({_shift(hold_sql, 10)}), o AS (UPDATE budget_operations"  # noqa: S608 - fixed fragments
        " SET committed_musd = committed_musd + $9 WHERE operation_id = $10) " + BOOK
    )


_SETTLE_WRITE = _end_write(HOLD_SETTLE)
_RELEASE_WRITE = _end_write(HOLD_RELEASE)


def _end_at_once(hold_sql: str, durable: bool) -> str:
    """A held hold's end as ONE statement committing by itself, no lock taken before
    it: the hold row (``hold_sql`` numbered from $11, only while it is still held with
    the booked margin read before: the last parameter), then its
    buckets ($1..$8, :data:`budget.pg_rows.BOOK` in key order, only if the hold
    changed), then its operation ($9 delta, $10 id, likewise) — the one lock order,
    forced by each part reading the one before. Returns 1 (booked) or 0 (the hold
    changed since it was read: nothing written), and the global day bucket's new
    settled spend (``NULL`` if not touched). Unless ``durable``, the commit does
    not wait for the WAL flush (:class:`budget.pg_store.PgStore`)."""
    held = " AND state = 'held' AND margin_musd * margin_booked = ? RETURNING 1"
    hold = _shift(hold_sql + held, 10)
    buckets = _once(BOOK, " ORDER BY", " WHERE EXISTS (SELECT 1 FROM h) ORDER BY")
    return (
        f"WITH h AS ({hold}), b AS ({buckets}), o AS (UPDATE budget_operations"  # noqa: S608 - fixed fragments
        " SET committed_musd = committed_musd + $9 WHERE operation_id = $10"
        " AND EXISTS (SELECT 1 FROM h) AND (SELECT COUNT(*) FROM b) >= 0 RETURNING 1)"
        " SELECT (SELECT COUNT(*) FROM h) + 0 * (SELECT COUNT(*) FROM o), (SELECT settled_musd"
        " FROM b WHERE level = 'global' AND win = 'day')"
        + ("" if durable else ", set_config('synchronous_commit', 'off', true)")
    )


#: :func:`_end_at_once` of a settle / a release, durable or not.
_SETTLE_AT_ONCE = {d: _end_at_once(HOLD_SETTLE, d) for d in (True, False)}
_RELEASE_AT_ONCE = {d: _end_at_once(HOLD_RELEASE, d) for d in (True, False)}


async def begin_operation(
    conn: Any,
    cfg: LedgerConfig,
    process_id: str,
    now: datetime,
    user_id: int,
    origin: Origin,
    max_musd: int,
    max_requests: int,
) -> OperationTicket:
    """Admit an operation (kill, in-flight, rate) and take an in-flight slot. One
    user's admissions are serialised by an advisory lock on the user id (the counts
    are read after it, so two processes never both take the last slot)."""
    t = now.timestamp()
    await conn.execute(_ADMISSION_LOCK, str(user_id))
    team, kills, open_ops, recent, oldest = await conn.fetchrow(
        _ADMISSION_READ, user_id, str(user_id), t, t - 60.0
    )
    refusal = admission_refusal(
        pick_kill(kill_state(k) for k in kills),
        open_ops,
        cfg.user_max_inflight,
        recent,
        cfg.user_max_per_minute,
        utc(oldest),
    )
    if refusal is not None:
        raise Refused(refusal, user_id)
    op_id = uuid.uuid4().hex
    await conn.execute(
        translate(OPERATION_INSERT),
        *operation_row(cfg, process_id, now, op_id, user_id, origin, team, max_musd, max_requests),
    )
    return OperationTicket(op_id, user_id, origin, team)


async def end_operation(conn: Any, now: datetime, operation_id: str) -> None:
    """Free the operation's slot (idempotent)."""
    await conn.execute(
        "UPDATE budget_operations SET ended_at = $1 WHERE operation_id = $2 AND ended_at IS NULL",
        now.timestamp(),
        operation_id,
    )


async def begin_request(
    conn: Any, cfg: LedgerConfig, now: datetime, operation_id: str, fingerprint: str
) -> str:
    """Count a request in the operation (its row locked); refuse a repeat fingerprint
    or too many."""
    row = await conn.fetchrow(_REQUEST_READ, operation_id, fingerprint)
    if row is None:
        raise UnknownOperation(operation_id)
    user_id, max_requests, n, repeated = row
    refusal = request_refusal(repeated, n, max_requests)
    if refusal is not None:
        raise Refused(refusal, user_id)
    req_id = uuid.uuid4().hex
    day_key = window_keys(now, cfg.tz).day_key
    await conn.execute(_REQUEST_WRITE, req_id, operation_id, fingerprint, now.timestamp(), day_key)
    return req_id


async def reserve(
    conn: Any,
    cfg: LedgerConfig,
    process_id: str,
    now: datetime,
    operation_id: str,
    request_id: str,
    provider: str,
    model: str,
    input_tokens: int,
    max_tokens: int,
    ceiling_musd: int,
    list_ceiling_musd: int | None,
    price_version: str,
    margin_musd: int,
    known: Known | None = None,
) -> HoldTicket:
    """Grant a hold on every level/window at once, or refuse with nothing held
    (module docstring). ``conn`` is outside any transaction: the grant is tried as
    one statement committing by itself (:data:`_GRANT_AT_ONCE`); when that does not
    fit, the locked transaction decides (and builds the refusal). ``known``: what
    this process knows (:class:`Known`): with the operation and the limits known,
    no read before the grant (:data:`_GRANT_KNOWN`); the new hold's row is kept
    there for its settle."""
    args = (
        cfg,
        process_id,
        now,
        operation_id,
        request_id,
        (provider, model, input_tokens, max_tokens),
        (ceiling_musd, list_ceiling_musd, margin_musd, price_version),
    )
    try:
        ticket, row = await _reserve(conn, *args, at_once=True, known=known)
    except _NotAtOnce:
        async with conn.transaction():
            ticket, row = await _reserve(conn, *args, at_once=False, known=known)
    if known is not None:
        known.keep(known.granted, ticket.hold_id, row)
    return ticket


class _NotAtOnce(Exception):
    """The one-statement grant did not fit (nothing written): decide under locks."""


#: Entries kept in each of :class:`Known`'s maps (the oldest dropped beyond).
KNOWN_MAX = 10_000


class Known:
    """What one process knows so that its holds and settles need not read it back;
    every statement that uses it checks it still holds (else the locked
    transaction reads and decides).

    Attributes:
        ops: operation id → (user id, origin, team or ``None``, max µUSD): fixed for
            the operation's life (from its admission, or a hold's read).
        limits: (digest, overrides) of the runtime limits last read
            (:data:`_GRANT_KNOWN` compares the digest).
        granted: hold id → its row as :func:`settle` reads it, for the holds granted
            here.
    """

    __slots__ = ("granted", "limits", "ops")

    def __init__(self) -> None:
        self.ops: dict[str, tuple[int, str, str | None, int]] = {}
        self.limits: tuple[str, dict[tuple[str, str, str], int | None]] | None = None
        self.granted: dict[str, tuple[Any, ...]] = {}

    @staticmethod
    def keep(into: dict[str, Any], key: str, value: Any) -> None:
        """``into[key] = value``, dropping the oldest entry beyond :data:`KNOWN_MAX`."""
        into[key] = value
        if len(into) > KNOWN_MAX:
            del into[next(iter(into))]


async def _reserve(
    conn: Any,
    cfg: LedgerConfig,
    process_id: str,
    now: datetime,
    operation_id: str,
    request_id: str,
    call: tuple[str, str, int, int],
    money: tuple[int, int | None, int, str],
    *,
    at_once: bool,
    known: Known | None,
) -> tuple[HoldTicket, tuple[Any, ...]]:
    """One try of :func:`reserve`: ``call`` = (provider, model, input tokens, max
    tokens), ``money`` = (ceiling, list ceiling, margin µUSD, price version).
    ``at_once``: the autocommit grant (raises :class:`_NotAtOnce` when it does not
    fit), without a read when ``known`` knows the operation and the limits; else
    the body of a transaction that checks in Python after the locks. Returns the
    ticket and the hold's row as :data:`_HOLD_ROW` selects it."""
    provider, model = call[:2]
    ceiling_musd, list_ceiling_musd, margin_musd = money[:3]
    t = now.timestamp()
    op = None if known is None or not at_once else known.ops.get(operation_id)
    cached = None if known is None or op is None else known.limits
    if op is not None and cached is not None:
        user_id, origin, team, max_musd = op
        digest, limits = cached
    else:
        row = await conn.fetchrow(_RESERVE_READ, operation_id)
        if row is None:
            raise UnknownOperation(operation_id)
        user_id, origin, team, max_musd, committed, kills, limit_rows, digest = row
        early = reserve_refusal(
            pick_kill(kill_state(k) for k in kills), committed, ceiling_musd, max_musd
        )
        if early is not None:
            raise Refused(early, user_id)
        limits = _overrides(limit_rows)
        if known is not None:
            known.limits = (digest, limits)
            known.keep(known.ops, operation_id, (user_id, origin, team, max_musd))
    scopes = scopes_for(user_id, team, provider, provider_caps(cfg, limits))
    keys = window_keys(now, cfg.tz)
    checked = ceiling_musd + margin_musd > 0
    deltas: dict[BucketKey, Amounts] = {}
    if checked:
        grant = Booking(ceiling_musd, 0, 0, 0, ceiling_musd)
        deltas = booking_deltas(scopes, keys.hour_key, keys.day_key, grant, margin_musd)
    hold_id = uuid.uuid4().hex
    expires = t + cfg.hold_ttl_s
    values = hold_values(
        cfg,
        process_id,
        now,
        hold_id,
        (operation_id, request_id, user_id, team, origin),
        call,
        money,
        (keys.hour_key, keys.day_key),
        scopes_json := dump_scopes(scopes),
    )
    arrays = book_arrays(deltas)
    ticket = HoldTicket(hold_id, provider, model, ceiling_musd, list_ceiling_musd, now)
    # as _HOLD_ROW selects it: HoldRow's columns, then its margin (booked in its buckets)
    hold_row = (
        "held",
        operation_id,
        user_id,
        provider,
        model,
        call[2],
        call[3],
        ceiling_musd,
        t,
        keys.hour_key,
        keys.day_key,
        scopes_json,
        None,
        margin_musd,
    )
    if at_once:
        caps = [limit_of(cfg, limits, Level(k[0]), k[1], Window(k[2])) for k in sorted(deltas)]
        grant_args = [*arrays, ceiling_musd, expires, *values, caps]
        try:
            if cached is None:
                await conn.fetchval(_GRANT_AT_ONCE, *grant_args)
            else:
                user = str(user_id)
                await conn.fetchval(_GRANT_KNOWN, *grant_args, digest, user, team or "")
        except asyncpg.exceptions.CardinalityViolationError:
            raise _NotAtOnce() from None
        return ticket, hold_row
    charged, after = await conn.fetchrow(_GRANT, *arrays, ceiling_musd, expires, *values)
    if not charged:  # another step of this operation took the cap, or ended it
        raise Refused(Refusal(RefusalReason.OPERATION_CAP, note="cost"), user_id)
    if checked:
        # as they were before this hold, the other holds' margins counted as held
        before = {
            k: (s, h - ceiling_musd + m - margin_musd, lt)
            for k, (s, h, lt, m) in bucket_values(after).items()
        }
        found = build_buckets(cfg, limits, scopes, keys, before)
        refusal = check_hold(found, ceiling_musd + margin_musd)
        if refusal is not None:
            raise Refused(refusal, user_id)
    return ticket, hold_row


async def _locked_hold(conn: Any, hold_id: str, durable: bool) -> tuple[Any, ...]:
    """The hold's row (``HOLD_ROW`` columns, then the margin its buckets hold for it),
    locked; unless ``durable``, the transaction's commit will not wait for the disk
    (``synchronous_commit = off``)."""
    row = await conn.fetchrow(_HOLD_LOCK if durable else _HOLD_LOCK_ASYNC, hold_id)
    if row is None:
        raise UnknownHold(hold_id)
    return tuple(row)[:14]


def _end_deltas(
    scopes_json: str, hour_key: str, day_key: str, b: Booking, margin_musd: int
) -> dict[BucketKey, Amounts]:
    """The bucket deltas of a hold's end, ``margin_musd`` (≤ 0) added to its buckets'
    margins; none when nothing moves (no bucket row touched, as on SQLite)."""
    if b.held or b.settled or b.late or margin_musd:
        return booking_deltas(load_scopes(scopes_json), hour_key, day_key, b, margin_musd)
    return {}


async def _book_end(
    conn: Any,
    write: str,
    scopes_json: str,
    hour_key: str,
    day_key: str,
    b: Booking,
    margin_musd: int,
    op_id: str,
    hold_args: tuple[object, ...],
) -> int | None:
    """Book a hold's end (``write``: :data:`_SETTLE_WRITE` or :data:`_RELEASE_WRITE`),
    ``margin_musd`` (≤ 0) added to its buckets' margins; the global day bucket's new
    settled spend (``None`` if not touched)."""
    deltas = _end_deltas(scopes_json, hour_key, day_key, b, margin_musd)
    rows = await conn.fetch(write, *book_arrays(deltas), b.committed, op_id, *hold_args)
    day = [int(r[4]) for r in rows if r[0] == Level.GLOBAL.value and r[2] == Window.DAY.value]
    return day[0] if day else None


class Settled(NamedTuple):
    """What :func:`settle` did: the outcome; whether settled spend grew (the caller
    then runs the burn-rate trigger); the hold's day key and the global day bucket's
    settled spend after it (µUSD; ``None`` if not touched)."""

    outcome: SettleOutcome
    grew: bool
    day_key: str
    day_settled: int | None


async def settle(
    conn: Any,
    cfg: LedgerConfig,
    now: datetime,
    hold_id: str,
    usage: Usage | Callable[[int, int], Usage],
    estimated: bool,
    pricer: Pricer,
    durable: bool = True,
    known: tuple[Any, ...] | None = None,
) -> Settled:
    """Book the actual cost of a hold (idempotent; see
    :func:`budget.sqlite_holds.settle` for the rules; the burn-rate trigger is the
    caller's, after this step committed: :class:`Settled`).
    ``durable=False``: commit without waiting for the WAL flush
    (:class:`budget.pg_store.PgStore`).

    ``conn`` is outside any transaction. A held hold settled within its ceiling (the
    common case) is read, then booked by ONE self-committing statement
    (:func:`_end_at_once`): the bucket rows stay locked for that statement and its
    commit only. If the hold changed in between (another step ended it, a sweep
    expired it or booked its margin) that statement writes nothing and — as a late
    or over-ceiling settle, which also records events — the locked transaction
    decides. ``known``: the hold's row as this process granted it (from
    :func:`reserve`'s ``granted``): not read again (the statement checks it is
    still so)."""
    row = known if known is not None else await conn.fetchrow(_HOLD_ROW, hold_id)
    if row is None:
        raise UnknownHold(hold_id)
    h = HoldRow._make(tuple(row)[:13])
    if h.state == HoldState.HELD:
        plan = plan_of(h, usage, pricer)
        assert plan is not None and not plan.late
        if plan.actual_musd <= h.ceiling_musd:  # else an over_ceiling event: below
            b, margin = plan.booking, int(row[13])
            deltas = _end_deltas(h.scopes, h.hour_key, h.day_key, b, -margin)
            args = settled_row(
                now, hold_id, plan.usage, plan.actual_musd, plan.list_actual_musd, estimated, False
            )
            arrays = book_arrays(deltas)
            write = _SETTLE_AT_ONCE[durable]
            done = await conn.fetchrow(write, *arrays, b.committed, h.operation_id, *args, margin)
            if done[0]:
                outcome = SettleOutcome(plan.actual_musd, True, None)
                return Settled(outcome, b.grew, h.day_key, done[1])
    elif h.state != HoldState.EXPIRED:  # settled or released: final, a no-op
        return Settled(SettleOutcome(int(h.booked_musd or 0), False, None), False, h.day_key, None)
    async with conn.transaction():
        return await _settle_locked(conn, cfg, now, hold_id, usage, estimated, pricer, durable)


async def _settle_locked(
    conn: Any,
    cfg: LedgerConfig,
    now: datetime,
    hold_id: str,
    usage: Usage | Callable[[int, int], Usage],
    estimated: bool,
    pricer: Pricer,
    durable: bool,
) -> Settled:
    """:func:`settle` as the body of a transaction that locks the hold row first."""
    locked = await _locked_hold(conn, hold_id, durable)
    h = HoldRow._make(locked[:13])
    plan = plan_of(h, usage, pricer)
    if plan is None:
        return Settled(SettleOutcome(int(h.booked_musd or 0), False, None), False, h.day_key, None)
    b = plan.booking
    row = settled_row(
        now, hold_id, plan.usage, plan.actual_musd, plan.list_actual_musd, estimated, plan.late
    )
    margin = 0 if plan.late else -int(locked[13])  # an expired hold's left at expiry
    day_settled = await _book_end(
        conn, _SETTLE_WRITE, h.scopes, h.hour_key, h.day_key, b, margin, h.operation_id, row
    )
    for kind, detail in settle_events(plan.late, b, plan.actual_musd, h.ceiling_musd):
        await event(conn, cfg.tz, now, kind, user_id=h.user_id, hold_id=hold_id, detail=detail)
    return Settled(SettleOutcome(plan.actual_musd, True, None), b.grew, h.day_key, day_settled)


async def release(
    conn: Any,
    cfg: LedgerConfig,
    now: datetime,
    hold_id: str,
    durable: bool = True,
    known: tuple[Any, ...] | None = None,
) -> bool:
    """Return a hold that spent nothing (see :func:`budget.sqlite_holds.release`;
    ``durable``, ``known`` as :func:`settle`). ``conn`` is outside any transaction: a
    held hold is released by one self-committing statement as :func:`settle` books
    one; an expired one (a late release, with its event) by the locked transaction."""
    row = known if known is not None else await conn.fetchrow(_HOLD_ROW, hold_id)
    if row is None:
        raise UnknownHold(hold_id)
    state = HoldState(row[0])
    if state is HoldState.HELD:
        op_id, ceiling, hour_key, day_key, scopes_json = row[1], row[7], row[9], row[10], row[11]
        b, margin = release_booking(False, ceiling, 0), int(row[13])
        deltas = _end_deltas(scopes_json, hour_key, day_key, b, -margin)
        args = (now.timestamp(), 0, hold_id, margin)
        write = _RELEASE_AT_ONCE[durable]
        if (await conn.fetchrow(write, *book_arrays(deltas), b.committed, op_id, *args))[0]:
            return True
    elif state is not HoldState.EXPIRED:  # settled or released: final, a no-op
        return False
    async with conn.transaction():
        return await _release_locked(conn, cfg, now, hold_id, durable)


async def _release_locked(
    conn: Any, cfg: LedgerConfig, now: datetime, hold_id: str, durable: bool
) -> bool:
    """:func:`release` as the body of a transaction that locks the hold row first."""
    row = await _locked_hold(conn, hold_id, durable)
    state, op_id, user_id, ceiling = row[0], row[1], row[2], row[7]
    hour_key, day_key, scopes_json, booked, booked_margin = row[9:14]
    do_release, late = release_transition(HoldState(state))
    if not do_release:
        return False
    b = release_booking(late, ceiling, int(booked or 0))
    args = (now.timestamp(), int(late), hold_id)
    margin = 0 if late else -int(booked_margin)
    await _book_end(conn, _RELEASE_WRITE, scopes_json, hour_key, day_key, b, margin, op_id, args)
    if late:
        detail = f"returned {b.counted} booked at expiry"
        await event(
            conn, cfg.tz, now, "late_release", user_id=user_id, hold_id=hold_id, detail=detail
        )
    return True


async def sweep(
    conn: Any, cfg: LedgerConfig, process_id: str, now: datetime, dead_before: float
) -> SweepOutcome:
    """Expire the holds past their TTL and every hold and operation of a dead process
    (no heartbeat after ``dead_before``, epoch seconds): each booked at its provable
    bound, estimated (:func:`budget.steps.expiry_booking`), its booked margin taken
    out of its buckets; a held hold whose margin is not in its buckets (granted by an
    older version) gets it added there. Holds are locked in id
    order, their buckets in key order (all deltas summed first), then operations; last,
    the ``budget_processes`` rows of dead processes with nothing left held or open are
    deleted (so the register does not grow with every restart)."""
    t = now.timestamp()
    dead = (
        "process_id <> $2 AND process_id NOT IN"
        " (SELECT process_id FROM budget_processes WHERE heartbeat_at > $3)"
    )
    rows = await conn.fetch(
        "SELECT hold_id, user_id, ceiling_musd, list_ceiling_musd, input_tokens, max_tokens,"  # noqa: S608 - fixed fragments
        f" hour_key, day_key, scopes, margin_musd, margin_booked, expires_at <= $1 OR ({dead})"
        f" FROM budget_holds WHERE state = 'held' AND (expires_at <= $1 OR ({dead})"
        " OR (margin_booked = 0 AND margin_musd > 0)) ORDER BY hold_id FOR UPDATE",
        t,
        process_id,
        dead_before,
    )
    deltas: dict[BucketKey, Amounts] = {}
    expired = []
    adopted = []
    for row in rows:
        hold_id, user_id, ceiling, list_ceiling, in_tok, max_tok, hk, dk, scopes = row[:9]
        margin, margin_booked, ending = int(row[9]), int(row[10]), bool(row[11])
        if ending:
            b = expiry_booking(int(ceiling), margin)
            moved = -margin * margin_booked  # its margin leaves the buckets
            expired.append((hold_id, user_id, b.settled, list_ceiling, in_tok, max_tok))
        else:  # granted by an older version (migration 0021): its margin joins them
            b, moved = Booking(0, 0, 0, 0, 0), margin
            adopted.append(hold_id)
        for key, d in booking_deltas(load_scopes(scopes), hk, dk, b, moved).items():
            old = deltas.get(key, (0, 0, 0, 0))
            deltas[key] = (old[0] + d[0], old[1] + d[1], old[2] + d[2], old[3] + d[3])
    if deltas:
        await book(conn, deltas)
    if adopted:
        await conn.execute(
            "UPDATE budget_holds SET margin_booked = 1 WHERE hold_id = ANY($1::text[])", adopted
        )
    for hold_id, user_id, booked, list_ceiling, in_tok, max_tok in expired:
        # the operation's committed money keeps the ceiling: it now counts as spent
        await conn.execute(
            translate(HOLD_EXPIRE), t, booked, list_ceiling, in_tok, max_tok, hold_id
        )
        detail = f"booked {booked} at ceiling, estimated"
        await event(conn, cfg.tz, now, "expiry", user_id=user_id, hold_id=hold_id, detail=detail)
    await conn.execute(
        "UPDATE budget_operations SET ended_at = $1 WHERE operation_id IN (SELECT operation_id"  # noqa: S608 - fixed fragments
        " FROM budget_operations WHERE ended_at IS NULL AND (expires_at <= $1 OR"
        f" ({dead})) ORDER BY operation_id FOR UPDATE)",
        t,
        process_id,
        dead_before,
    )
    # a dead process whose holds and operations are all booked or ended leaves the
    # register (absent counts as dead everywhere: a live one re-registers at its beat)
    await conn.execute(
        "DELETE FROM budget_processes p WHERE p.heartbeat_at <= $1 AND p.process_id <> $2"
        " AND NOT EXISTS (SELECT 1 FROM budget_holds h"
        " WHERE h.process_id = p.process_id AND h.state = 'held')"
        " AND NOT EXISTS (SELECT 1 FROM budget_operations o"
        " WHERE o.process_id = p.process_id AND o.ended_at IS NULL)",
        dead_before,
        process_id,
    )
    booked_total = sum(e[2] for e in expired)
    tripped = await auto_kill(conn, cfg, now) if booked_total > 0 else None
    return SweepOutcome(len(expired), booked_total, tripped)
