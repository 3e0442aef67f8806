"""Row-level SQL of the SQLite ledger shared by its modules (inside a transaction).

Each function takes the open cursor of the caller's transaction
(:class:`budget.kernel.sqlite_writer.SqliteWriter`); the rules themselves come from
:mod:`budget.policy.rules`. Times are stored as epoch seconds; money is integer µUSD.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from budget.config import LedgerConfig
from budget.policy.rules import (
    Bucket,
    Overrides,
    Scope,
    auto_kill_reason,
    auto_kill_since,
    auto_kill_threshold_musd,
    bucket_keys,
    build_buckets,
    limit_of,
    pick_kill,
    plan_now,
    utc,
    with_margins,
)
from budget.policy.steps import Booking, booking_rows
from budget.policy.windows import HoldKeys, WindowKeys
from budget.status import KillState, PlansHeld
from budget.storage.sql.statements import (
    BOOK_UPSERT,
    EVENT_INSERT,
    KILL_COLS,
    KILL_UPSERT,
    event_row,
    refusal_event_row,
)
from budget.storage.store import Cursor, RefusedStep
from budget.types import Level, Refusal, Window

__all__ = [
    "auto_kill",
    "book",
    "buckets",
    "event",
    "exposure",
    "kill_of",
    "kill_state",
    "overrides",
    "plans_held",
    "refuse",
    "set_kill",
    "team_of",
    "team_usage",
    "teams",
    "user_plan",
]


def kill_state(row: Sequence[object]) -> KillState:
    """A ``budget_kill`` row selected as ``KILL_COLS``."""
    killed, reason, auto, by, at, kind, scope = row
    return KillState(
        bool(killed),
        str(reason or ""),
        bool(auto),
        None if by is None else int(str(by)),
        utc(None if at is None else float(str(at))),
        str(kind),
        str(scope),
    )


def event(cur: Cursor, tz: str, now: datetime, kind: str, **fields: Any) -> None:
    """Append one ``budget_events`` row (fields as :func:`event_row`)."""
    cur.execute(EVENT_INSERT, event_row(tz, now, kind, **fields))


def refuse(
    cur: Cursor,
    tz: str,
    now: datetime,
    refusal: Refusal,
    user_id: int | None,
    plan: str | None = None,
) -> RefusedStep:
    """Record a refusal event (of a user on ``plan``, if known); returns the exception to
    raise (committing the event)."""
    step = RefusedStep(refusal, user_id, plan)
    cur.execute(EVENT_INSERT, refusal_event_row(tz, now, step.refusal, user_id))
    return step


def kill_of(cur: Cursor, user_id: int | None, team: str | None) -> KillState | None:
    """The tripped switch that applies to ``user_id``/``team`` (global first), or ``None``."""
    cur.execute(
        f"SELECT {KILL_COLS} FROM budget_kill"  # noqa: S608 - fixed column list
        " WHERE killed = 1 AND ((scope_kind = 'global')"
        " OR (scope_kind = 'user' AND scope = ?) OR (scope_kind = 'team' AND scope = ?))",
        ("" if user_id is None else str(user_id), team or ""),
    )
    return pick_kill(kill_state(r) for r in cur.fetchall())


def kill_states(cur: Cursor) -> list[KillState]:
    """Every switch row."""
    cur.execute(f"SELECT {KILL_COLS} FROM budget_kill")  # noqa: S608 - fixed column list
    return [kill_state(r) for r in cur.fetchall()]


def team_of(cur: Cursor, user_id: int) -> str | None:
    """The user's team, or ``None``."""
    cur.execute("SELECT team FROM budget_team_members WHERE user_id = ?", (user_id,))
    row = cur.fetchone()
    return None if row is None else str(row[0])


def user_plan(cur: Cursor, cfg: LedgerConfig, user_id: int, now: datetime) -> str | None:
    """The plan ``user_id`` is held on now (:meth:`budget.config.LedgerConfig.plan`: their
    plan while it lasts and is defined, else the default); ``None`` without plans."""
    if not cfg.plans:
        return None
    cur.execute("SELECT plan, until FROM budget_user_plans WHERE user_id = ?", (user_id,))
    row = cur.fetchone()
    stored, until = (None, None) if row is None else (str(row[0]), row[1])
    return plan_now(cfg, stored, until, now.timestamp())


def plans_held(cur: Cursor, cfg: LedgerConfig, now: datetime) -> PlansHeld:
    """The plan every user is held on now, in one read: the users with a plan row, and
    the plan of every other user (:func:`user_plan` of each, at once)."""
    default = plan_now(cfg, None, None, now.timestamp())
    if not cfg.plans:
        return PlansHeld({}, default)
    cur.execute("SELECT user_id, plan, until FROM budget_user_plans")
    at = now.timestamp()
    rows = {int(r[0]): plan_now(cfg, str(r[1]), r[2], at) for r in cur.fetchall()}
    return PlansHeld({uid: plan for uid, plan in rows.items() if plan != default}, default)


def overrides(cur: Cursor) -> dict[tuple[str, str, str], int | None]:
    """Every runtime limit override."""
    cur.execute("SELECT level, scope, win, limit_musd FROM budget_limits")
    return {(r[0], r[1], r[2]): r[3] for r in cur.fetchall()}


def team_usage(
    cur: Cursor, granted: Mapping[tuple[str, Window], int], keys: WindowKeys
) -> dict[tuple[str, Window], int]:
    """``(team, window) → settled + held µUSD`` now of each team with a guarantee
    (:func:`budget.policy.shares.guarantees`)."""
    used: dict[tuple[str, Window], int] = {}
    for team, window in granted:
        cur.execute(
            "SELECT settled_musd + held_musd FROM budget_buckets"
            " WHERE level = 'team' AND scope = ? AND win = ? AND wkey = ?",
            (team, window.value, keys.key(window)),
        )
        row = cur.fetchone()
        used[(team, window)] = 0 if row is None else int(row[0])
    return used


def buckets(
    cur: Cursor,
    config: LedgerConfig,
    scopes: Sequence[Scope],
    keys: WindowKeys,
    limits: Overrides,
    *,
    margins: bool = False,
) -> list[Bucket]:
    """The buckets of ``scopes`` at ``keys`` (with outstanding holds' margins counted
    as held when ``margins``)."""
    rows: dict[tuple[str, str, str, str], tuple[int, int, int]] = {}
    for key in bucket_keys(scopes, keys.hold):
        cur.execute(
            "SELECT settled_musd, held_musd, late_musd FROM budget_buckets"
            " WHERE level = ? AND scope = ? AND win = ? AND wkey = ?",
            key,
        )
        row = cur.fetchone()
        if row is not None:
            rows[key] = (row[0], row[1], row[2])
    out = build_buckets(config, limits, scopes, keys, rows)
    if margins:
        cur.execute(
            "SELECT scopes, hour_key, day_key, month_key, margin_musd FROM budget_holds"
            " WHERE state = 'held' AND margin_musd > 0"
        )
        out = with_margins(out, cur.fetchall())
    return out


def book(
    cur: Cursor,
    scopes: Sequence[Scope],
    keys: HoldKeys,
    *,
    held: int = 0,
    settled: int = 0,
    late: int = 0,
) -> None:
    """Add the deltas (µUSD) to every bucket of ``scopes`` in the hold's windows."""
    if held == 0 and settled == 0 and late == 0:
        return
    rows = booking_rows(scopes, keys, Booking(held, settled, late, 0, 0))
    cur.executemany(BOOK_UPSERT, [(*key, s, h, lt) for key, s, h, lt in rows])


def set_kill(
    cur: Cursor,
    tz: str,
    now: datetime,
    kind: str,
    scope: str,
    killed: bool,
    reason: str,
    automatic: bool,
    by: int | None,
) -> None:
    """Trip or reset one switch and record the event."""
    t = now.timestamp()
    unkilled = None if killed else t
    cur.execute(KILL_UPSERT, (kind, scope, int(killed), reason, int(automatic), by, t, unkilled))
    event(
        cur,
        tz,
        now,
        "kill" if killed else "unkill",
        scope=f"{kind}:{scope}",
        user_id=by,
        detail=reason,
    )


def exposure(cur: Cursor, kind: str = "global", scope: str = "") -> int:
    """µUSD held by outstanding holds in a kill scope."""
    if kind == "user":
        cur.execute(
            "SELECT COALESCE(SUM(ceiling_musd), 0) FROM budget_holds"
            " WHERE state = 'held' AND user_id = ?",
            (int(scope),),
        )
    elif kind == "team":
        cur.execute(
            "SELECT COALESCE(SUM(ceiling_musd), 0) FROM budget_holds"
            " WHERE state = 'held' AND team = ?",
            (scope,),
        )
    else:
        cur.execute("SELECT COALESCE(SUM(ceiling_musd), 0) FROM budget_holds WHERE state = 'held'")
    return int(cur.fetchone()[0])


def teams(cur: Cursor) -> dict[str, list[int]]:
    """Team name → sorted member ids."""
    cur.execute("SELECT team, user_id FROM budget_team_members ORDER BY team, user_id")
    out: dict[str, list[int]] = {}
    for team, uid in cur.fetchall():
        out.setdefault(team, []).append(uid)
    return out


def auto_kill(cur: Cursor, config: LedgerConfig, now: datetime) -> KillState | None:
    """Trip the global switch when the settled spend of the auto-kill window is over
    the threshold (:func:`budget.policy.rules.auto_kill_threshold_musd`); the new state or
    ``None``."""
    threshold = auto_kill_threshold_musd(
        config, limit_of(config, overrides(cur), Level.GLOBAL, "", Window.DAY)
    )
    if threshold is None:
        return None
    cur.execute(
        "SELECT killed, unkilled_at FROM budget_kill WHERE scope_kind = 'global' AND scope = ''"
    )
    row = cur.fetchone()
    if row is not None and row[0]:
        return None
    # the window back from now, never before the last reset (policy.auto_kill_since),
    # compared on the stored epoch floats themselves
    since = auto_kill_since(config, now, None).timestamp()
    if row is not None and row[1] is not None:
        since = max(since, float(row[1]))
    cur.execute(
        "SELECT COALESCE(SUM(actual_musd), 0) FROM budget_holds WHERE ended_at > ?"
        " AND state IN ('settled', 'expired') AND actual_musd > 0",
        (since,),
    )
    spent = int(cur.fetchone()[0])
    if spent <= threshold:
        return None
    reason = auto_kill_reason(spent, threshold, config.auto_kill_window_s)
    set_kill(cur, config.tz, now, "global", "", True, reason, True, None)
    return KillState(True, reason, True, None, now, "global", "")
