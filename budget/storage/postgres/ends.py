"""PostgreSQL SQL of a hold's end: settle, release, and the sweep's expiry.

Each function is the body of ONE ``READ COMMITTED`` step on the connection it is
given (:meth:`budget.storage.postgres.store.PgStore.tx` retries it on a serialization failure or a
deadlock, then fails closed), locking only the rows it touches in the one order of
:mod:`budget.storage.postgres.rows` (holds, buckets by key, operations):

* ``settle``/``release`` — read the hold (no lock; not even that for a hold this
  process granted: :class:`budget.storage.postgres.holds.Known`), then ONE statement committing by
  itself (:func:`_end_at_once`) ends it only if it is still held as read, and then
  books the deltas (:mod:`budget.policy.steps`) on its buckets (key order) and its
  operation: the bucket rows stay locked for that statement and its commit only. Two
  round trips (one without the read). A late or over-ceiling settle, a late release
  (they record events), or a hold changed between the read and the statement
  (nothing written) go through the locked transaction: lock the hold row, one
  statement books the same deltas, the events, COMMIT. Settled spend's burn-rate
  check is the caller's, after the commit (:class:`budget.storage.postgres.burn.BurnCheckTimer`); a
  sweep's is in its transaction.
* ``sweep`` — expiry at the provable bound; margins of holds an older version granted
  are booked (see :mod:`budget.storage.postgres.holds`).

Rules from :mod:`budget.policy.rules` and :mod:`budget.policy.steps`, statements shared with
SQLite from :mod:`budget.storage.sql.statements`; times are epoch seconds of the ledger clock,
money integer µUSD.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, NamedTuple

from budget.config import LedgerConfig
from budget.errors import UnknownHold
from budget.policy.rules import BucketKey, HoldState, load_scopes, release_transition
from budget.policy.steps import Booking, expiry_booking, release_booking
from budget.policy.windows import HoldKeys
from budget.storage.postgres.lease import LIVENESS_KEY
from budget.storage.postgres.rows import (
    BOOK,
    BucketAmounts,
    auto_kill,
    book,
    book_arrays,
    booking_deltas,
    event,
    once,
    shift,
    translate,
)
from budget.storage.sql.holds import plan_of
from budget.storage.sql.statements import (
    HOLD_EXPIRE,
    HOLD_RELEASE,
    HOLD_ROW,
    HOLD_ROW_COLUMNS,
    HOLD_SETTLE,
    HoldRow,
    settle_events,
    settled_row,
)
from budget.storage.store import SettleOutcome, SettleRequest, SweepOutcome
from budget.types import Level, Window

__all__ = ["DECLARE_DEAD", "Settled", "release", "settle", "sweep"]

#: A hold's row (``HOLD_ROW`` columns, then the margin its buckets hold for it).
_HOLD_ROW = once(
    translate(HOLD_ROW), " FROM budget_holds", ", margin_musd * margin_booked FROM budget_holds"
)
_HOLD_LOCK = _HOLD_ROW + " FOR UPDATE"
#: The same, and this transaction commits without waiting for its WAL flush.
_HOLD_LOCK_ASYNC = (
    once(
        _HOLD_ROW,
        " FROM budget_holds",
        ", set_config('synchronous_commit', 'off', true) FROM budget_holds",
    )
    + " FOR UPDATE"
)


def _end_write(hold_sql: str) -> str:
    """One statement booking a hold's end: its buckets ($1..$8, locked in key order
    by :data:`budget.storage.postgres.rows.BOOK`), then its operation ($9 delta, $10 operation id)
    and the hold row itself (``hold_sql``, numbered from $11; already locked)."""
    return (
        f"WITH h AS ({shift(hold_sql, 10)}), o AS (UPDATE budget_operations"  # noqa: S608 - fixed fragments
        " SET committed_musd = committed_musd + $9 WHERE operation_id = $10) " + BOOK
    )


_SETTLE_WRITE = _end_write(HOLD_SETTLE)
_RELEASE_WRITE = _end_write(HOLD_RELEASE)


def _end_at_once(hold_sql: str, durable: bool) -> str:
    """A held hold's end as ONE statement committing by itself, no lock taken before
    it: the hold row (``hold_sql`` numbered from $11, only while it is still held with
    the booked margin read before: the last parameter), then its
    buckets ($1..$8, :data:`budget.storage.postgres.rows.BOOK` in key order, only if the hold
    changed), then its operation ($9 delta, $10 id, likewise) — the one lock order,
    forced by each part reading the one before. Returns 1 (booked) or 0 (the hold
    changed since it was read: nothing written), and the global day bucket's new
    settled spend (``NULL`` if not touched). Unless ``durable``, the commit does
    not wait for the WAL flush (:class:`budget.storage.postgres.store.PgStore`)."""
    held = " AND state = 'held' AND margin_musd * margin_booked = ? RETURNING 1"
    hold = shift(hold_sql + held, 10)
    buckets = once(BOOK, " ORDER BY", " WHERE EXISTS (SELECT 1 FROM h) ORDER BY")
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


async def _locked_hold(conn: Any, hold_id: str, durable: bool) -> tuple[Any, ...]:
    """The hold's row (``HOLD_ROW`` columns, then the margin its buckets hold for it),
    locked; unless ``durable``, the transaction's commit will not wait for the disk
    (``synchronous_commit = off``)."""
    row = await conn.fetchrow(_HOLD_LOCK if durable else _HOLD_LOCK_ASYNC, hold_id)
    if row is None:
        raise UnknownHold(hold_id)
    return tuple(row)[: _MARGIN + 1]


#: Where :data:`_HOLD_ROW` has the margin its buckets hold for the hold.
_MARGIN = HOLD_ROW_COLUMNS


def _end_deltas(
    scopes_json: str, keys: HoldKeys, b: Booking, margin_musd: int
) -> dict[BucketKey, BucketAmounts]:
    """The bucket deltas of a hold's end, ``margin_musd`` (≤ 0) added to its buckets'
    margins; none when nothing moves (no bucket row touched, as on SQLite)."""
    if b.held or b.settled or b.late or margin_musd:
        return booking_deltas(load_scopes(scopes_json), keys, b, margin_musd)
    return {}


async def _book_end(
    conn: Any,
    write: str,
    h: HoldRow,
    b: Booking,
    margin_musd: int,
    hold_args: tuple[object, ...],
) -> int | None:
    """Book the end of the hold ``h`` (``write``: :data:`_SETTLE_WRITE` or
    :data:`_RELEASE_WRITE`), ``margin_musd`` (≤ 0) added to its buckets' margins; the
    global day bucket's new settled spend (``None`` if not touched)."""
    deltas = _end_deltas(h.scopes, h.keys, b, margin_musd)
    op_id = h.operation_id
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
    request: SettleRequest,
    durable: bool = True,
    known: tuple[Any, ...] | None = None,
) -> Settled:
    """Book the actual cost of a hold (idempotent; see
    :func:`budget.storage.sql.holds.settle` for the rules; the burn-rate trigger is the
    caller's, after this step committed: :class:`Settled`).
    ``durable=False``: commit without waiting for the WAL flush
    (:class:`budget.storage.postgres.store.PgStore`).

    ``conn`` is outside any transaction. A held hold settled within its ceiling (the
    common case) is read, then booked by ONE self-committing statement
    (:func:`_end_at_once`): the bucket rows stay locked for that statement and its
    commit only. If the hold changed in between (another step ended it, a sweep
    expired it or booked its margin) that statement writes nothing and — as a late
    or over-ceiling settle, which also records events — the locked transaction
    decides. ``known``: the hold's row as this process granted it (from
    :func:`reserve`'s ``granted``): not read again (the statement checks it is
    still so)."""
    hold_id = request.hold_id
    row = known if known is not None else await conn.fetchrow(_HOLD_ROW, hold_id)
    if row is None:
        raise UnknownHold(hold_id)
    h = HoldRow._make(tuple(row)[:_MARGIN])
    if h.state == HoldState.HELD:
        plan = plan_of(h, request.usage, request.pricer)
        assert plan is not None and not plan.late
        if plan.actual_musd <= h.ceiling_musd:  # else an over_ceiling event: below
            b, margin = plan.booking, int(row[_MARGIN])
            deltas = _end_deltas(h.scopes, h.keys, b, -margin)
            args = settled_row(now, hold_id, plan, request.estimated)
            arrays = book_arrays(deltas)
            write = _SETTLE_AT_ONCE[durable]
            done = await conn.fetchrow(write, *arrays, b.committed, h.operation_id, *args, margin)
            if done[0]:
                outcome = SettleOutcome(plan.actual_musd, True, None)
                return Settled(outcome, b.grew, h.day_key, done[1])
    elif h.state != HoldState.EXPIRED:  # settled or released: final, a no-op
        return Settled(SettleOutcome(int(h.booked_musd or 0), False, None), False, h.day_key, None)
    async with conn.transaction():
        return await _settle_locked(conn, cfg, now, request, durable)


async def _settle_locked(
    conn: Any, cfg: LedgerConfig, now: datetime, request: SettleRequest, durable: bool
) -> Settled:
    """:func:`settle` as the body of a transaction that locks the hold row first."""
    hold_id = request.hold_id
    locked = await _locked_hold(conn, hold_id, durable)
    h = HoldRow._make(locked[:_MARGIN])
    plan = plan_of(h, request.usage, request.pricer)
    if plan is None:
        return Settled(SettleOutcome(int(h.booked_musd or 0), False, None), False, h.day_key, None)
    b = plan.booking
    row = settled_row(now, hold_id, plan, request.estimated)
    margin = 0 if plan.late else -int(locked[_MARGIN])  # an expired hold's left at expiry
    day_settled = await _book_end(conn, _SETTLE_WRITE, h, b, margin, row)
    for kind, detail in settle_events(plan.late, b, plan.actual_musd, h.ceiling_musd):
        await event(conn, cfg.tz, now, kind, user_id=h.user_id, hold_id=hold_id, detail=detail)
    return Settled(SettleOutcome(plan.actual_musd, True, None), b.grew, h.day_key, day_settled)


async def release(
    conn: Any,
    cfg: LedgerConfig,
    now: datetime,
    hold_id: str,
    *,
    durable: bool = True,
    known: tuple[Any, ...] | None = None,
) -> bool:
    """Return a hold that spent nothing (see :func:`budget.storage.sql.holds.release`;
    ``durable``, ``known`` as :func:`settle`). ``conn`` is outside any transaction: a
    held hold is released by one self-committing statement as :func:`settle` books
    one; an expired one (a late release, with its event) by the locked transaction."""
    row = known if known is not None else await conn.fetchrow(_HOLD_ROW, hold_id)
    if row is None:
        raise UnknownHold(hold_id)
    h = HoldRow._make(tuple(row)[:_MARGIN])
    if h.state == HoldState.HELD:
        b, margin = release_booking(False, h.ceiling_musd, 0), int(row[_MARGIN])
        deltas = _end_deltas(h.scopes, h.keys, b, -margin)
        args = (now.timestamp(), 0, hold_id, margin)
        write = _RELEASE_AT_ONCE[durable]
        arrays = book_arrays(deltas)
        if (await conn.fetchrow(write, *arrays, b.committed, h.operation_id, *args))[0]:
            return True
    elif h.state != HoldState.EXPIRED:  # settled or released: final, a no-op
        return False
    async with conn.transaction():
        return await _release_locked(conn, cfg, now, hold_id, durable)


async def _release_locked(
    conn: Any, cfg: LedgerConfig, now: datetime, hold_id: str, durable: bool
) -> bool:
    """:func:`release` as the body of a transaction that locks the hold row first."""
    row = await _locked_hold(conn, hold_id, durable)
    h = HoldRow._make(row[:_MARGIN])
    do_release, late = release_transition(HoldState(h.state))
    if not do_release:
        return False
    b = release_booking(late, h.ceiling_musd, int(h.booked_musd or 0))
    args = (now.timestamp(), int(late), hold_id)
    margin = 0 if late else -int(row[_MARGIN])
    await _book_end(conn, _RELEASE_WRITE, h, b, margin, args)
    if late:
        detail = f"returned {b.counted} booked at expiry"
        await event(
            conn, cfg.tz, now, "late_release", user_id=h.user_id, hold_id=hold_id, detail=detail
        )
    return True


#: Declare dead (delete the rows of) the processes other than $2 (the caller) without a
#: heartbeat after $1 (epoch seconds), or whose connection is gone — their liveness lock
#: free (this statement takes it: it is theirs no more), on the server lifetime of their
#: last beat, and no heartbeat after $3 (:mod:`budget.storage.postgres.lease`). Locked in id
#: order first, so two processes declaring at once do not deadlock, and a late
#: heartbeat either lands before (the process stays) or finds its row gone (it is
#: fenced: :class:`budget.storage.postgres.store.PgStore`). Absent counts as dead
#: everywhere (holds, operations, call leases, digest claims, intake).
DECLARE_DEAD = (
    "DELETE FROM budget_processes WHERE process_id IN (SELECT process_id"  # noqa: S608 - fixed fragments
    " FROM budget_processes WHERE process_id <> $2 AND (heartbeat_at <= $1 OR"
    " (heartbeat_at <= $3 AND locked_on = pg_postmaster_start_time() AND"
    f" pg_try_advisory_xact_lock({LIVENESS_KEY.format('process_id')})))"
    " ORDER BY process_id FOR UPDATE)"
)


async def sweep(
    conn: Any,
    cfg: LedgerConfig,
    process_id: str,
    now: datetime,
    dead_before: float,
    gone_before: float,
) -> SweepOutcome:
    """Expire the holds past their TTL and every hold and operation of a dead process
    (no heartbeat after ``dead_before``, epoch seconds; or its connection gone and no
    heartbeat after ``gone_before``: :data:`DECLARE_DEAD`): each booked at its provable
    bound, estimated (:func:`budget.policy.steps.expiry_booking`), its booked margin taken
    out of its buckets; a held hold whose margin is not in its buckets (granted by an
    older version) gets it added there. Holds are locked in id
    order, their buckets in key order (all deltas summed first), then operations.
    First of all, the ``budget_processes`` rows of dead processes are deleted
    (:data:`DECLARE_DEAD`): that is what declares them dead — a process that wakes
    finds its row gone and is fenced — and the register does not grow with every
    restart."""
    t = now.timestamp()
    await conn.execute(DECLARE_DEAD, dead_before, process_id, gone_before)
    dead = (
        "process_id <> $2 AND process_id NOT IN"
        " (SELECT process_id FROM budget_processes WHERE heartbeat_at > $3)"
    )
    rows = await conn.fetch(
        "SELECT hold_id, user_id, ceiling_musd, list_ceiling_musd, input_tokens, max_tokens,"  # noqa: S608 - fixed fragments
        f" hour_key, day_key, scopes, margin_musd, margin_booked, expires_at <= $1 OR ({dead}),"
        " month_key"
        f" FROM budget_holds WHERE state = 'held' AND (expires_at <= $1 OR ({dead})"
        " OR (margin_booked = 0 AND margin_musd > 0)) ORDER BY hold_id FOR UPDATE",
        t,
        process_id,
        dead_before,
    )
    deltas: dict[BucketKey, BucketAmounts] = {}
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
        keys = HoldKeys(hk, dk, row[12])
        for key, d in booking_deltas(load_scopes(scopes), keys, b, moved).items():
            deltas[key] = deltas.get(key, BucketAmounts()) + d
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
    booked_total = sum(e[2] for e in expired)
    tripped = await auto_kill(conn, cfg, now) if booked_total > 0 else None
    return SweepOutcome(len(expired), booked_total, tripped)
