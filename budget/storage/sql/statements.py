"""The ledger's SQL that both engines run, and the values it takes.

Written in the subset SQLite and PostgreSQL share: ``?`` placeholders (translated to
``$n`` for asyncpg by :func:`budget.storage.postgres.rows.translate`), upserts qualified. The SQLite
row modules (:mod:`budget.storage.sql.holds`, :mod:`budget.storage.sql.rows`) and the PostgreSQL
ones (:mod:`budget.storage.postgres.holds`, :mod:`budget.storage.postgres.rows`) take their
statements from here,
so a column list is written once. Times are epoch seconds of the ledger clock; money
integer µUSD.
"""

from __future__ import annotations

from datetime import datetime
from typing import NamedTuple

from budget.config import LedgerConfig
from budget.policy.steps import Booking, SettlePlan
from budget.policy.windows import HoldKeys, WindowKeys, window_keys
from budget.protocol import OperationTicket
from budget.storage.store import Admission, PricedHold
from budget.types import Refusal

__all__ = [
    "BOOK_UPSERT",
    "EVENT_INSERT",
    "HOLD_EXPIRE",
    "HOLD_INSERT",
    "HOLD_RELEASE",
    "HOLD_ROW",
    "HOLD_ROW_COLUMNS",
    "HOLD_SETTLE",
    "KILL_COLS",
    "KILL_UPSERT",
    "OPEN_COUNT",
    "OPERATION_COMMIT",
    "OPERATION_INSERT",
    "RATE_COUNT",
    "REQUEST_INSERT",
    "HoldRow",
    "event_row",
    "hold_values",
    "operation_row",
    "refusal_event_row",
    "settle_events",
    "settled_row",
]

#: The columns of a ``budget_kill`` row (:func:`budget.storage.sql.rows.kill_state`).
KILL_COLS = "killed, reason, automatic, by_user, changed_at, scope_kind, scope"

#: Trips or resets one switch (values: kind, scope, killed, reason, automatic, by,
#: changed_at, unkilled_at).
KILL_UPSERT = (
    "INSERT INTO budget_kill (scope_kind, scope, killed, reason, automatic, by_user,"
    " changed_at, unkilled_at) VALUES (?,?,?,?,?,?,?,?)"
    " ON CONFLICT (scope_kind, scope) DO UPDATE SET killed = excluded.killed,"
    " reason = excluded.reason, automatic = excluded.automatic,"
    " by_user = excluded.by_user, changed_at = excluded.changed_at,"
    " unkilled_at = COALESCE(excluded.unkilled_at, budget_kill.unkilled_at)"
)

#: Adds deltas to one bucket, creating it (values: level, scope, win, wkey, settled,
#: held, late). Rows go in key order (:func:`budget.policy.steps.booking_rows`).
BOOK_UPSERT = (
    "INSERT INTO budget_buckets (level, scope, win, wkey, settled_musd, held_musd,"
    " late_musd) VALUES (?,?,?,?,?,?,?) ON CONFLICT (level, scope, win, wkey) DO UPDATE"
    " SET settled_musd = budget_buckets.settled_musd + excluded.settled_musd,"
    " held_musd = budget_buckets.held_musd + excluded.held_musd,"
    " late_musd = budget_buckets.late_musd + excluded.late_musd"
)


#: Appends one ``budget_events`` row (values from :func:`event_row`).
EVENT_INSERT = (
    "INSERT INTO budget_events (at, day_key, kind, reason, level, win, scope, user_id,"
    " hold_id, detail, plan) VALUES (?,?,?,?,?,?,?,?,?,?,?)"
)


#: Operations of a user still open at a time (values: user_id, now).
OPEN_COUNT = (
    "SELECT COUNT(*) FROM budget_operations WHERE user_id = ? AND ended_at IS NULL"
    " AND expires_at > ?"
)
#: Operations a user started since a time, and the oldest (values: user_id, since).
RATE_COUNT = (
    "SELECT COUNT(*), MIN(started_at) FROM budget_operations WHERE user_id = ? AND started_at > ?"
)
#: A new operation (values: :func:`operation_row`).
OPERATION_INSERT = (
    "INSERT INTO budget_operations (operation_id, user_id, origin, team, started_at,"
    " expires_at, ended_at, max_musd, max_requests, requests, committed_musd,"
    " day_key, process_id, chat_id, plan) VALUES (?,?,?,?,?,?,NULL,?,?,0,0,?,?,?,?)"
)
#: Adds to an operation's committed money (values: delta µUSD, operation_id).
OPERATION_COMMIT = (
    "UPDATE budget_operations SET committed_musd = committed_musd + ? WHERE operation_id = ?"
)
#: A new request (values: request_id, operation_id, fingerprint, created_at, day_key).
REQUEST_INSERT = (
    "INSERT INTO budget_requests (request_id, operation_id, fingerprint, created_at,"
    " day_key) VALUES (?,?,?,?,?)"
)
#: A granted hold (values in column order, state 'held').
HOLD_INSERT = (
    "INSERT INTO budget_holds (hold_id, operation_id, request_id, user_id, team,"
    " origin, provider, model, input_tokens, max_tokens, ceiling_musd,"
    " list_ceiling_musd, state, granted_at, expires_at, tz, hour_key, day_key,"
    " scopes, process_id, estimated, late, price_version, margin_musd, month_key)"
    " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,'held',?,?,?,?,?,?,?,0,0,?,?,?)"
)
#: What settle and release read of a hold (value: hold_id).
HOLD_ROW = (
    "SELECT state, operation_id, user_id, provider, model, input_tokens, max_tokens,"
    " ceiling_musd, granted_at, hour_key, day_key, scopes, actual_musd, month_key"
    " FROM budget_holds WHERE hold_id = ?"
)


class HoldRow(NamedTuple):
    """A hold as :data:`HOLD_ROW` selects it (µUSD; ``granted_at`` epoch seconds;
    ``booked_musd``: the actual so far — what the sweep booked once expired;
    ``month_key`` ``None`` for a hold granted before months were tracked)."""

    state: str
    operation_id: str
    user_id: int
    provider: str
    model: str
    input_tokens: int
    max_tokens: int
    ceiling_musd: int
    granted_at: float
    hour_key: str
    day_key: str
    scopes: str
    booked_musd: int | None
    month_key: str | None

    @property
    def keys(self) -> HoldKeys:
        """The windows the hold was granted in."""
        return HoldKeys(self.hour_key, self.day_key, self.month_key)


#: How many columns :data:`HOLD_ROW` selects (PostgreSQL appends more after them).
HOLD_ROW_COLUMNS = len(HoldRow._fields)

#: A settled hold (values: :func:`settled_row`).
HOLD_SETTLE = (
    "UPDATE budget_holds SET state = 'settled', ended_at = ?, actual_musd = ?,"
    " list_actual_musd = ?, usage_input = ?, usage_cached_input = ?,"
    " usage_output = ?, usage_reasoning = ?, estimated = ?, late = ?"
    " WHERE hold_id = ?"
)
#: A released hold (values: ended_at, late, hold_id).
HOLD_RELEASE = (
    "UPDATE budget_holds SET state = 'released', ended_at = ?, actual_musd = 0,"
    " list_actual_musd = NULL, estimated = 0, late = ? WHERE hold_id = ?"
)
#: An expired hold (values: ended_at, booked, list ceiling, input tokens, max tokens, hold_id).
HOLD_EXPIRE = (
    "UPDATE budget_holds SET state = 'expired', ended_at = ?, actual_musd = ?,"
    " list_actual_musd = ?, usage_input = ?, usage_cached_input = 0,"
    " usage_output = ?, usage_reasoning = 0, estimated = 1 WHERE hold_id = ?"
)


def operation_row(
    cfg: LedgerConfig,
    process_id: str,
    now: datetime,
    admission: Admission,
    team: str | None,
    plan: str | None = None,
) -> tuple[object, ...]:
    """The values of :data:`OPERATION_INSERT` for ``admission`` (``team``, ``plan``: its
    user's at admission)."""
    t = now.timestamp()
    day_key = cfg.keys(now).day_key
    return (
        admission.operation_id,
        admission.user_id,
        admission.origin.value,
        team,
        t,
        t + cfg.hold_ttl_s,
        admission.max_musd,
        admission.max_requests,
        day_key,
        process_id,
        admission.chat_id,
        plan,
    )


def hold_values(
    cfg: LedgerConfig,
    process_id: str,
    now: datetime,
    hold_id: str,
    hold: PricedHold,
    owner: OperationTicket,
    keys: WindowKeys,
    scopes_json: str,
) -> tuple[object, ...]:
    """The values of :data:`HOLD_INSERT` for ``hold`` in an operation of ``owner``
    (its user, team and origin), in the windows of ``keys``."""
    t = now.timestamp()
    price = hold.price
    return (
        hold_id,
        hold.operation_id,
        hold.request_id,
        owner.user_id,
        owner.team,
        (hold.origin or owner.origin).value,
        hold.provider,
        hold.model,
        hold.input_tokens,
        hold.max_tokens,
        price.ceiling_musd,
        price.list_ceiling_musd,
        t,
        t + cfg.hold_ttl_s,
        cfg.tz,
        keys.hour_key,
        keys.day_key,
        scopes_json,
        process_id,
        price.price_version,
        price.margin_musd,
        keys.month_key,
    )


def settled_row(
    now: datetime, hold_id: str, plan: SettlePlan, estimated: bool
) -> tuple[object, ...]:
    """The values of :data:`HOLD_SETTLE` booking ``plan``."""
    u = plan.usage
    return (
        now.timestamp(),
        plan.actual_musd,
        plan.list_actual_musd,
        u.input_tokens,
        u.cached_input_tokens,
        u.output_tokens,
        u.reasoning_tokens,
        int(estimated),
        int(plan.late),
        hold_id,
    )


def settle_events(late: bool, b: Booking, actual: int, ceiling: int) -> list[tuple[str, str]]:
    """``(kind, detail)`` of the events a settle records: a late settle, an actual
    over the ceiling."""
    out = []
    if late:
        out.append(("late_settle", f"{actual} (booked {b.counted} at expiry)"))
    if actual > ceiling:
        out.append(("over_ceiling", f"{actual}>{ceiling}"))
    return out


def event_row(
    tz: str,
    now: datetime,
    kind: str,
    *,
    reason: str | None = None,
    level: str | None = None,
    window: str | None = None,
    scope: str | None = None,
    user_id: int | None = None,
    hold_id: str | None = None,
    detail: str | None = None,
    plan: str | None = None,
) -> tuple[object, ...]:
    """The values of :data:`EVENT_INSERT` (the event's day is ``now``'s day in ``tz``;
    ``plan``: the user's plan, for the refusal metrics)."""
    return (
        now.timestamp(),
        window_keys(now, tz).day_key,
        kind,
        reason,
        level,
        window,
        scope,
        user_id,
        hold_id,
        detail,
        plan,
    )


def refusal_event_row(
    tz: str, now: datetime, refusal: Refusal, user_id: int | None
) -> tuple[object, ...]:
    """The :data:`EVENT_INSERT` values recording ``refusal``."""
    return event_row(
        tz,
        now,
        "refusal",
        reason=refusal.reason.value,
        level=None if refusal.level is None else refusal.level.value,
        window=None if refusal.window is None else refusal.window.value,
        scope=refusal.scope,
        user_id=user_id,
        plan=refusal.plan or None,
    )
