"""SQLite SQL of the ledger's settings-like rows: kill switches, runtime limits, teams,
the courtesy message counter and estimate calibration (each inside one transaction)."""

from __future__ import annotations

from datetime import datetime

from budget.config import LedgerConfig
from budget.policy.shares import GUARANTEE, oversubscribed
from budget.policy.windows import window_keys
from budget.storage.sql.rows import event, exposure, overrides, refuse, set_kill, team_of, teams
from budget.storage.store import Cursor, LimitChange
from budget.types import Level, Refusal, RefusalReason, Window

__all__ = [
    "calibration",
    "limit_warnings",
    "messages_refusal",
    "record_calibration",
    "record_message",
    "set_guarantee",
    "set_kill_exposure",
    "set_limit",
    "set_plan",
    "team_add",
    "team_remove",
]


def calibration(cur: Cursor) -> dict[tuple[str, str], tuple[int, int]]:
    """``(provider, model) → (ratio ppm, samples)`` of reported ÷ counted input tokens."""
    cur.execute("SELECT provider, model, ratio_ppm, samples FROM budget_calibration")
    return {(p, m): (int(r), int(n)) for p, m, r, n in cur.fetchall()}


def record_calibration(
    cur: Cursor, now: datetime, provider: str, model: str, ratio_ppm: int, samples: int
) -> None:
    """Persist one model's calibration (upsert)."""
    cur.execute(
        "INSERT INTO budget_calibration (provider, model, ratio_ppm, samples, updated_at)"
        " VALUES (?,?,?,?,?) ON CONFLICT (provider, model) DO UPDATE SET"
        " ratio_ppm = excluded.ratio_ppm, samples = excluded.samples,"
        " updated_at = excluded.updated_at",
        (provider, model, ratio_ppm, samples, now.timestamp()),
    )


def set_kill_exposure(
    cur: Cursor,
    cfg: LedgerConfig,
    now: datetime,
    kind: str,
    scope: str,
    killed: bool,
    reason: str,
    by: int | None,
) -> int:
    """Trip or reset a switch by hand; returns the exposure (µUSD held, in that scope)."""
    set_kill(cur, cfg.tz, now, kind, scope, killed, reason, False, by)
    return exposure(cur, kind, scope)


def set_limit(cur: Cursor, cfg: LedgerConfig, now: datetime, change: LimitChange) -> None:
    """Persist a runtime limit (``None`` = no limit); ``clear`` restores the default."""
    where = (change.level.value, change.scope, change.window.value)
    if change.clear:
        cur.execute("DELETE FROM budget_limits WHERE level = ? AND scope = ? AND win = ?", where)
    else:
        cur.execute(
            "INSERT INTO budget_limits (level, scope, win, limit_musd, updated_at,"
            " updated_by) VALUES (?,?,?,?,?,?) ON CONFLICT (level, scope, win)"
            " DO UPDATE SET limit_musd = excluded.limit_musd,"
            " updated_at = excluded.updated_at, updated_by = excluded.updated_by",
            (*where, change.limit_musd, now.timestamp(), change.by),
        )
    event(
        cur,
        cfg.tz,
        now,
        "limit",
        level=change.level.value,
        window=change.window.value,
        scope=change.scope,
        user_id=change.by,
        detail="default" if change.clear else str(change.limit_musd),
    )


def set_plan(
    cur: Cursor,
    cfg: LedgerConfig,
    now: datetime,
    user_id: int,
    plan: str | None,
    until: datetime | None,
    by: int | None,
) -> None:
    """Put ``user_id`` on ``plan`` until ``until`` (``None``: no end); ``plan`` ``None``
    drops their row (the default plan). Records a ``plan`` event."""
    if plan is None:
        cur.execute("DELETE FROM budget_user_plans WHERE user_id = ?", (user_id,))
    else:
        cur.execute(
            "INSERT INTO budget_user_plans (user_id, plan, until, set_at, set_by)"
            " VALUES (?,?,?,?,?) ON CONFLICT (user_id) DO UPDATE SET plan = excluded.plan,"
            " until = excluded.until, set_at = excluded.set_at, set_by = excluded.set_by",
            (user_id, plan, None if until is None else until.timestamp(), now.timestamp(), by),
        )
    shown = "default" if plan is None else plan
    detail = shown if until is None else f"{shown} until {until.isoformat()}"
    event(cur, cfg.tz, now, "plan", scope=str(user_id), user_id=by, detail=detail)


def set_guarantee(
    cur: Cursor,
    cfg: LedgerConfig,
    now: datetime,
    team: str,
    window: Window,
    floor_musd: int | None,
    by: int | None,
) -> None:
    """Keep ``floor_musd`` of the global ``window`` for ``team`` while it has not used
    it (:mod:`budget.policy.shares`); ``None`` drops the guarantee."""
    where = (GUARANTEE, team, window.value)
    if floor_musd is None:
        cur.execute("DELETE FROM budget_limits WHERE level = ? AND scope = ? AND win = ?", where)
    else:
        cur.execute(
            "INSERT INTO budget_limits (level, scope, win, limit_musd, updated_at,"
            " updated_by) VALUES (?,?,?,?,?,?) ON CONFLICT (level, scope, win)"
            " DO UPDATE SET limit_musd = excluded.limit_musd,"
            " updated_at = excluded.updated_at, updated_by = excluded.updated_by",
            (*where, floor_musd, now.timestamp(), by),
        )
    detail = "off" if floor_musd is None else str(floor_musd)
    event(cur, cfg.tz, now, "guarantee", window=window.value, scope=team, user_id=by, detail=detail)


def limit_warnings(cur: Cursor, cfg: LedgerConfig, now: datetime) -> list[str]:
    """:func:`budget.policy.shares.oversubscribed` of the limits as they are now."""
    cur.execute(
        "SELECT plan, COUNT(*) FROM budget_user_plans WHERE until IS NULL OR until > ?"
        " GROUP BY plan",
        (now.timestamp(),),
    )
    members = {str(r[0]): int(r[1]) for r in cur.fetchall()}
    return oversubscribed(cfg, overrides(cur), sorted(teams(cur)), members)


def team_add(cur: Cursor, now: datetime, name: str, user_id: int) -> str | None:
    """Put ``user_id`` in team ``name``; returns the team they left, if any."""
    prev = team_of(cur, user_id)
    cur.execute(
        "INSERT INTO budget_team_members (user_id, team, added_at) VALUES (?,?,?)"
        " ON CONFLICT (user_id) DO UPDATE SET team = excluded.team,"
        " added_at = excluded.added_at",
        (user_id, name, now.timestamp()),
    )
    return prev if prev != name else None


def team_remove(cur: Cursor, name: str, user_id: int) -> bool:
    """Remove ``user_id`` from team ``name``; ``False`` if they were not in it."""
    cur.execute("DELETE FROM budget_team_members WHERE user_id = ? AND team = ?", (user_id, name))
    return cur.rowcount > 0


def messages_refusal(cfg: LedgerConfig, now: datetime, user_id: int) -> Refusal:
    """The refusal of a message past USER_DAILY_MESSAGES (it resets with the day)."""
    return Refusal(
        RefusalReason.MESSAGES,
        level=Level.USER,
        window=Window.DAY,
        resets_at=window_keys(now, cfg.tz).day_resets_at,
        scope=str(user_id),
    )


def record_message(cur: Cursor, cfg: LedgerConfig, now: datetime, user_id: int) -> int:
    """Count a message against USER_DAILY_MESSAGES; returns today's count.

    Raises (via the transaction): HoldRefused(messages) when the cap is reached;
    the refused message is not counted.
    """
    keys = window_keys(now, cfg.tz)
    cur.execute(
        "SELECT count FROM budget_messages WHERE user_id = ? AND day_key = ?",
        (user_id, keys.day_key),
    )
    row = cur.fetchone()
    n = 0 if row is None else int(row[0])
    if cfg.user_daily_messages is not None and n >= cfg.user_daily_messages:
        raise refuse(cur, cfg.tz, now, messages_refusal(cfg, now, user_id), user_id)
    cur.execute(
        "INSERT INTO budget_messages (user_id, day_key, count) VALUES (?,?,1)"
        " ON CONFLICT (user_id, day_key) DO UPDATE SET count = budget_messages.count + 1",
        (user_id, keys.day_key),
    )
    return n + 1
