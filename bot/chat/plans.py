"""Each user's plan as the bot's features see it (streaming, digests, the queue's
concurrency, the priority of a provider-call slot), from the ledger, kept a short while.

The ledger holds every operation on the plan it reads at admission, exactly; the
features here may use a plan up to :data:`TTL_S` seconds old (a ``/plan`` or a payment
made in this process is seen at once: :meth:`UserPlans.forget`). When every plan allows
a feature and has the same priority and concurrency, nothing is read at all.
"""

from __future__ import annotations

from collections import OrderedDict

from budget.kernel.clock import Clock
from budget.ledger import Ledger
from budget.plans import Plan, Plans

__all__ = ["TTL_S", "UserPlans"]

#: Seconds a user's plan is kept in memory.
TTL_S = 30.0
#: Users kept (the least recently asked dropped beyond).
_KEPT = 10_000


class UserPlans:
    """``await plans.of(user_id)`` → the :class:`budget.plans.Plan` of the user.

    Args:
        ledger: where the plans of users are.
        plans: the plans.
        clock: the one clock (monotonic, for the cache).
    """

    __slots__ = ("_clock", "_kept", "_ledger", "_uniform", "plans")

    def __init__(self, ledger: Ledger, plans: Plans, clock: Clock) -> None:
        self._ledger = ledger
        self.plans = plans
        self._clock = clock
        self._kept: OrderedDict[int, tuple[float, Plan]] = OrderedDict()
        every = list(plans.by_name.values())
        self._uniform = all(
            (p.features, p.priority, p.limits.max_inflight)
            == (every[0].features, every[0].priority, every[0].limits.max_inflight)
            for p in every
        )

    def __repr__(self) -> str:
        return f"UserPlans(plans={list(self.plans.by_name)}, kept={len(self._kept)})"

    async def of(self, user_id: int) -> Plan:
        """The user's plan (the default one when every plan is alike here).

        Raises:
            budget.errors.LedgerUnavailable: the ledger could not be read.
        """
        if self._uniform:
            return self.plans.get(None)
        now = self._clock.monotonic()
        kept = self._kept.get(user_id)
        if kept is not None and now - kept[0] < TTL_S:
            self._kept.move_to_end(user_id)
            return kept[1]
        plan = self.plans.get(await self._ledger.plan_of(user_id))
        self._kept[user_id] = (now, plan)
        self._kept.move_to_end(user_id)
        while len(self._kept) > _KEPT:
            self._kept.popitem(last=False)
        return plan

    def forget(self, user_id: int) -> None:
        """The user's plan changed here: read it again next time."""
        self._kept.pop(user_id, None)
