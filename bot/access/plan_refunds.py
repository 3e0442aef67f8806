"""The plan side of a Stars payment's refund: what :class:`bot.access.refunds.WalletRefunds`
does for a plan or subscription payment, in the same pending order as a top-up's
(``docs/decisions/280-a-plan-refund-is-pending-until-telegram-answers.md``):

1. the refund is recorded *pending* in the ledger (claimed by this process), then the
   payment is marked refunded in ``star_payments`` (:meth:`before_telegram`, repeated
   harmlessly by a process that completes it after a crash);
2. ``refundStarPayment``;
3. the plan it bought is taken back (:meth:`bot.access.sales.PlanSales.take_back`), a
   subscription's renewals are cancelled, the refund is marked done; the payer is told.

Telegram refusing undoes step 1 (:meth:`refused`: the payment stands again). A process
killed after step 3's take-back and before the refund is marked done leaves it pending:
the next round asks Telegram again (``CHARGE_ALREADY_REFUNDED``) and finds the plan
already taken back (``CHANGED``: nothing set twice). Admin texts are English.
"""

from __future__ import annotations

from aiogram import Bot
from aiogram.exceptions import TelegramAPIError

from bot.access.sales import PlanSales, TakenBack
from bot.storage.tables import StarPayment
from budget.wallet import RefundRow

__all__ = ["PlanRefunds"]

_OUTCOMES = {
    TakenBack.SHORTENED: "the plan's end is back where it was before this payment",
    TakenBack.RESTORED: "the user is back on the plan they had before it",
    TakenBack.DEFAULT: "the user is back on the default plan",
    TakenBack.ENDED: "its period had ended: no plan to take back",
    TakenBack.CHANGED: "the user's plan was changed since (by /plan or a later payment):"
    " left as it is, /plan changes it",
}


class PlanRefunds:
    """The plan steps of a pending refund (module docstring).

    Args:
        sales: the payments and the plans they bought.
        bot: cancels a subscription's renewals.
    """

    __slots__ = ("_bot", "sales")

    def __init__(self, sales: PlanSales, bot: Bot) -> None:
        self.sales, self._bot = sales, bot

    def __repr__(self) -> str:
        return f"PlanRefunds({self.sales!r})"

    async def payment(self, charge_id: str) -> StarPayment | None:
        """The plan payment ``charge_id`` (``None``: none)."""
        return await self.sales.payments.get(charge_id)

    async def before_telegram(self, row: RefundRow) -> None:
        """Step 1's second half: the payment marked refunded (once; again: no change)."""
        await self.sales.payments.claim_refund(row.charge_id, row.requested_by)

    async def refused(self, row: RefundRow) -> None:
        """Telegram refused: the payment stands again (its pending row is deleted)."""
        await self.sales.payments.unclaim_refund(row.charge_id)

    async def after_telegram(self, row: RefundRow) -> str:
        """Step 3 (before the row is marked done): the plan taken back and a
        subscription's renewals cancelled; what the admin's reply says of them.

        Raises:
            budget.errors.LedgerUnavailable: the plan could not be read or set (the
                refund stays pending: the next round takes it back).
        """
        payment = await self.payment(row.charge_id)
        if payment is None:  # pragma: no cover - a payment row is never deleted
            return "no payment row to take a plan back from"
        outcome = await self.sales.take_back(payment)
        renewals = await self._stop_renewals(payment)
        return f"{_OUTCOMES[outcome]}.{renewals}"

    async def _stop_renewals(self, payment: StarPayment) -> str:
        """A refunded subscription charge stops its renewals too (decision 330); what
        the admin's reply adds ("" for a one-off payment)."""
        if not payment.payload.startswith("sub:"):
            return ""
        try:
            await self._bot.edit_user_star_subscription(
                payment.user_id, payment.charge_id, is_canceled=True
            )
        except TelegramAPIError as exc:
            return (
                f" Telegram did not cancel the subscription's renewals ({exc.message[:200]}):"
                " the user can /cancel_renewal."
            )
        return " The subscription's renewals are cancelled."
