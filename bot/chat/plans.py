"""Each user's plan as the bot's features see it (streaming, digests, the queue's
concurrency, the priority of a provider-call slot), from the ledger, kept a short while.

The ledger holds every operation on the plan it reads at admission, exactly; the
features here use one view of every user's plan (:meth:`budget.admin.LedgerAdmin.plans_held`,
one query for all users) read again at most every :data:`TTL_S` seconds, so a user's
first message costs no ledger read of its own (a ``/plan`` or a payment made in this
process is seen at once: :meth:`UserPlans.forget`). When every plan allows a feature and
has the same priority and concurrency, nothing is read at all.
"""

from __future__ import annotations

from budget.kernel.clock import Clock
from budget.ledger import Ledger
from budget.plans import Plan, Plans
from budget.status import PlansHeld

__all__ = ["TTL_S", "UserPlans"]

#: Seconds the view of every user's plan is kept in memory.
TTL_S = 30.0


class UserPlans:
    """``await plans.of(user_id)`` → the :class:`budget.plans.Plan` of the user.

    Args:
        ledger: where the plans of users are.
        plans: the plans.
        clock: the one clock (monotonic, for the view's age).
    """

    __slots__ = ("_clock", "_ledger", "_read_at", "_uniform", "_view", "plans")

    def __init__(self, ledger: Ledger, plans: Plans, clock: Clock) -> None:
        self._ledger = ledger
        self.plans = plans
        self._clock = clock
        self._view: PlansHeld | None = None
        self._read_at = 0.0
        every = list(plans.by_name.values())
        self._uniform = all(
            (p.features, p.priority, p.limits.max_inflight)
            == (every[0].features, every[0].priority, every[0].limits.max_inflight)
            for p in every
        )

    def __repr__(self) -> str:
        held = None if self._view is None else len(self._view.by_user)
        return f"UserPlans(plans={list(self.plans.by_name)}, held={held})"

    async def of(self, user_id: int) -> Plan:
        """The user's plan (the default one when every plan is alike here).

        Raises:
            budget.errors.LedgerUnavailable: the ledger could not be read.
        """
        if self._uniform:
            return self.plans.get(None)
        now = self._clock.monotonic()
        view = self._view
        if view is None or now - self._read_at >= TTL_S:
            view = await self._ledger.plans_held()
            self._view, self._read_at = view, now
        return self.plans.get(view.of(user_id))

    def forget(self, user_id: int) -> None:
        """The user's plan changed here: read the view again next time."""
        self._view = None
