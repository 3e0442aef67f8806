"""Runtime global limits that replace their settings: a ``/limit global day …`` is kept
in the database and wins over ``BUDGET_GLOBAL_DAILY_USD`` at every start, so the
operator is told — a WARNING line at start, a line of ``/budget`` — and
``/limit global day default`` goes back to the setting (``docs/admin.md``).

Read from the ledger's status: a global window whose limit differs from its setting's
is a runtime value (the effective limit is the runtime one when there is one, else the
setting). A runtime value equal to its setting changes nothing and is not named.
"""

from __future__ import annotations

from budget.config import LedgerConfig
from budget.policy.money import usd
from budget.status import LedgerStatus
from budget.types import Level, Window

__all__ = ["SETTING_OF", "runtime_overrides"]

#: The setting of each global window's limit.
SETTING_OF = {
    Window.HOUR: "BUDGET_GLOBAL_HOURLY_USD",
    Window.DAY: "BUDGET_GLOBAL_DAILY_USD",
    Window.MONTH: "BUDGET_GLOBAL_MONTHLY_USD",
}


def runtime_overrides(status: LedgerStatus, config: LedgerConfig) -> list[str]:
    """One line per global window whose runtime limit replaces a set ``BUDGET_GLOBAL_*``
    (``global day: the runtime limit off (/limit) is used, not BUDGET_GLOBAL_DAILY_USD
    $5.000000; /limit global day default goes back to it``); empty when none does."""
    lines = []
    for b in status.buckets:
        setting = SETTING_OF.get(b.window)
        if b.level is not Level.GLOBAL or setting is None:
            continue
        configured = config.default_limit(Level.GLOBAL, "", b.window)
        if configured is None or b.limit_musd == configured:
            continue
        runtime = "off" if b.limit_musd is None else usd(b.limit_musd)
        w = b.window.value
        lines.append(
            f"global {w}: the runtime limit {runtime} (/limit) is used, not {setting}"
            f" {usd(configured)}; /limit global {w} default goes back to it"
        )
    return lines
