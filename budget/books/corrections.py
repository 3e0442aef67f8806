"""Correct estimated bookings from a provider's usage export (``/reconcile apply``).

A store books a :class:`CorrectionPlan` in ONE ledger transaction
(:meth:`budget.storage.base.LedgerStore.apply_corrections`, at the ledger clock's time;
the SQL is :mod:`budget.storage.sql.corrections`, the rules below are here):

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

from collections.abc import Sequence
from dataclasses import dataclass, field

from budget.books.reconcile import PlannedCorrection
from budget.policy.money import usd_text
from budget.types import Level, Window

__all__ = ["ApplyResult", "CorrectionPlan", "applies", "over_limit_line"]


@dataclass(frozen=True, slots=True)
class CorrectionPlan:
    """What ``/reconcile apply`` books, and where its figures come from.

    Attributes:
        items: :attr:`budget.books.reconcile.ReconcileReport.plan`.
        by_user: the admin's Telegram id (``None``: the command line).
        file_name, sha256: the provider's export the figures come from.
    """

    items: Sequence[PlannedCorrection]
    by_user: int | None
    file_name: str
    sha256: str


@dataclass(slots=True)
class ApplyResult:
    """What a store's ``apply_corrections`` booked.

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


def applies(
    item: PlannedCorrection, state: str | None, estimated: bool, actual_musd: int, ceiling_musd: int
) -> bool:
    """Whether ``item`` may be booked on a hold now in ``state`` (``None``: no such hold):
    still an estimated booking (settled or expired), still at the amount the report
    saw, and the new cost between 0 and the larger of the hold's ceiling and what it is
    booked at now (an expired hold's bound, ceiling + admission margin: a bill above the
    ceiling — the provider counted more input tokens — stays booked up to the bound)."""
    return (
        state in ("settled", "expired")
        and estimated
        and actual_musd == item.old_musd
        and 0 <= item.new_musd <= max(ceiling_musd, item.old_musd)
    )


def over_limit_line(
    level: Level,
    scope: str,
    window: Window,
    key: str,
    settled_musd: int,
    limit_musd: int,
    closed: bool,
) -> str:
    """Operator line for a window a correction lifted over its limit."""
    shown = f" {scope}" if scope else ""
    return (
        f"{level.value}{shown} {window.value} {key}: {usd_text(settled_musd)} "
        f"over its {usd_text(limit_musd)} limit" + (" (closed window)" if closed else "")
    )
