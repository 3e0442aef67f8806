"""The portable SQL of operations, requests and holds (each function inside one
transaction): the hot path of the SQLite store, run by
:class:`budget.storage.base.LedgerStore` on the writer thread with the transaction's
cursor (PostgreSQL has its own: :mod:`budget.storage.postgres.holds`, but runs
:func:`operation_booked_musd`, :func:`remaining_musd` and :func:`plan_of` from here).
Rules from :mod:`budget.policy.rules`; times stored as epoch seconds
from the ledger's clock; money integer µUSD.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from budget.config import LedgerConfig
from budget.errors import UnknownHold
from budget.policy.rules import (
    Bucket,
    HoldState,
    Overrides,
    Scope,
    capped_providers,
    check_hold,
    dump_scopes,
    load_scopes,
    release_transition,
    scopes_for,
    utc,
)
from budget.policy.shares import guarantees, reserved_for_others, with_reservations
from budget.policy.steps import (
    SettlePlan,
    admission_caps,
    admission_refusal,
    expiry_booking,
    release_booking,
    request_refusal,
    reserve_refusal,
    settle_plan,
)
from budget.policy.windows import HoldKeys, WindowKeys
from budget.protocol import HoldTicket, OperationTicket
from budget.storage.sql import wallet as wallet_sql
from budget.storage.sql.admin import record_calibration, record_message
from budget.storage.sql.rows import (
    auto_kill,
    book,
    buckets,
    event,
    kill_of,
    overrides,
    refuse,
    team_of,
    team_usage,
    user_plan,
)
from budget.storage.sql.statements import (
    HOLD_EXPIRE,
    HOLD_INSERT,
    HOLD_RELEASE,
    HOLD_ROW,
    HOLD_SETTLE,
    OPEN_COUNT,
    OPERATION_COMMIT,
    OPERATION_INSERT,
    RATE_COUNT,
    REQUEST_INSERT,
    HoldRow,
    hold_values,
    operation_row,
    settle_events,
    settled_row,
)
from budget.storage.store import (
    Admission,
    Cursor,
    PricedHold,
    Pricer,
    RefusedStep,
    SettleOutcome,
    SettleRequest,
    SweepOutcome,
    UnknownOperation,
    UsageOf,
)
from budget.types import Origin, Refusal, Usage

__all__ = [
    "admit",
    "begin_operation",
    "begin_request",
    "end_operation",
    "operation_booked_musd",
    "plan_of",
    "release",
    "remaining_musd",
    "reserve",
    "settle",
    "sweep",
]


def _open_op(cur: Cursor, operation_id: str) -> tuple[Any, ...]:
    """``(user_id, origin, team, max_musd, max_requests, requests, committed_musd,
    expires_at, chat_id, plan)`` of an open operation."""
    cur.execute(
        "SELECT user_id, origin, team, max_musd, max_requests, requests, committed_musd,"
        " expires_at, chat_id, plan FROM budget_operations"
        " WHERE operation_id = ? AND ended_at IS NULL",
        (operation_id,),
    )
    row = cur.fetchone()
    if row is None:
        raise UnknownOperation(operation_id)
    return tuple(row)


def _scopes(
    cfg: LedgerConfig,
    limits: Overrides,
    op: tuple[Any, ...],
    provider: str,
    *,
    wallet: bool = False,
) -> list[Scope]:
    """The levels a hold at ``provider`` in the operation ``op`` (:func:`_open_op`) is
    booked on (``wallet``: paid by the user's wallet instead of their allowance)."""
    user_id, team, chat_id, plan = op[0], op[2], op[8], op[9]
    capped = capped_providers(cfg, limits)
    return scopes_for(user_id, team, provider, capped, chat_id=chat_id, plan=plan, wallet=wallet)


def _shared_buckets(
    cur: Cursor,
    cfg: LedgerConfig,
    limits: Overrides,
    scopes: list[Scope],
    keys: WindowKeys,
    team: str | None,
) -> list[Bucket]:
    """The buckets of ``scopes`` now, outstanding margins counted as held, the global
    windows' limits less what other teams' guarantees still reserve
    (:mod:`budget.policy.shares`)."""
    found = buckets(cur, cfg, scopes, keys, limits, margins=True)
    granted = guarantees(limits, cfg)
    if not granted:
        return found
    reserved = reserved_for_others(granted, team_usage(cur, granted, keys), team)
    return with_reservations(found, reserved)


def begin_operation(
    cur: Cursor, cfg: LedgerConfig, process_id: str, now: datetime, admission: Admission
) -> OperationTicket:
    """Admit an operation (kill, in-flight, rate) and take an in-flight slot."""
    t = now.timestamp()
    user_id = admission.user_id
    team = team_of(cur, user_id)
    plan = user_plan(cur, cfg, user_id, now)
    ks = kill_of(cur, user_id, team)
    cur.execute(OPEN_COUNT, (user_id, t))
    open_ops = int(cur.fetchone()[0])
    cur.execute(RATE_COUNT, (user_id, t - 60.0))
    count, oldest = cur.fetchone()
    inflight, per_minute = admission_caps(cfg, plan)
    refusal = admission_refusal(ks, open_ops, inflight, count, per_minute, utc(oldest))
    if refusal is not None:
        raise refuse(cur, cfg.tz, now, refusal, user_id, plan)
    cur.execute(OPERATION_INSERT, operation_row(cfg, process_id, now, admission, team, plan))
    return OperationTicket(
        admission.operation_id, user_id, admission.origin, team, admission.chat_id, plan
    )


def end_operation(cur: Cursor, now: datetime, operation_id: str) -> None:
    """Free the operation's slot (idempotent)."""
    cur.execute(
        "UPDATE budget_operations SET ended_at = ? WHERE operation_id = ? AND ended_at IS NULL",
        (now.timestamp(), operation_id),
    )


def operation_booked_musd(cur: Cursor, operation_id: str) -> int:
    """``committed_musd`` of an operation (ended or not)."""
    cur.execute(
        "SELECT committed_musd FROM budget_operations WHERE operation_id = ?", (operation_id,)
    )
    row = cur.fetchone()
    if row is None:
        raise UnknownOperation(operation_id)
    return int(row[0] or 0)


def begin_request(
    cur: Cursor,
    cfg: LedgerConfig,
    now: datetime,
    operation_id: str,
    fingerprint: str,
    req_id: str | None = None,
) -> str:
    """Count a request in the operation; refuse a repeat fingerprint or too many
    (``req_id``: its id, chosen by the caller; ``None``: a new one)."""
    user_id, _, _, _, max_requests, n, _, _, _, plan = _open_op(cur, operation_id)
    cur.execute(
        "SELECT 1 FROM budget_requests WHERE operation_id = ? AND fingerprint = ?",
        (operation_id, fingerprint),
    )
    refusal = request_refusal(cur.fetchone() is not None, n, max_requests)
    if refusal is not None:
        raise refuse(cur, cfg.tz, now, refusal, user_id, plan)
    req_id = req_id or uuid.uuid4().hex
    day_key = cfg.keys(now).day_key
    cur.execute(REQUEST_INSERT, (req_id, operation_id, fingerprint, now.timestamp(), day_key))
    cur.execute(
        "UPDATE budget_operations SET requests = requests + 1 WHERE operation_id = ?",
        (operation_id,),
    )
    return req_id


def reserve(
    cur: Cursor, cfg: LedgerConfig, process_id: str, now: datetime, hold: PricedHold
) -> HoldTicket:
    """Grant a hold on every level/window at once, or refuse with nothing held."""
    t = now.timestamp()
    price = hold.price
    op = _open_op(cur, hold.operation_id)
    user_id, origin, team, max_musd, _, _, committed, op_exp, chat_id, plan = op
    early = reserve_refusal(kill_of(cur, user_id, team), committed, price.ceiling_musd, max_musd)
    if early is not None:
        raise refuse(cur, cfg.tz, now, early, user_id, plan)
    limits = overrides(cur)
    scopes = _scopes(cfg, limits, op, hold.provider)
    keys = cfg.keys(now)
    asked = price.ceiling_musd + price.margin_musd
    if asked > 0:
        found = _shared_buckets(cur, cfg, limits, scopes, keys, team)
        refusal_or_none = check_hold(found, asked)
        if refusal_or_none is not None:
            instead = _scopes(cfg, limits, op, hold.provider, wallet=True)
            paid = wallet_sql.instead(
                cur,
                user_id,
                refusal_or_none,
                instead,
                asked,
                lambda sc: _shared_buckets(cur, cfg, limits, sc, keys, team),
            )
            if isinstance(paid, Refusal):
                raise refuse(cur, cfg.tz, now, paid, user_id, plan)
            scopes = paid
    hold_id = uuid.uuid4().hex
    expires = t + cfg.hold_ttl_s
    book(cur, scopes, keys.hold, held=price.ceiling_musd)
    owner = OperationTicket(hold.operation_id, user_id, Origin(origin), team, chat_id, plan)
    cur.execute(
        HOLD_INSERT,
        hold_values(cfg, process_id, now, hold_id, hold, owner, keys, dump_scopes(scopes)),
    )
    cur.execute(
        "UPDATE budget_operations SET committed_musd = committed_musd + ?,"
        " expires_at = ? WHERE operation_id = ?",
        (price.ceiling_musd, max(op_exp, expires), hold.operation_id),
    )
    return HoldTicket(
        hold_id, hold.provider, hold.model, price.ceiling_musd, price.list_ceiling_musd, now
    )


def admit(
    cur: Cursor,
    cfg: LedgerConfig,
    process_id: str,
    now: datetime,
    admission: Admission,
    hold: PricedHold | None,
) -> HoldTicket | RefusedStep | None:
    """A deferred admission in one step (``docs/decisions/011-sqlite-single-writer.md``):
    :func:`begin_operation` with the caller's operation id, then its pending
    :func:`begin_request` (if any), then ``hold`` (in that operation), if any.

    Returns:
        the granted hold (``None`` when no ``hold`` was asked); or the refusal of the
        request or of the hold, *returned* (its event written): the operation and the
        request exist from then on, so the caller must know the step went that far.

    Raises:
        RefusedStep: the admission itself was refused (messages, kill, in-flight,
            rate): no operation was created (a message counted before a kill, in-flight
            or rate refusal stays counted, as when it was counted on its own).
    """
    if admission.count_message:
        record_message(cur, cfg, now, admission.user_id)
    begin_operation(cur, cfg, process_id, now, admission)
    try:
        if admission.request_id is not None and admission.fingerprint is not None:
            begin_request(
                cur,
                cfg,
                now,
                admission.operation_id,
                admission.fingerprint,
                req_id=admission.request_id,
            )
        if hold is None:
            return None
        return reserve(cur, cfg, process_id, now, hold)
    except RefusedStep as refused:
        return refused


def remaining_musd(
    cur: Cursor, cfg: LedgerConfig, now: datetime, operation_id: str, provider: str
) -> int | None:
    """Smallest remaining amount over the levels a hold at ``provider`` would touch."""
    op = _open_op(cur, operation_id)
    max_musd, committed = op[3], op[6]
    limits = overrides(cur)
    scopes = _scopes(cfg, limits, op, provider)
    found = _shared_buckets(cur, cfg, limits, scopes, cfg.keys(now), op[2])
    remaining = [b.remaining_musd for b in found if b.remaining_musd is not None]
    if wallet_sql.exists(cur, op[0]):  # a hold fits when the allowance or the wallet pays
        scopes = _scopes(cfg, limits, op, provider, wallet=True)
        paid = _shared_buckets(cur, cfg, limits, scopes, cfg.keys(now), op[2])
        by_wallet = [b.remaining_musd for b in paid if b.remaining_musd is not None]
        remaining = [max(min(remaining, default=max_musd), min(by_wallet, default=max_musd))]
    remaining.append(max_musd - committed)
    return max(0, min(remaining))


def _hold_row(cur: Cursor, hold_id: str) -> tuple[Any, ...]:
    cur.execute(HOLD_ROW, (hold_id,))
    row = cur.fetchone()
    if row is None:
        raise UnknownHold(hold_id)
    return tuple(row)


def settle(cur: Cursor, cfg: LedgerConfig, now: datetime, request: SettleRequest) -> SettleOutcome:
    """Book the actual cost of a hold (idempotent).

    A held hold: − ceiling from held, + actual to settled. An expired hold (its
    ceiling already booked as settled by the sweep): settled is corrected by
    actual − booked, and the actual is added to ``late_musd`` (a late settle).
    A settled or released hold: nothing; returns the first actual (0 if released).
    Either way the request's ``end_operation`` and ``calibration`` are written in the
    same step (``docs/decisions/132-two-ledger-steps.md``).
    """
    hold_id = request.hold_id
    h = HoldRow._make(_hold_row(cur, hold_id))
    if request.end_operation is not None:
        end_operation(cur, now, request.end_operation)
    sample = request.calibration
    if sample is not None:
        record_calibration(
            cur, now, sample.provider, sample.model, sample.ratio_ppm, sample.samples
        )
    plan = plan_of(h, request.usage, request.pricer)
    if plan is None:
        return SettleOutcome(int(h.booked_musd or 0), False, None)
    b = plan.booking
    scopes = load_scopes(h.scopes)
    book(cur, scopes, h.keys, held=b.held, settled=b.settled, late=b.late)
    cur.execute(
        HOLD_SETTLE,
        settled_row(now, hold_id, plan, request.estimated),
    )
    cur.execute(OPERATION_COMMIT, (b.committed, h.operation_id))
    for kind, detail in settle_events(plan.late, b, plan.actual_musd, h.ceiling_musd):
        event(cur, cfg.tz, now, kind, user_id=h.user_id, hold_id=hold_id, detail=detail)
    tripped = auto_kill(cur, cfg, now) if b.grew else None
    return SettleOutcome(plan.actual_musd, True, tripped)


def plan_of(h: HoldRow, usage: Usage | UsageOf, pricer: Pricer) -> SettlePlan | None:
    """:func:`budget.policy.steps.settle_plan` of a hold row (priced at its grant time)."""
    granted_at = utc(h.granted_at)
    assert granted_at is not None
    return settle_plan(
        HoldState(h.state),
        h.input_tokens,
        h.max_tokens,
        h.ceiling_musd,
        int(h.booked_musd or 0),
        usage,
        lambda u: pricer(h.provider, h.model, u, granted_at),
    )


def release(cur: Cursor, cfg: LedgerConfig, now: datetime, hold_id: str) -> bool:
    """Return a hold that spent nothing. ``False`` = no-op (already settled/released).

    A held hold: − ceiling from held. An expired hold (its ceiling booked as
    settled by the sweep): the booked ceiling is taken back out of settled
    spend, recorded as a ``late_release`` event.
    """
    h = HoldRow._make(_hold_row(cur, hold_id))
    state, op_id, user_id, ceiling = h.state, h.operation_id, h.user_id, h.ceiling_musd
    do_release, late = release_transition(HoldState(state))
    if not do_release:
        return False
    b = release_booking(late, ceiling, int(h.booked_musd or 0))
    book(cur, load_scopes(h.scopes), h.keys, held=b.held, settled=b.settled)
    cur.execute(HOLD_RELEASE, (now.timestamp(), int(late), hold_id))
    cur.execute(OPERATION_COMMIT, (b.committed, op_id))
    if late:
        detail = f"returned {b.counted} booked at expiry"
        event(cur, cfg.tz, now, "late_release", user_id=user_id, hold_id=hold_id, detail=detail)
    return True


def sweep(
    cur: Cursor,
    cfg: LedgerConfig,
    process_id: str,
    now: datetime,
    previous_processes: bool,
    dead_before: float | None = None,
) -> SweepOutcome:
    """Expire holds past their TTL (and, with ``previous_processes``, every hold and
    operation of another process), each booked as settled at its provable bound
    (ceiling + margin), flagged estimated, in the windows fixed at its grant.

    ``dead_before`` (epoch seconds; several processes on one database): "another
    process" means one without a heartbeat in ``budget_processes`` after that time —
    a live process's holds are never swept.
    """
    t = now.timestamp()
    others = "process_id <> ?"
    others_args: tuple[object, ...] = (process_id,)
    if dead_before is not None:
        previous_processes = True
        others = (
            "process_id <> ? AND process_id NOT IN"
            " (SELECT process_id FROM budget_processes WHERE heartbeat_at > ?)"
        )
        others_args = (process_id, dead_before)
    cols = (
        "SELECT hold_id, operation_id, user_id, ceiling_musd, list_ceiling_musd,"
        " input_tokens, max_tokens, hour_key, day_key, scopes, margin_musd, month_key"
        " FROM budget_holds"
    )
    if previous_processes:
        cur.execute(
            f"{cols} WHERE state = 'held' AND (expires_at <= ? OR {others})", (t, *others_args)
        )
    else:
        cur.execute(f"{cols} WHERE state = 'held' AND expires_at <= ?", (t,))
    rows = cur.fetchall()
    booked_total = 0
    for (
        hold_id,
        _op_id,
        user_id,
        ceiling,
        list_ceiling,
        in_tok,
        max_tok,
        hour_key,
        day_key,
        scopes_json,
        margin,
        month_key,
    ) in rows:
        # booked at its provable bound (ceiling + margin): a late settle can
        # then only correct it downwards, never past what was admitted
        b = expiry_booking(int(ceiling), int(margin))
        booked = b.settled
        keys = HoldKeys(hour_key, day_key, month_key)
        book(cur, load_scopes(scopes_json), keys, held=b.held, settled=booked)
        # the operation's committed money keeps the ceiling: it now counts as spent
        cur.execute(HOLD_EXPIRE, (t, booked, list_ceiling, in_tok, max_tok, hold_id))
        detail = f"booked {booked} at ceiling, estimated"
        event(cur, cfg.tz, now, "expiry", user_id=user_id, hold_id=hold_id, detail=detail)
        booked_total += booked
    if previous_processes:
        cur.execute(
            f"UPDATE budget_operations SET ended_at = ? WHERE ended_at IS NULL AND {others}",  # noqa: S608 - fixed fragments
            (t, *others_args),
        )
    cur.execute(
        "UPDATE budget_operations SET ended_at = expires_at WHERE ended_at IS NULL"
        " AND expires_at <= ?",
        (t,),
    )
    tripped = auto_kill(cur, cfg, now) if booked_total > 0 else None
    return SweepOutcome(len(rows), booked_total, tripped)
