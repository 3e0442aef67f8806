"""What a Stars payment does to a user's plan, and what a refund undoes
(``docs/access.md#telegram-stars``; the rows: :mod:`bot.access.stars`).

A payment puts its user on its plan until the end fixed in its row — from the end of the
same plan when the user was on it until later, else from the payment (so two payments
buy two periods back to back). Setting it is idempotent: the same row sets the same
plan and end, so a payment seen again (a repeated update, another replica, a restart
between the row and the plan) is applied at most once in effect, and told once. It
never shortens: when the user is already on the payment's plan with no end, or until
later than the payment's end, the plan is kept as it is (decision 278).

A refund takes back what the payment bought, when it is still what the user has:

* the user is on the payment's plan until the payment's end: the end goes back to where
  the payment started it — the earlier period of the same plan when it extended one,
  else the plan the user was on before (if that has not ended), else the default plan;
* the period already ended: nothing is left to take back;
* the plan was changed since (``/plan``, a later payment): it is left as it is, and the
  admin is told so (a later period bought on top stays bought).

Money the refund returns is Telegram's business (``refundStarPayment`` gives the Stars
back); no µUSD of the ledger moves: a plan is a set of limits, not credit.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from bot.access.stars import StarPayments
from bot.access.wallet import WalletSales
from bot.chat.plans import UserPlans
from bot.storage.tables import StarPayment
from budget.kernel.clock import Clock
from budget.ledger import Ledger
from budget.plans import Plans

__all__ = ["Applied", "PlanSales", "TakenBack"]

log = logging.getLogger(__name__)


class TakenBack(StrEnum):
    """What a refund did to the user's plan."""

    SHORTENED = "shortened"  # the same plan, back to the end it had before the payment
    RESTORED = "restored"  # back on the plan the user had before
    DEFAULT = "default"  # back on the default plan
    ENDED = "ended"  # the period had ended already: nothing to take back
    CHANGED = "changed"  # the plan was changed since: left as it is


@dataclass(frozen=True, slots=True)
class Applied:
    """:meth:`PlanSales.apply`'s answer to the call that applied a payment: the end of
    the user's plan now (``None``: no end — the plan was kept as it was), the payment's
    own end or a later one the plan already had."""

    until: datetime | None


class PlanSales:
    """Payments → plans (module docstring).

    Args:
        payments: the rows.
        ledger: where users' plans are.
        user_plans: told when a plan changes here.
        clock: the one clock.
        wallet: the wallet top-ups on sale (none by default).
    """

    def __init__(
        self,
        payments: StarPayments,
        ledger: Ledger,
        user_plans: UserPlans,
        clock: Clock,
        wallet: WalletSales | None = None,
    ) -> None:
        self.payments = payments
        self.ledger = ledger
        self.wallet = wallet or WalletSales(ledger, (), None)
        self._user_plans = user_plans
        self._clock = clock

    @property
    def plans(self) -> Plans:
        """The plans file's plans."""
        return self._user_plans.plans

    def __repr__(self) -> str:
        return f"PlanSales(plans={list(self.plans.by_name)})"

    async def apply(self, payment: StarPayment) -> Applied | None:
        """Put the payer on the payment's plan until its end, unless that would shorten
        the plan they have (module docstring; idempotent). The answer goes to the one
        call that recorded the payment applied (the one that tells the user); ``None``
        to every other.

        Raises:
            budget.errors.LedgerUnavailable: the plan could not be read or set (the row
                stays unapplied: the update is retried).
        """
        if payment.refunded_at is not None or payment.plan not in self.plans.by_name:
            return None
        status = await self.ledger.user_status(payment.user_id)
        until: datetime | None = payment.plan_until
        kept = status.plan == payment.plan and (
            status.plan_until is None or status.plan_until >= payment.plan_until
        )
        if kept:
            until = status.plan_until
        elif payment.plan_until > self._clock.now():
            await self.ledger.set_plan(payment.user_id, payment.plan, until=payment.plan_until)
            self._user_plans.forget(payment.user_id)
        if not await self.payments.mark_applied(payment.charge_id):
            return None
        return Applied(until)

    async def take_back(self, payment: StarPayment) -> TakenBack:
        """Undo what ``payment`` bought (module docstring), after its refund.

        Raises:
            budget.errors.LedgerUnavailable: the ledger could not be read or written.
        """
        now = self._clock.now()
        status = await self.ledger.user_status(payment.user_id)
        if payment.plan_until <= now:
            return TakenBack.ENDED
        if status.plan != payment.plan or status.plan_until != payment.plan_until:
            return TakenBack.CHANGED
        user = payment.user_id
        if payment.plan_from > now and payment.plan_before == payment.plan:
            await self.ledger.set_plan(user, payment.plan, until=payment.plan_from)
            outcome = TakenBack.SHORTENED
        elif (
            payment.plan_before is not None
            and payment.plan_before in self.plans.by_name
            and payment.plan_before != self.plans.default
            and (payment.plan_before_until is None or payment.plan_before_until > now)
        ):
            await self.ledger.set_plan(user, payment.plan_before, until=payment.plan_before_until)
            outcome = TakenBack.RESTORED
        else:
            await self.ledger.set_plan(user, None)
            outcome = TakenBack.DEFAULT
        self._user_plans.forget(user)
        log.info("payment %s refunded: plan of %s %s", payment.charge_id[:16], user, outcome)
        return outcome
