"""/refund: give a Telegram Stars payment back and take back the plan it bought
(``docs/access.md#telegram-stars``; what is taken back: :mod:`bot.access.sales`), or the
wallet credit a top-up left unspent (:mod:`bot.handlers.admin.wallet_refunds`)."""

from __future__ import annotations

from aiogram import Bot
from aiogram.exceptions import TelegramAPIError
from aiogram.filters import CommandObject
from aiogram.types import Message
from aiogram.utils.i18n import I18n

from bot.access.refunds import WalletRefunds
from bot.access.sales import PlanSales, TakenBack
from bot.chat.delivery import send_text
from bot.handlers.admin.base import reply
from bot.handlers.admin.wallet_refunds import recent_topups, refund_topup
from bot.middlewares.context import ProfileStore
from bot.text.i18n import in_locale
from bot.text.stars import payment_refunded_text
from budget.kernel.clock import Clock

__all__ = ["REFUND_USAGE", "on_refund"]

REFUND_USAGE = "Usage: /refund <telegram_payment_charge_id> (/refund alone lists the latest)"
_OUTCOMES = {
    TakenBack.SHORTENED: "the plan's end is back where it was before this payment",
    TakenBack.RESTORED: "the user is back on the plan they had before it",
    TakenBack.DEFAULT: "the user is back on the default plan",
    TakenBack.ENDED: "its period had ended: no plan to take back",
    TakenBack.CHANGED: "the user's plan was changed since (by /plan or a later payment):"
    " left as it is, /plan changes it",
}


async def on_refund(
    message: Message,
    bot: Bot,
    clock: Clock,
    command: CommandObject,
    plan_sales: PlanSales,
    profiles: ProfileStore,
    i18n: I18n,
    wallet_refunds: WalletRefunds,
) -> None:
    """/refund <charge id>: ``refundStarPayment``, then the plan taken back (a top-up:
    the unspent credit taken out first); /refund alone: the latest payments."""
    charge = (command.args or "").strip()
    payments = plan_sales.payments
    if not charge:
        rows = await payments.recent()
        lines = [
            f"{p.paid_at:%Y-%m-%d %H:%M} UTC user {p.user_id}: {p.stars} Stars, {p.plan}"
            f"{' (refunded)' if p.refunded_at else ''} — {p.charge_id}"
            for p in rows
        ]
        lines += await recent_topups(plan_sales.wallet.ledger)
        await reply(bot, message, "\n".join(lines) or "No payments yet.", clock)
        return
    payment = await payments.get(charge)
    if payment is None and await refund_topup(message, bot, clock, charge, wallet_refunds):
        return
    if payment is None:
        await reply(bot, message, f"No payment {charge[:64]!r}.\n{REFUND_USAGE}", clock)
        return
    by = message.from_user.id if message.from_user else None
    if not await payments.claim_refund(charge, by):
        await reply(bot, message, "That payment was refunded already; nothing changed.", clock)
        return
    try:
        await bot.refund_star_payment(payment.user_id, charge)
    except TelegramAPIError as exc:
        await payments.unclaim_refund(charge)
        text = f"Telegram refused the refund ({exc.message[:200]}); nothing changed."
        await reply(bot, message, text, clock)
        return
    outcome = await plan_sales.take_back(payment)
    renewals = await _stop_renewals(bot, payment.user_id, charge, payment.payload)
    await reply(
        bot,
        message,
        f"Refunded {payment.stars} Stars to user {payment.user_id}; {_OUTCOMES[outcome]}"
        f".{renewals}",
        clock,
    )
    # the payer is told in their own language (a payer has a profile: they wrote /buy)
    language = (await profiles.touch(payment.user_id, payment.user_id, None)).language
    with in_locale(i18n, language or "en"):
        text = payment_refunded_text(payment.stars)
    await send_text(bot, payment.user_id, text, clock=clock)


async def _stop_renewals(bot: Bot, user_id: int, charge: str, payload: str) -> str:
    """A refunded subscription charge stops its renewals too (decision 330); what the
    admin's reply adds ("" for a one-off payment)."""
    if not payload.startswith("sub:"):
        return ""
    try:
        await bot.edit_user_star_subscription(user_id, charge, is_canceled=True)
    except TelegramAPIError as exc:
        return (
            f" Telegram did not cancel the subscription's renewals ({exc.message[:200]}):"
            " the user can /cancel_renewal."
        )
    return " The subscription's renewals are cancelled."
