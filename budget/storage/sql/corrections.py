"""SQLite SQL of ``/reconcile apply`` (rules in :mod:`budget.books.corrections`)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from budget.books.corrections import ApplyResult, CorrectionPlan, applies, over_limit_line
from budget.config import LedgerConfig
from budget.policy.rules import Overrides, Scope, limit_of, load_scopes, plan_in, windows_for
from budget.policy.windows import HoldKeys, WindowKeys
from budget.storage.sql.rows import book, event, overrides
from budget.storage.store import Cursor

__all__ = ["apply_corrections"]


def apply_corrections(
    cur: Cursor, cfg: LedgerConfig, now: datetime, plan: CorrectionPlan
) -> ApplyResult:
    """Book ``plan`` inside the caller's transaction (see :mod:`budget.books.corrections`)."""
    current = cfg.keys(now)
    result = ApplyResult()
    limits = overrides(cur)
    by_user, file_name, sha256 = plan.by_user, plan.file_name, plan.sha256
    for item in plan.items:
        cur.execute(
            "SELECT state, estimated, actual_musd, ceiling_musd, list_actual_musd,"
            " operation_id, user_id, hour_key, day_key, scopes, provider, month_key"
            " FROM budget_holds"
            " WHERE hold_id = ?",
            (item.hold_id,),
        )
        row = cur.fetchone()
        if row is None or not applies(item, row[0], bool(row[1]), int(row[2] or 0), int(row[3])):
            result.skipped.append(item.hold_id)
            continue
        _, _, old, ceiling, list_old, op_id, user_id, hour_key, day_key, scopes_json = row[:10]
        keys = HoldKeys(hour_key, day_key, row[11])
        moved = item.new_musd - int(old or 0)
        scopes = load_scopes(scopes_json)
        book(cur, scopes, keys, settled=moved)
        paid = item.new_musd > 0 or int(ceiling) > 0
        cur.execute(
            "UPDATE budget_holds SET actual_musd = ?, list_actual_musd = ? WHERE hold_id = ?",
            (item.new_musd, item.new_musd if paid else list_old, item.hold_id),
        )
        cur.execute(
            "UPDATE budget_operations SET committed_musd = committed_musd + ?"
            " WHERE operation_id = ?",
            (moved, op_id),
        )
        over = _lifted_over(cur, cfg, limits, scopes, keys, moved, current)
        cur.execute(
            "INSERT INTO budget_corrections (at, hold_id, provider, model, bucket, old_musd,"
            " new_musd, by_user, source_file, source_sha256, over_limit)"
            " VALUES (?,?,?,?,?,?,?,?,?,?,?)",
            (
                now.timestamp(),
                item.hold_id,
                row[10],
                item.model,
                item.bucket,
                int(old or 0),
                item.new_musd,
                by_user,
                file_name[:255],
                sha256,
                "; ".join(over) or None,
            ),
        )
        event(
            cur,
            cfg.tz,
            now,
            "correction",
            user_id=user_id,
            hold_id=item.hold_id,
            detail=f"{int(old or 0)} -> {item.new_musd} from {file_name[:80]} {sha256[:12]}",
        )
        result.changed.append(item)
        result.moved_musd += moved
        result.over_limit.extend(over)
    return result


def _lifted_over(
    cur: Cursor,
    cfg: LedgerConfig,
    limits: Overrides,
    scopes: Sequence[Scope],
    keys: HoldKeys,
    moved: int,
    current: WindowKeys,
) -> list[str]:
    """One line per window of ``scopes`` (at the hold's window ``keys``) that a
    correction of ``moved`` µUSD lifted over its limit (none when it moved down)."""
    over: list[str] = []
    if moved <= 0:
        return over
    plan = plan_in(scopes)
    for lvl, sc in scopes:
        for w in windows_for(lvl, keys):
            key = keys.key(w)
            assert key is not None
            limit = limit_of(cfg, limits, lvl, sc, w, plan)
            if limit is None:
                continue
            cur.execute(
                "SELECT settled_musd FROM budget_buckets WHERE level = ? AND"
                " scope = ? AND win = ? AND wkey = ?",
                (lvl.value, sc, w.value, key),
            )
            got = cur.fetchone()
            settled = int(got[0]) if got else 0
            if settled > limit >= settled - moved:
                closed = key != current.key(w)
                over.append(over_limit_line(lvl, sc, w, key, settled, limit, closed))
    return over
