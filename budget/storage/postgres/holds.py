"""PostgreSQL SQL of operations, requests and holds' grants: the ledger's hot path on
asyncpg (a hold's end — settle, release, expiry — is :mod:`budget.storage.postgres.ends`).

Each function is the body of ONE ``READ COMMITTED`` transaction on the connection it
is given (:meth:`budget.storage.postgres.store.PgStore.tx` retries it on a serialization failure or
a deadlock, then fails closed). No global lock: each step locks only the rows it
touches, in the one order of :mod:`budget.storage.postgres.rows` (holds, buckets by key,
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
  limit (:func:`budget.policy.rules.check_hold`'s rule). So the hot global rows stay
  locked for that statement and its commit only, with no round trip to the client in
  between. A *quick* grant (the store's default where the server allows it:
  :data:`QUICK_HOLDS_OK`) commits without waiting for the WAL flush — the bucket rows
  are free before the disk is reached, so the flushes of many holds group instead of
  queueing one by one on the global rows — and then waits for it (:data:`FLUSH`):
  ``reserve`` returns, and the provider call starts, only once the hold is on disk.
  Two or three round trips in all (one less without the read). When it does
  not fit, the locked transaction decides: BEGIN, the same read, the same writes
  returning the buckets' values, :func:`budget.policy.rules.check_hold` in Python (which
  builds the refusal), and COMMIT or — a refusal — ROLLBACK (nothing held anywhere;
  only the refusal event is written).
* Margins: ``budget_buckets.margin_musd`` is the sum of the margins of the held
  holds booked there (``budget_holds.margin_booked = 1``); a hold's settle, release
  or expiry takes its margin out. A hold an older version granted (migration 0021,
  during a rolling deploy) is not booked: its end takes nothing out, and the next
  :func:`budget.storage.postgres.ends.sweep` adds its margin to its buckets (until then a hold
  checked here does not count that margin).
* ``begin_operation`` — :mod:`budget.storage.postgres.admission`.
* Fencing: a process whose ``budget_processes`` row is gone was declared dead by
  another (:data:`budget.storage.postgres.ends.DECLARE_DEAD`): its admission read and its grant
  check the row (in the same statements, one index lookup) — no operation, no hold,
  so no provider call for work another process took over
  (:class:`~budget.errors.ProcessFenced`, raised with nothing written:
  :meth:`budget.storage.postgres.store.PgStore.tx` fences the process).

Rules from :mod:`budget.policy.rules` and :mod:`budget.policy.steps`, statements shared with
SQLite from :mod:`budget.storage.sql.statements`; times are epoch seconds of the ledger clock,
money integer µUSD.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from datetime import datetime
from typing import Any

import asyncpg

from budget.config import LedgerConfig
from budget.errors import ProcessFenced
from budget.policy.rules import (
    BucketKey,
    Scope,
    build_buckets,
    capped_providers,
    check_hold,
    dump_scopes,
    pick_kill,
    scopes_for,
)
from budget.policy.shares import with_reservations
from budget.policy.steps import (
    Booking,
    request_refusal,
    reserve_refusal,
)
from budget.policy.windows import WindowKeys
from budget.protocol import HoldTicket, OperationTicket
from budget.storage.postgres.known import KNOWN_MAX, Known, KnownLimits, cap, granted_row, reserved
from budget.storage.postgres.rows import (
    BOOK,
    KILLS_OF,
    LIMITS,
    BucketAmounts,
    book_arrays,
    booking_deltas,
    bucket_values,
    once,
    shift,
)
from budget.storage.postgres.rows import overrides_of as _overrides
from budget.storage.postgres.wallet import paid_instead
from budget.storage.sql.rows import kill_state
from budget.storage.sql.statements import (
    HOLD_INSERT,
    hold_values,
)
from budget.storage.store import (
    HoldPrice,
    PricedHold,
    RefusedStep,
    UnknownOperation,
)
from budget.types import Origin, Refusal, RefusalReason, Window

__all__ = [
    "FLUSH",
    "KNOWN_MAX",
    "QUICK_HOLDS_OK",
    "Known",
    "KnownLimits",
    "begin_request",
    "end_operation",
    "reserve",
]

#: A request counted in ONE statement committing by itself: lock the open operation ($2)
#: and read what :func:`budget.policy.steps.request_refusal` decides on (the repeat of
#: fingerprint $3, the count, the cap), insert the request ($1 id, $4 time, $5 day key)
#: and count it only when that rule lets it through (else nothing is written); returns
#: the values read (no row: the operation is not open).
_REQUEST_AT_ONCE = (
    "WITH o AS (SELECT user_id, max_requests, requests, EXISTS (SELECT 1 FROM budget_requests"
    " WHERE operation_id = $2 AND fingerprint = $3) AS repeated, plan FROM budget_operations"
    " WHERE operation_id = $2 AND ended_at IS NULL FOR UPDATE),"
    " r AS (INSERT INTO budget_requests (request_id, operation_id, fingerprint, created_at,"
    " day_key) SELECT $1::text, $2::text, $3::text, $4::timestamptz, $5::text FROM o"
    " WHERE NOT o.repeated AND o.requests < o.max_requests RETURNING 1),"
    " u AS (UPDATE budget_operations SET requests = requests + 1 WHERE operation_id = $2"
    " AND EXISTS (SELECT 1 FROM r))"
    " SELECT user_id, max_requests, requests, repeated, plan FROM o"
)
#: A digest of every runtime limit override (it changes whenever one is set or cleared).
_LIMITS_DIGEST = (
    "(SELECT md5(ARRAY(SELECT ROW(level, scope, win, limit_musd) FROM budget_limits"
    " ORDER BY level, scope, win)::text))"
)
_RESERVE_READ = (
    "SELECT o.user_id, o.origin, o.team, o.max_musd, o.committed_musd, o.chat_id, o.plan, "  # noqa: S608 - fixed fragments
    + KILLS_OF.format(user="o.user_id::text", team="COALESCE(o.team, '')")
    + ", "
    + LIMITS
    + ", "
    + _LIMITS_DIGEST
    + ", EXISTS (SELECT 1 FROM budget_processes p WHERE p.process_id = o.process_id)"
    " FROM budget_operations o WHERE o.operation_id = $1 AND o.ended_at IS NULL"
)
#: Is this process ($1) registered (not declared dead by another)?
_REGISTERED = "SELECT EXISTS (SELECT 1 FROM budget_processes WHERE process_id = $1)"


#: A granted hold whose margin this store books in its buckets (``margin_booked``).
_HOLD_INSERT = once(
    once(HOLD_INSERT, "month_key)", "month_key, margin_booked)"), "?,?,?)", "?,?,?,1)"
)
#: A hold's grant in ONE statement: add the ceiling to held and the margin to the
#: margins of every bucket of the hold ($1..$8, :data:`budget.storage.postgres.rows.BOOK`: created
#: if missing, locked in key order — first, the lock order), then charge the
#: operation if its cap allows and its process is registered ($9 ceiling, $10
#: expiry, $29 the hold's process — else it was declared dead: fenced; after the
#: buckets: the subquery on ``b`` runs first), insert the hold ($11..$32); returns whether the
#: operation was charged and the buckets' new values. The transaction's COMMIT
#: follows it at once (or a ROLLBACK, if the policy refuses).
_GRANT_WRITES = (
    "WITH b AS (" + BOOK + "), o AS (UPDATE budget_operations"  # noqa: S608 - fixed fragments
    " SET committed_musd = committed_musd + $9, expires_at = GREATEST(expires_at, $10)"
    " WHERE operation_id = $12 AND ended_at IS NULL AND committed_musd + $9 <= max_musd"
    " AND EXISTS (SELECT 1 FROM budget_processes WHERE process_id = $29)"
    " AND (SELECT COUNT(*) FROM b) >= 0 RETURNING 1), h AS (" + shift(_HOLD_INSERT, 10) + ")"
)
_GRANT = (
    _GRANT_WRITES  # noqa: S608 - fixed fragments
    + " SELECT (SELECT COUNT(*) FROM o), ARRAY(SELECT ROW(level, scope, win,"
    " wkey, settled_musd, held_musd, late_musd, margin_musd) FROM b)"
)
#: The same grant as a transaction of its own (autocommit: its commit, with the
#: flush, follows it in the server, no round trip under the bucket locks), committed
#: only when it fits: $33 is each bucket's limit (key order, NULL = none) and the
#: statement fails with ``CardinalityViolationError`` (a scalar subquery of 2 rows:
#: nothing written) when the operation was not charged or a bucket's new
#: settled + held + margins passes its limit — :func:`budget.policy.rules.check_hold`'s
#: rule (ceiling + margin ≤ limit − settled − held − other margins) on the values after.
_GRANT_AT_ONCE_SQL = (
    _GRANT_WRITES  # noqa: S608 - fixed fragments
    + " SELECT (SELECT 1 FROM generate_series(1, CASE WHEN"
    " (SELECT COUNT(*) FROM o) = 1 AND NOT EXISTS (SELECT 1 FROM b JOIN unnest($1::text[],"
    " $2::text[], $3::text[], $4::text[], $33::bigint[]) AS l(level, scope, win, wkey, lim)"
    " USING (level, scope, win, wkey) WHERE b.settled_musd + b.held_musd + b.margin_musd"
    " > l.lim) THEN 1 ELSE 2 END))"
)
#: The same grant without the read before it, from what this process knows
#: (:class:`Known`): it also fails (nothing written) when a kill switch of the user
#: ($35, as text), their team ($36, or '') or everyone is tripped, or when the runtime
#: limits' digest is no longer $34 (the limits the caps and scopes came from).
_GRANT_KNOWN_SQL = once(
    _GRANT_AT_ONCE_SQL,
    " > l.lim) THEN 1",
    " > l.lim) AND NOT EXISTS (SELECT 1 FROM budget_kill WHERE killed = 1 AND (scope_kind"  # noqa: S608 - fixed fragments
    " = 'global' OR (scope_kind = 'user' AND scope = $35) OR (scope_kind = 'team' AND"
    f" scope = $36))) AND {_LIMITS_DIGEST} = $34 THEN 1",
)
#: A quick grant's commit does not wait for the WAL flush: its statement ends with this
#: (``synchronous_commit = off`` for its transaction only), and :data:`FLUSH` follows.
_QUICK = ", set_config('synchronous_commit', 'off', true)"
#: :data:`_GRANT_AT_ONCE_SQL` / :data:`_GRANT_KNOWN_SQL`, by ``quick`` (:func:`reserve`).
_GRANT_AT_ONCE = {False: _GRANT_AT_ONCE_SQL, True: _GRANT_AT_ONCE_SQL + _QUICK}
_GRANT_KNOWN = {False: _GRANT_KNOWN_SQL, True: _GRANT_KNOWN_SQL + _QUICK}
#: Wait until every WAL record written so far — a quick grant's commit among them — is
#: on disk (PostgreSQL 17+: a non-transactional logical message, flushed; no
#: transaction, no row, no lock). The commits after a quick grant's, of any session,
#: are later in the WAL, so none of them is durable before it.
FLUSH = "SELECT pg_logical_emit_message(false, 'kopek-hold', '', true)"
#: Whether the server allows quick grants: :data:`FLUSH` exists (17+), and no
#: synchronous standby is configured (a commit would wait for it; the flush does not).
QUICK_HOLDS_OK = (
    "SELECT current_setting('server_version_num')::int >= 170000"
    " AND current_setting('synchronous_standby_names') = ''"
)


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
    or too many. ``conn`` is outside any transaction: one statement committing by
    itself (:data:`_REQUEST_AT_ONCE`), which writes nothing when it refuses."""
    req_id = uuid.uuid4().hex
    day_key = cfg.keys(now).day_key
    row = await conn.fetchrow(
        _REQUEST_AT_ONCE, req_id, operation_id, fingerprint, now.timestamp(), day_key
    )
    if row is None:
        raise UnknownOperation(operation_id)
    user_id, max_requests, n, repeated, plan = row
    refusal = request_refusal(repeated, n, max_requests)
    if refusal is not None:
        raise RefusedStep(refusal, user_id, plan)
    return req_id


async def reserve(
    conn: Any,
    cfg: LedgerConfig,
    process_id: str,
    now: datetime,
    hold: PricedHold,
    known: Known | None = None,
    quick: bool = False,
) -> HoldTicket:
    """Grant a hold on every level/window at once, or refuse with nothing held
    (module docstring). ``conn`` is outside any transaction: the grant is tried as
    one statement committing by itself (:data:`_GRANT_AT_ONCE`); when that does not
    fit, the locked transaction decides (and builds the refusal). ``known``: what
    this process knows (:class:`Known`): with the operation and the limits known,
    no read before the grant (:data:`_GRANT_KNOWN`); the new hold's row is kept
    there for its settle. ``quick``: the one-statement grant commits without waiting
    for the disk, then :data:`FLUSH` waits for it (module docstring); the locked
    transaction's COMMIT waits for it as before."""

    async def grant(wallet: bool) -> tuple[HoldTicket, tuple[Any, ...]]:
        try:
            return await _reserve(
                conn,
                cfg,
                process_id,
                now,
                hold,
                at_once=True,
                known=known,
                wallet=wallet,
                quick=quick,
            )
        except _NotAtOnce:
            async with conn.transaction():
                return await _reserve(
                    conn, cfg, process_id, now, hold, at_once=False, known=known, wallet=wallet
                )

    try:
        ticket, row = await grant(False)
    except RefusedStep as refused:  # the user's wallet may pay instead
        ticket, row = await paid_instead(conn, refused, lambda: grant(True))
    if known is not None:
        known.keep(known.granted, ticket.hold_id, row)
    return ticket


class _NotAtOnce(Exception):
    """The one-statement grant did not fit (nothing written): decide under locks."""


async def _reserve(
    conn: Any,
    cfg: LedgerConfig,
    process_id: str,
    now: datetime,
    hold: PricedHold,
    *,
    at_once: bool,
    known: Known | None,
    wallet: bool = False,
    quick: bool = False,
) -> tuple[HoldTicket, tuple[Any, ...]]:
    """One try of :func:`reserve`. ``at_once``: the autocommit grant (raises
    :class:`_NotAtOnce` when it does not fit), without a read when ``known`` knows the
    operation and the limits; else the body of a transaction that checks in Python
    after the locks. Returns the ticket and the hold's row as :data:`_HOLD_ROW` selects
    it."""
    price = hold.price
    mine = None if known is None or not at_once else known.ops.get(hold.operation_id)
    cached = None if known is None or mine is None else known.limits
    if mine is not None and cached is not None:
        owner, limits = mine, cached.overrides
    else:
        owner, limits = await _read_operation(conn, process_id, hold, known)
    capped = capped_providers(cfg, limits)
    scopes = scopes_for(
        *owner.payers, hold.provider, capped, chat_id=owner.chat_id, plan=owner.plan, wallet=wallet
    )
    keys = cfg.keys(now)
    deltas: dict[BucketKey, BucketAmounts] = {}
    if price.ceiling_musd + price.margin_musd > 0:
        grant = Booking(price.ceiling_musd, 0, 0, 0, price.ceiling_musd)
        deltas = booking_deltas(scopes, keys.hold, grant, price.margin_musd)
    hold_id = uuid.uuid4().hex
    scopes_json = dump_scopes(scopes)
    values = hold_values(cfg, process_id, now, hold_id, hold, owner, keys, scopes_json)
    grant_args = [*book_arrays(deltas), price.ceiling_musd, now.timestamp() + cfg.hold_ttl_s]
    grant_args += values
    ticket = HoldTicket(
        hold_id, hold.provider, hold.model, price.ceiling_musd, price.list_ceiling_musd, now
    )
    hold_row = granted_row(hold, owner, now, keys, scopes_json)
    held_back = await reserved(conn, cfg, limits, keys, owner.team)
    if at_once:
        caps = [cap(cfg, limits, k, owner.plan, held_back) for k in sorted(deltas)]
        try:
            if cached is None:
                await conn.fetchval(_GRANT_AT_ONCE[quick], *grant_args, caps)
            else:
                user, team = str(owner.user_id), owner.team or ""
                sql = _GRANT_KNOWN[quick]
                await conn.fetchval(sql, *grant_args, caps, cached.digest, user, team)
        except asyncpg.exceptions.CardinalityViolationError:
            raise _NotAtOnce() from None
        if quick:  # on disk before the provider call: the flush, the bucket rows free
            await conn.execute(FLUSH)
        return ticket, hold_row
    charged, after = await conn.fetchrow(_GRANT, *grant_args)
    if not charged:  # another step of this operation took the cap, or ended it
        raise RefusedStep(
            Refusal(RefusalReason.OPERATION_CAP, note="cost"), owner.user_id, owner.plan
        )
    if price.ceiling_musd + price.margin_musd > 0:
        _check_after(cfg, limits, scopes, keys, after, price, owner, held_back)
    return ticket, hold_row


async def _read_operation(
    conn: Any, process_id: str, hold: PricedHold, known: Known | None
) -> tuple[OperationTicket, dict[tuple[str, str, str], int | None]]:
    """Read the hold's operation (its owner), its kill switches and the
    runtime limits (:data:`_RESERVE_READ`, no lock); refuse early (a kill, the cost
    cap); remember what was read in ``known``.

    Raises:
        ProcessFenced: this process was declared dead (its operations ended by a
            takeover, or its row gone).
        UnknownOperation: the operation ended.
        RefusedStep: a kill switch or the operation's cost cap.
    """
    row = await conn.fetchrow(_RESERVE_READ, hold.operation_id)
    if row is None:  # ended: by a takeover, if this process was declared dead
        if not await conn.fetchval(_REGISTERED, process_id):
            raise ProcessFenced()
        raise UnknownOperation(hold.operation_id)
    user_id, origin, team, max_musd, committed, chat_id, plan, kills, limit_rows, digest, alive = (
        row
    )
    if not alive:
        raise ProcessFenced()
    early = reserve_refusal(
        pick_kill(kill_state(k) for k in kills), committed, hold.price.ceiling_musd, max_musd
    )
    if early is not None:
        raise RefusedStep(early, user_id, plan)
    limits = _overrides(limit_rows)
    owner = OperationTicket(hold.operation_id, user_id, Origin(origin), team, chat_id, plan)
    if known is not None:
        known.limits = KnownLimits(digest, limits)
        known.keep(known.ops, hold.operation_id, owner)
    return owner, limits


def _check_after(
    cfg: LedgerConfig,
    limits: dict[tuple[str, str, str], int | None],
    scopes: list[Scope],
    keys: WindowKeys,
    after: Any,
    price: HoldPrice,
    owner: OperationTicket,
    reserved: Mapping[Window, int],
) -> None:
    """:func:`budget.policy.rules.check_hold` on the buckets as they were before this
    hold (the locked grant returned them after it), the other holds' margins counted
    as held, the global windows less what other teams' guarantees reserve.

    Raises:
        RefusedStep: the hold does not fit.
    """
    ceiling, margin = price.ceiling_musd, price.margin_musd
    before = {
        k: (a.settled, a.held - ceiling + a.margin - margin, a.late)
        for k, a in bucket_values(after).items()
    }
    found = with_reservations(build_buckets(cfg, limits, scopes, keys, before), reserved)
    refusal = check_hold(found, ceiling + margin)
    if refusal is not None:
        raise RefusedStep(refusal, owner.user_id, owner.plan)
