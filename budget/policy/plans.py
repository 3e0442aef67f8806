"""What the ledger enforces for one plan (the money side of a plan; the whole plan —
features, priority, prices — is :class:`budget.plans.Plan`, read from ``PLANS_FILE``).

Pure values, no I/O. Money is integer µUSD.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from budget.types import Window

__all__ = ["PlanLimits"]


@dataclass(frozen=True, slots=True)
class PlanLimits:
    """The ledger's side of one plan.

    Attributes:
        name: the plan's name (the scope of its :attr:`~budget.types.Level.PLAN` level).
        user_musd: each member's own limit by window (hour, day, month): a window that
            is absent falls back to the user level's defaults (a ``/limit user * …``
            override, else ``BUDGET_USER_*``); ``None`` means no limit there. A runtime
            ``/limit user ID …`` of one user still wins.
        total_musd: the plan's own level, everyone on it together, by window (absent or
            ``None``: no limit unless ``/limit plan NAME …`` sets one).
        max_inflight: operations running at once per member (``None``:
            USER_MAX_INFLIGHT).
        per_minute: operations started per rolling minute per member (``None``:
            USER_MAX_PER_MINUTE).
    """

    name: str
    user_musd: Mapping[Window, int | None] = field(default_factory=dict)
    total_musd: Mapping[Window, int | None] = field(default_factory=dict)
    max_inflight: int | None = None
    per_minute: int | None = None

    def __post_init__(self) -> None:
        amounts = [*self.user_musd.values(), *self.total_musd.values()]
        if any(v is not None and v < 0 for v in amounts):
            raise ValueError(f"plan {self.name!r}: limits must be >= 0")
        for window in (*self.user_musd, *self.total_musd):
            if window is Window.MINUTE:
                raise ValueError(f"plan {self.name!r}: no money limit per minute")
