"""SQLite SQL of operations, requests and holds (each function inside one transaction).

Called by :class:`budget.sqlite_store.SqliteStore` on its writer thread with the
transaction's cursor. Rules from :mod:`budget.policy`; times stored as epoch seconds
from the ledger's clock; money integer µUSD.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import datetime
from typing import Any

from budget.config import LedgerConfig
from budget.errors import UnknownHold
from budget.policy import (
    HoldState,
    check_hold,
    dump_scopes,
    kill_refusal,
    load_scopes,
    provider_caps,
    rate_refusal,
    release_transition,
    scopes_for,
    settle_transition,
    utc,
)
from budget.protocol import HoldTicket, OperationTicket
from budget.sqlite_rows import auto_kill, book, buckets, event, kill_of, overrides, refuse, team_of
from budget.store import Cursor, Pricer, SettleOutcome, SweepOutcome, UnknownOperation
from budget.types import Origin, Refusal, RefusalReason, Usage
from budget.windows import window_keys

__all__ = [
    "begin_operation",
    "begin_request",
    "end_operation",
    "operation_booked_musd",
    "release",
    "remaining_musd",
    "reserve",
    "settle",
    "sweep",
]


def _open_op(cur: Cursor, operation_id: str) -> tuple[Any, ...]:
    cur.execute(
        "SELECT user_id, origin, team, max_musd, max_requests, requests, committed_musd,"
        " expires_at FROM budget_operations WHERE operation_id = ? AND ended_at IS NULL",
        (operation_id,),
    )
    row = cur.fetchone()
    if row is None:
        raise UnknownOperation(operation_id)
    return tuple(row)


def begin_operation(
    cur: Cursor,
    cfg: LedgerConfig,
    process_id: str,
    now: datetime,
    user_id: int,
    origin: Origin,
    max_musd: int,
    max_requests: int,
) -> OperationTicket:
    """Admit an operation (kill, in-flight, rate) and take an in-flight slot."""
    t = now.timestamp()
    team = team_of(cur, user_id)
    ks = kill_of(cur, user_id, team)
    if ks is not None:
        raise refuse(cur, cfg.tz, now, kill_refusal(ks), user_id)
    cur.execute(
        "SELECT COUNT(*) FROM budget_operations WHERE user_id = ? AND ended_at IS NULL"
        " AND expires_at > ?",
        (user_id, t),
    )
    if cur.fetchone()[0] >= cfg.user_max_inflight:
        raise refuse(cur, cfg.tz, now, Refusal(RefusalReason.INFLIGHT), user_id)
    cur.execute(
        "SELECT COUNT(*), MIN(started_at) FROM budget_operations WHERE user_id = ?"
        " AND started_at > ?",
        (user_id, t - 60.0),
    )
    count, oldest = cur.fetchone()
    if count >= cfg.user_max_per_minute:
        oldest_at = utc(oldest)
        assert oldest_at is not None
        raise refuse(cur, cfg.tz, now, rate_refusal(oldest_at), user_id)
    op_id = uuid.uuid4().hex
    cur.execute(
        "INSERT INTO budget_operations (operation_id, user_id, origin, team, started_at,"
        " expires_at, ended_at, max_musd, max_requests, requests, committed_musd,"
        " day_key, process_id) VALUES (?,?,?,?,?,?,NULL,?,?,0,0,?,?)",
        (
            op_id,
            user_id,
            origin.value,
            team,
            t,
            t + cfg.hold_ttl_s,
            max_musd,
            max_requests,
            window_keys(now, cfg.tz).day_key,
            process_id,
        ),
    )
    return OperationTicket(op_id, user_id, origin, team)


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
    cur: Cursor, cfg: LedgerConfig, now: datetime, operation_id: str, fingerprint: str
) -> str:
    """Count a request in the operation; refuse a repeat fingerprint or too many."""
    user_id, _, _, _, max_requests, n, _, _ = _open_op(cur, operation_id)
    cur.execute(
        "SELECT 1 FROM budget_requests WHERE operation_id = ? AND fingerprint = ?",
        (operation_id, fingerprint),
    )
    if cur.fetchone() is not None:
        raise refuse(cur, cfg.tz, now, Refusal(RefusalReason.LOOP), user_id)
    if n >= max_requests:
        refusal = Refusal(RefusalReason.OPERATION_CAP, note="requests")
        raise refuse(cur, cfg.tz, now, refusal, user_id)
    req_id = uuid.uuid4().hex
    cur.execute(
        "INSERT INTO budget_requests (request_id, operation_id, fingerprint, created_at,"
        " day_key) VALUES (?,?,?,?,?)",
        (req_id, operation_id, fingerprint, now.timestamp(), window_keys(now, cfg.tz).day_key),
    )
    cur.execute(
        "UPDATE budget_operations SET requests = requests + 1 WHERE operation_id = ?",
        (operation_id,),
    )
    return req_id


def reserve(
    cur: Cursor,
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
) -> HoldTicket:
    """Grant a hold on every level/window at once, or refuse with nothing held."""
    t = now.timestamp()
    user_id, origin, team, max_musd, _, _, committed, op_exp = _open_op(cur, operation_id)
    ks = kill_of(cur, user_id, team)
    if ks is not None:
        raise refuse(cur, cfg.tz, now, kill_refusal(ks), user_id)
    if committed + ceiling_musd > max_musd:
        refusal = Refusal(RefusalReason.OPERATION_CAP, note="cost")
        raise refuse(cur, cfg.tz, now, refusal, user_id)
    limits = overrides(cur)
    scopes = scopes_for(user_id, team, provider, provider_caps(cfg, limits))
    keys = window_keys(now, cfg.tz)
    if ceiling_musd + margin_musd > 0:
        refusal_or_none = check_hold(
            buckets(cur, cfg, scopes, keys, limits, margins=True), ceiling_musd + margin_musd
        )
        if refusal_or_none is not None:
            raise refuse(cur, cfg.tz, now, refusal_or_none, user_id)
    hold_id = uuid.uuid4().hex
    expires = t + cfg.hold_ttl_s
    book(cur, scopes, keys.hour_key, keys.day_key, held=ceiling_musd)
    cur.execute(
        "INSERT INTO budget_holds (hold_id, operation_id, request_id, user_id, team,"
        " origin, provider, model, input_tokens, max_tokens, ceiling_musd,"
        " list_ceiling_musd, state, granted_at, expires_at, tz, hour_key, day_key,"
        " scopes, process_id, estimated, late, price_version, margin_musd)"
        " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,'held',?,?,?,?,?,?,?,0,0,?,?)",
        (
            hold_id,
            operation_id,
            request_id,
            user_id,
            team,
            origin,
            provider,
            model,
            input_tokens,
            max_tokens,
            ceiling_musd,
            list_ceiling_musd,
            t,
            expires,
            cfg.tz,
            keys.hour_key,
            keys.day_key,
            dump_scopes(scopes),
            process_id,
            price_version,
            margin_musd,
        ),
    )
    cur.execute(
        "UPDATE budget_operations SET committed_musd = committed_musd + ?,"
        " expires_at = ? WHERE operation_id = ?",
        (ceiling_musd, max(op_exp, expires), operation_id),
    )
    return HoldTicket(hold_id, provider, model, ceiling_musd, list_ceiling_musd, now)


def remaining_musd(
    cur: Cursor, cfg: LedgerConfig, now: datetime, operation_id: str, provider: str
) -> int | None:
    """Smallest remaining amount over the levels a hold at ``provider`` would touch."""
    user_id, _, team, max_musd, _, _, committed, _ = _open_op(cur, operation_id)
    limits = overrides(cur)
    scopes = scopes_for(user_id, team, provider, provider_caps(cfg, limits))
    found = buckets(cur, cfg, scopes, window_keys(now, cfg.tz), limits, margins=True)
    remaining = [b.remaining_musd for b in found if b.remaining_musd is not None]
    remaining.append(max_musd - committed)
    return max(0, min(remaining))


def _hold_row(cur: Cursor, hold_id: str) -> tuple[Any, ...]:
    cur.execute(
        "SELECT state, operation_id, user_id, provider, model, input_tokens, max_tokens,"
        " ceiling_musd, granted_at, hour_key, day_key, scopes, actual_musd FROM budget_holds"
        " WHERE hold_id = ?",
        (hold_id,),
    )
    row = cur.fetchone()
    if row is None:
        raise UnknownHold(hold_id)
    return tuple(row)


def settle(
    cur: Cursor,
    cfg: LedgerConfig,
    now: datetime,
    hold_id: str,
    usage: Usage | Callable[[int, int], Usage],
    estimated: bool,
    pricer: Pricer,
) -> SettleOutcome:
    """Book the actual cost of a hold (idempotent).

    A held hold: − ceiling from held, + actual to settled. An expired hold (its
    ceiling already booked as settled by the sweep): settled is corrected by
    actual − booked, and the actual is added to ``late_musd`` (a late settle).
    A settled or released hold: nothing; returns the first actual (0 if released).
    """
    (
        state,
        op_id,
        user_id,
        provider,
        model,
        in_tok,
        max_tok,
        ceiling,
        granted,
        hour_key,
        day_key,
        scopes_json,
        booked_at_expiry,
    ) = _hold_row(cur, hold_id)
    do_book, late = settle_transition(HoldState(state))
    if not do_book:
        return SettleOutcome(int(booked_at_expiry or 0), False, None)
    u = usage(in_tok, max_tok) if callable(usage) else usage
    granted_at = utc(granted)
    assert granted_at is not None
    actual, list_actual = pricer(provider, model, u, granted_at)
    scopes = load_scopes(scopes_json)
    # what this hold already counts for: its ceiling, held or booked at expiry
    counted = int(booked_at_expiry or 0) if late else ceiling
    book(
        cur,
        scopes,
        hour_key,
        day_key,
        held=0 if late else -ceiling,
        settled=actual - counted if late else actual,
        late=actual if late else 0,
    )
    cur.execute(
        "UPDATE budget_holds SET state = 'settled', ended_at = ?, actual_musd = ?,"
        " list_actual_musd = ?, usage_input = ?, usage_cached_input = ?,"
        " usage_output = ?, usage_reasoning = ?, estimated = ?, late = ?"
        " WHERE hold_id = ?",
        (
            now.timestamp(),
            actual,
            list_actual,
            u.input_tokens,
            u.cached_input_tokens,
            u.output_tokens,
            u.reasoning_tokens,
            int(estimated),
            int(late),
            hold_id,
        ),
    )
    cur.execute(
        "UPDATE budget_operations SET committed_musd = committed_musd + ? WHERE operation_id = ?",
        (actual - counted, op_id),
    )
    if late:
        detail = f"{actual} (booked {counted} at expiry)"
        event(cur, cfg.tz, now, "late_settle", user_id=user_id, hold_id=hold_id, detail=detail)
    if actual > ceiling:
        detail = f"{actual}>{ceiling}"
        event(cur, cfg.tz, now, "over_ceiling", user_id=user_id, hold_id=hold_id, detail=detail)
    grew = actual > counted if late else actual > 0
    tripped = auto_kill(cur, cfg, now) if grew else None
    return SettleOutcome(actual, True, tripped)


def release(cur: Cursor, cfg: LedgerConfig, now: datetime, hold_id: str) -> bool:
    """Return a hold that spent nothing. ``False`` = no-op (already settled/released).

    A held hold: − ceiling from held. An expired hold (its ceiling booked as
    settled by the sweep): the booked ceiling is taken back out of settled
    spend, recorded as a ``late_release`` event.
    """
    row = _hold_row(cur, hold_id)
    state, op_id, user_id, ceiling = row[0], row[1], row[2], row[7]
    hour_key, day_key, scopes_json, booked = row[9:13]
    do_release, late = release_transition(HoldState(state))
    if not do_release:
        return False
    counted = int(booked or 0) if late else ceiling
    scopes = load_scopes(scopes_json)
    if late:
        book(cur, scopes, hour_key, day_key, settled=-counted)
    else:
        book(cur, scopes, hour_key, day_key, held=-ceiling)
    cur.execute(
        "UPDATE budget_holds SET state = 'released', ended_at = ?, actual_musd = 0,"
        " list_actual_musd = NULL, estimated = 0, late = ? WHERE hold_id = ?",
        (now.timestamp(), int(late), hold_id),
    )
    cur.execute(
        "UPDATE budget_operations SET committed_musd = committed_musd - ? WHERE operation_id = ?",
        (counted, op_id),
    )
    if late:
        detail = f"returned {counted} booked at expiry"
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
        " input_tokens, max_tokens, hour_key, day_key, scopes, margin_musd"
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
    ) in rows:
        # booked at its provable bound (ceiling + margin): a late settle can
        # then only correct it downwards, never past what was admitted
        booked = int(ceiling) + int(margin)
        book(cur, load_scopes(scopes_json), hour_key, day_key, held=-ceiling, settled=booked)
        # the operation's committed money keeps the ceiling: it now counts as spent
        cur.execute(
            "UPDATE budget_holds SET state = 'expired', ended_at = ?, actual_musd = ?,"
            " list_actual_musd = ?, usage_input = ?, usage_cached_input = 0,"
            " usage_output = ?, usage_reasoning = 0, estimated = 1 WHERE hold_id = ?",
            (t, booked, list_ceiling, in_tok, max_tok, hold_id),
        )
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
