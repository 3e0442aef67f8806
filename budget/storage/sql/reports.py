"""SQLite SQL of the ledger's reports (``/budget``, ``/me``, ``/team``, charts, audit).

Each function reads inside one snapshot transaction (cursor from
:class:`budget.kernel.sqlite_writer.SqliteWriter`); rules from :mod:`budget.policy.rules`.
Money is integer µUSD.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from budget.config import LedgerConfig
from budget.policy.rules import Scope, audit_mismatches, capped_providers, estimate_stats, utc
from budget.policy.windows import WindowKeys, hour_bounds, window_keys
from budget.status import (
    BucketStatus,
    HoldEntry,
    KillState,
    LedgerStatus,
    PayerStatus,
    PlanTally,
    ProviderSpend,
    TeamStatus,
    UserStatus,
)
from budget.storage.sql.rows import (
    buckets,
    kill_of,
    kill_states,
    overrides,
    team_of,
    teams,
    user_plan,
)
from budget.storage.store import Cursor
from budget.types import Level, Origin

__all__ = [
    "audit",
    "payer_status",
    "spend_per_hour",
    "status",
    "team_status",
    "top_users",
    "user_status",
]


def bucket_status(
    cur: Cursor,
    cfg: LedgerConfig,
    scopes: Sequence[Scope],
    keys: WindowKeys,
    limits: dict[tuple[str, str, str], int | None],
) -> list[BucketStatus]:
    """:class:`BucketStatus` of each bucket of ``scopes`` now."""
    return [
        BucketStatus(
            b.level,
            b.scope,
            b.window,
            b.key,
            b.limit_musd,
            b.settled_musd,
            b.held_musd,
            b.late_musd,
            b.remaining_musd,
            b.resets_at,
        )
        for b in buckets(cur, cfg, scopes, keys, limits)
    ]


def _one(cur: Cursor, sql: str, args: Sequence[object] = ()) -> int:
    cur.execute(sql, args)
    return int(cur.fetchone()[0] or 0)


def _provider_spend(cur: Cursor, day: str) -> list[ProviderSpend]:
    """Each provider's spend of the holds granted on ``day``, and what it holds now."""
    cur.execute(
        "SELECT provider, SUM(CASE WHEN state IN ('settled', 'expired') THEN 1 ELSE 0 END),"
        " COALESCE(SUM(CASE WHEN state IN ('settled', 'expired') THEN actual_musd END), 0),"
        " SUM(CASE WHEN state IN ('settled', 'expired') THEN list_actual_musd END),"
        " COALESCE(SUM(CASE WHEN state = 'held' THEN ceiling_musd END), 0),"
        " SUM(CASE WHEN state IN ('settled', 'expired') AND estimated = 1"
        " THEN 1 ELSE 0 END)"
        " FROM budget_holds WHERE day_key = ? OR state = 'held' GROUP BY provider"
        " ORDER BY provider",
        (day,),
    )
    rows = cur.fetchall()
    cur.execute(
        "SELECT provider, model, COUNT(*) FROM budget_holds"
        " WHERE day_key = ? AND state IN ('settled', 'expired')"
        " GROUP BY provider, model ORDER BY provider, model",
        (day,),
    )
    models: dict[str, list[tuple[str, int]]] = {}
    for provider, model, calls in cur.fetchall():
        models.setdefault(provider, []).append((model, int(calls)))
    return [
        ProviderSpend(
            r[0],
            int(r[1] or 0),
            int(r[2]),
            None if r[3] is None else int(r[3]),
            int(r[4]),
            int(r[5] or 0),
            tuple(models.get(r[0], ())),
        )
        for r in rows
    ]


def _origins_and_refusals(cur: Cursor, day: str) -> tuple[dict[str, int], dict[str, int]]:
    """``day``'s settled µUSD per origin (every origin, 0 included) and refusals per reason."""
    cur.execute(
        "SELECT origin, COALESCE(SUM(actual_musd), 0) FROM budget_holds"
        " WHERE day_key = ? AND state IN ('settled', 'expired') GROUP BY origin",
        (day,),
    )
    by_origin = {o.value: 0 for o in Origin}
    by_origin.update({r[0]: int(r[1]) for r in cur.fetchall()})
    cur.execute(
        "SELECT reason, COUNT(*) FROM budget_events WHERE day_key = ?"
        " AND kind = 'refusal' GROUP BY reason",
        (day,),
    )
    return by_origin, {r[0]: int(r[1]) for r in cur.fetchall()}


def status(cur: Cursor, cfg: LedgerConfig, now: datetime) -> LedgerStatus:
    """The whole ledger now (see :class:`budget.status.LedgerStatus`)."""
    keys = cfg.keys(now)
    day = keys.day_key
    limits = overrides(cur)
    scopes: list[Scope] = [(Level.GLOBAL, "")]
    scopes += [(Level.PROVIDER, p) for p in sorted(capped_providers(cfg, limits))]
    bucket_list = bucket_status(cur, cfg, scopes, keys, limits)
    cur.execute(
        "SELECT COUNT(*), COALESCE(SUM(ceiling_musd), 0) FROM budget_holds WHERE state = 'held'"
    )
    outstanding, exposure = cur.fetchone()
    kills = kill_states(cur)
    glob = next((k for k in kills if k.scope_kind == "global"), KillState(False))
    scoped = [k for k in kills if k.scope_kind != "global" and k.killed]
    providers = _provider_spend(cur, day)
    by_origin, refusals = _origins_and_refusals(cur, day)
    cur.execute(
        "SELECT input_tokens + max_tokens, usage_input + usage_output, ceiling_musd,"
        " actual_musd FROM budget_holds WHERE day_key = ? AND state = 'settled'",
        (day,),
    )
    estimate = estimate_stats(cur.fetchall())
    ops = _one(cur, "SELECT COUNT(*) FROM budget_operations WHERE day_key = ?", (day,))
    reqs = _one(cur, "SELECT COUNT(*) FROM budget_requests WHERE day_key = ?", (day,))
    expired = _one(
        cur, "SELECT COUNT(*) FROM budget_events WHERE day_key = ? AND kind = 'expiry'", (day,)
    )
    late = _one(
        cur,
        "SELECT COALESCE(SUM(actual_musd), 0) FROM budget_holds WHERE late = 1 AND day_key = ?",
        (day,),
    )
    cur.execute(
        "SELECT COUNT(*), COALESCE(SUM(actual_musd), 0) FROM budget_holds"
        " WHERE state = 'expired' AND day_key = ?",
        (day,),
    )
    unreconciled, booked_at_ceiling = cur.fetchone()
    return LedgerStatus(
        at=now,
        tz=cfg.tz,
        buckets=bucket_list,
        outstanding_holds=int(outstanding),
        exposure_musd=int(exposure),
        kill=glob,
        scoped_kills=scoped,
        providers=providers,
        spend_by_origin_musd=by_origin,
        refusals_today=refusals,
        estimate=estimate,
        operations_today=ops,
        requests_today=reqs,
        requests_per_operation=(reqs / ops) if ops else None,
        expired_today=expired,
        late_settled_musd_today=late,
        teams=teams(cur),
        expired_unreconciled_today=int(unreconciled),
        expired_booked_musd_today=int(booked_at_ceiling),
        by_plan=_by_plan(cur, day),
    )


def _by_plan(cur: Cursor, day: str) -> PlanTally:
    """``day``'s settled µUSD and refusals per plan (:class:`budget.status.PlanTally`)."""
    cur.execute(
        "SELECT o.plan, COALESCE(SUM(h.actual_musd), 0) FROM budget_holds h"
        " JOIN budget_operations o ON o.operation_id = h.operation_id"
        " WHERE h.day_key = ? AND h.state IN ('settled', 'expired') AND o.plan IS NOT NULL"
        " GROUP BY o.plan",
        (day,),
    )
    spend = {str(r[0]): int(r[1]) for r in cur.fetchall()}
    cur.execute(
        "SELECT plan, reason, COUNT(*) FROM budget_events WHERE day_key = ?"
        " AND kind = 'refusal' AND plan IS NOT NULL GROUP BY plan, reason",
        (day,),
    )
    refused = {(str(r[0]), str(r[1])): int(r[2]) for r in cur.fetchall()}
    return PlanTally(spend, refused)


def hold_entry(cur: Cursor, hold_id: str) -> HoldEntry | None:
    """One hold's booking (see :class:`budget.status.HoldEntry`); ``None``: no such hold."""
    cur.execute(
        "SELECT hold_id, state, provider, model, actual_musd, list_actual_musd, estimated"
        " FROM budget_holds WHERE hold_id = ?",
        (hold_id,),
    )
    row = cur.fetchone()
    if row is None:
        return None
    return HoldEntry(
        str(row[0]),
        str(row[1]),
        str(row[2]),
        str(row[3]),
        None if row[4] is None else int(row[4]),
        None if row[5] is None else int(row[5]),
        bool(row[6]),
    )


def user_status(cur: Cursor, cfg: LedgerConfig, now: datetime, user_id: int) -> UserStatus:
    """One user now (see :class:`budget.status.UserStatus`)."""
    keys = cfg.keys(now)
    team = team_of(cur, user_id)
    plan = user_plan(cur, cfg, user_id, now)
    scopes: list[Scope] = [(Level.USER, str(user_id))]
    if plan:
        scopes.append((Level.PLAN, plan))
    if team:
        scopes.append((Level.TEAM, team))
    scopes.append((Level.GLOBAL, ""))
    bucket_list = bucket_status(cur, cfg, scopes, keys, overrides(cur))
    inflight = _one(
        cur,
        "SELECT COUNT(*) FROM budget_operations WHERE user_id = ? AND ended_at IS NULL"
        " AND expires_at > ?",
        (user_id, now.timestamp()),
    )
    holds_n = _one(
        cur, "SELECT COUNT(*) FROM budget_holds WHERE user_id = ? AND state = 'held'", (user_id,)
    )
    messages = _one(
        cur,
        "SELECT COALESCE(MAX(count), 0) FROM budget_messages WHERE user_id = ? AND day_key = ?",
        (user_id, keys.day_key),
    )
    ks = kill_of(cur, user_id, team)
    spent = _one(
        cur,
        "SELECT COALESCE(SUM(actual_musd), 0) FROM budget_holds WHERE user_id = ?"
        " AND day_key = ? AND state IN ('settled', 'expired')",
        (user_id, keys.day_key),
    )
    cur.execute("SELECT plan, until FROM budget_user_plans WHERE user_id = ?", (user_id,))
    own = cur.fetchone()
    until = None
    if own is not None and own[0] == plan and own[1] is not None:
        until = utc(float(own[1]))
    return UserStatus(
        user_id,
        team,
        bucket_list,
        inflight,
        holds_n,
        messages,
        cfg.user_daily_messages,
        ks,
        spent,
        plan,
        until,
    )


def payer_status(
    cur: Cursor, cfg: LedgerConfig, now: datetime, level: Level, scope: str
) -> PayerStatus:
    """One group chat or plan now (see :class:`budget.status.PayerStatus`)."""
    keys = cfg.keys(now)
    bucket_list = bucket_status(cur, cfg, [(level, scope)], keys, overrides(cur))
    if level is Level.CHAT:
        cur.execute(
            "SELECT h.user_id, COALESCE(SUM(h.actual_musd), 0) FROM budget_holds h"
            " JOIN budget_operations o ON o.operation_id = h.operation_id"
            " WHERE o.chat_id = ? AND h.day_key = ? AND h.state IN ('settled', 'expired')"
            " GROUP BY h.user_id",
            (int(scope), keys.day_key),
        )
    else:
        cur.execute(
            "SELECT h.user_id, COALESCE(SUM(h.actual_musd), 0) FROM budget_holds h"
            " JOIN budget_operations o ON o.operation_id = h.operation_id"
            " WHERE o.plan = ? AND h.day_key = ? AND h.state IN ('settled', 'expired')"
            " GROUP BY h.user_id",
            (scope, keys.day_key),
        )
    spend = {int(r[0]): int(r[1]) for r in cur.fetchall()}
    if level is Level.PLAN:
        members = _one(
            cur,
            "SELECT COUNT(*) FROM budget_user_plans WHERE plan = ?"
            " AND (until IS NULL OR until > ?)",
            (scope, now.timestamp()),
        )
    else:  # people only: a negative id is a chat that wrote as itself (sender_chat)
        members = sum(1 for uid in spend if uid >= 0)
    return PayerStatus(level, scope, bucket_list, spend, members)


def team_status(cur: Cursor, cfg: LedgerConfig, now: datetime, name: str) -> TeamStatus:
    """One team now (see :class:`budget.status.TeamStatus`)."""
    keys = cfg.keys(now)
    members = teams(cur).get(name, [])
    bucket_list = bucket_status(cur, cfg, [(Level.TEAM, name)], keys, overrides(cur))
    spend: dict[int, int] = {}
    for uid in members:
        spend[uid] = _one(
            cur,
            "SELECT COALESCE(SUM(actual_musd), 0) FROM budget_holds WHERE user_id = ?"
            " AND day_key = ? AND state IN ('settled', 'expired')",
            (uid, keys.day_key),
        )
    ks = next(
        (k for k in kill_states(cur) if k.scope_kind == "team" and k.scope == name and k.killed),
        None,
    )
    return TeamStatus(name, members, bucket_list, spend, ks)


def top_users(cur: Cursor, cfg: LedgerConfig, now: datetime, n: int) -> list[tuple[int, int, int]]:
    """Top ``n`` users today by settled + held µUSD: ``(user_id, settled, held)``."""
    day = window_keys(now, cfg.tz).day_key
    cur.execute(
        "SELECT user_id, s, h FROM (SELECT user_id,"
        " COALESCE(SUM(CASE WHEN state IN ('settled', 'expired') AND day_key = ?"
        " THEN actual_musd END), 0) AS s,"
        " COALESCE(SUM(CASE WHEN state = 'held' THEN ceiling_musd END), 0) AS h"
        " FROM budget_holds WHERE day_key = ? OR state = 'held' GROUP BY user_id) AS t"
        " WHERE s + h > 0 ORDER BY s + h DESC, user_id LIMIT ?",
        (day, day, n),
    )
    return [(int(r[0]), int(r[1]), int(r[2])) for r in cur.fetchall()]


def spend_per_hour(
    cur: Cursor, cfg: LedgerConfig, now: datetime, hours: int
) -> dict[str, list[tuple[datetime, int]]]:
    """Settled µUSD per local hour for the last ``hours`` hours, by series:
    ``"global"``, ``"team:<name>"``, ``"provider:<name>"`` (zero-filled, oldest first)."""
    _, current, _ = hour_bounds(now, cfg.tz)
    starts = [current - timedelta(hours=h) for h in range(hours - 1, -1, -1)]
    first = starts[0].strftime("%Y-%m-%dT%H:%MZ")
    cur.execute(
        "SELECT level, scope, wkey, settled_musd FROM budget_buckets WHERE win = 'hour'"
        " AND wkey >= ? AND level IN ('global', 'team', 'provider')",
        (first,),
    )
    raw: dict[str, dict[str, int]] = {"global": {}}
    for level, scope, wkey, settled in cur.fetchall():
        name = "global" if level == "global" else f"{level}:{scope}"
        raw.setdefault(name, {})[wkey] = int(settled)
    return {
        name: [(s, series.get(s.strftime("%Y-%m-%dT%H:%MZ"), 0)) for s in starts]
        for name, series in raw.items()
    }


def _spent_of_wallets(
    cur: Cursor, got: dict[tuple[str, str, str, str], list[int]]
) -> dict[tuple[str, str, str, str], list[int]]:
    """``got`` with each wallet bucket's settled back to its spend: a wallet's bucket
    also books its credits, as negative spend (:mod:`budget.storage.sql.wallet`), which
    no hold implies."""
    cur.execute(
        "SELECT user_id, SUM(credit_musd - removed_musd) FROM budget_wallet_credits"
        " GROUP BY user_id"
    )
    out = dict(got)
    for user_id, net in cur.fetchall():
        key = ("wallet", str(user_id), "balance", "")
        settled, held, late = out.get(key, [0, 0, 0])
        out[key] = [settled + int(net), held, late]
    return out


def audit(cur: Cursor) -> dict[str, Any]:
    """Recompute bucket totals from the holds (tests/reconciliation): returns
    ``{"mismatches": [...], "held_total": int, "buckets": [(level, win, settled,
    held, late), …], "scoped": [(level, scope, win, wkey, settled, held, late), …]}``;
    empty mismatches = consistent."""
    cur.execute(
        "SELECT state, ceiling_musd, actual_musd, late, hour_key, day_key, scopes, month_key"
        " FROM budget_holds"
    )
    holds = cur.fetchall()
    cur.execute(
        "SELECT level, scope, win, wkey, settled_musd, held_musd, late_musd FROM budget_buckets"
    )
    got = {(r[0], r[1], r[2], r[3]): [r[4], r[5], r[6]] for r in cur.fetchall()}
    held_total = _one(cur, "SELECT COALESCE(SUM(held_musd), 0) FROM budget_buckets")
    rows = [(k[0], k[2], v[0], v[1], v[2]) for k, v in got.items()]
    scoped = [(*k, *v) for k, v in sorted(got.items())]
    return {
        "mismatches": audit_mismatches(holds, _spent_of_wallets(cur, got)),
        "held_total": held_total,
        "buckets": rows,
        "scoped": scoped,
    }
