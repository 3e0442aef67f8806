"""Correct estimated bookings from a provider's usage export (``/reconcile apply``).

:func:`apply_corrections` books a :class:`~budget.reconcile.PlannedCorrection` list
in ONE ledger transaction on the store's writer thread:

* each booking still flagged estimated and still booked at the amount the report
  saw gets its new cost (``actual_musd``; for a paid key also ``list_actual_musd``);
  anything else (settled since, corrected by someone else) is skipped and reported;
* every window it counted in (the windows fixed at its grant, every level) moves by
  the difference, and so does its operation's committed money;
* each change is one row in ``budget_corrections`` (who, when, the export's file
  name and SHA-256, old and new µUSD) and one ``correction`` event — history is
  never rewritten silently, and the export export shows the booking ``corrected``;
* a correction that lifts a window over its limit is still booked (the money was
  spent) and named in the result (and in the row's ``over_limit``).

Bookings stay flagged *estimated*: their tokens are still the ceiling's assumption;
only the money follows the bill.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass, field
from datetime import datetime

from budget.money import usd_text
from budget.policy import windows_for
from budget.reconcile import PlannedCorrection
from budget.sqlite_store import SqliteStore
from budget.types import Level, Window
from budget.windows import window_keys

__all__ = ["ApplyResult", "apply_corrections"]


@dataclass(slots=True)
class ApplyResult:
    """What :func:`apply_corrections` booked.

    Attributes:
        changed: corrections booked.
        skipped: hold ids left alone (no longer estimated or changed since the report).
        moved_musd: sum of (new − old) over ``changed`` (µUSD; may be negative).
        over_limit: one line per window a correction lifted over its limit.
    """

    changed: list[PlannedCorrection] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    moved_musd: int = 0
    over_limit: list[str] = field(default_factory=list)

    def text(self) -> str:
        """Operator-facing summary."""
        sign = "+" if self.moved_musd >= 0 else "-"
        lines = [
            f"✅ {len(self.changed)} estimated bookings corrected "
            f"({sign}{usd_text(abs(self.moved_musd))}); each is a correction event."
        ]
        if self.skipped:
            lines.append(f"{len(self.skipped)} skipped: settled or corrected since the report.")
        if self.over_limit:
            lines.append("Over their limit after the correction (the money was spent):")
            lines.extend(f"• {line}" for line in self.over_limit)
        return "\n".join(lines)


async def apply_corrections(
    store: SqliteStore,
    now: datetime,
    plan: list[PlannedCorrection],
    *,
    by_user: int | None,
    file_name: str,
    sha256: str,
) -> ApplyResult:
    """Book ``plan`` in one transaction on the store's writer thread (module docstring).

    Args:
        store: the ledger's store (``Ledger.store``).
        now: the time of the correction (the clock's).
        plan: from :attr:`budget.reconcile.ReconcileReport.plan`.
        by_user: the admin's Telegram id (``None``: the command line).
        file_name, sha256: the export the figures come from.

    Raises:
        LedgerUnavailable: the ledger could not be written (nothing was changed).
    """
    tz = store.config.tz
    current = window_keys(now, tz)

    def body(cur: sqlite3.Cursor) -> ApplyResult:
        result = ApplyResult()
        overrides = store._overrides(cur)  # same package, same transaction
        for item in plan:
            cur.execute(
                "SELECT state, estimated, actual_musd, ceiling_musd, list_actual_musd,"
                " operation_id, user_id, hour_key, day_key, scopes, provider FROM budget_holds"
                " WHERE hold_id = ?",
                (item.hold_id,),
            )
            row = cur.fetchone()
            if (
                row is None
                or row[0] not in ("settled", "expired")
                or not row[1]
                or int(row[2] or 0) != item.old_musd
                or not 0 <= item.new_musd <= int(row[3])
            ):
                result.skipped.append(item.hold_id)
                continue
            _, _, old, _, list_old, op_id, user_id, hour_key, day_key, scopes_json, _ = row
            moved = item.new_musd - int(old or 0)
            scopes = [(Level(lvl), sc) for lvl, sc in json.loads(scopes_json)]
            store._book(cur, scopes, hour_key, day_key, settled=moved)
            paid = item.new_musd > 0 or int(row[3]) > 0
            cur.execute(
                "UPDATE budget_holds SET actual_musd = ?, list_actual_musd = ? WHERE hold_id = ?",
                (item.new_musd, item.new_musd if paid else list_old, item.hold_id),
            )
            cur.execute(
                "UPDATE budget_operations SET committed_musd = committed_musd + ?"
                " WHERE operation_id = ?",
                (moved, op_id),
            )
            over: list[str] = []
            if moved > 0:
                for lvl, sc in scopes:
                    for w in windows_for(lvl):
                        key = hour_key if w is Window.HOUR else day_key
                        limit = store._limit(overrides, lvl, sc, w)
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
                            scope = f" {sc}" if sc else ""
                            over.append(
                                f"{lvl.value}{scope} {w.value} {key}: {usd_text(settled)} "
                                f"over its {usd_text(limit)} limit"
                                + (" (closed window)" if closed else "")
                            )
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
            store._event(
                cur,
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

    return await store.call(store._txn, body)
