"""A Stars payment for terms no longer sold (a plan removed or repriced, a top-up rate
changed, a subscription's plan that no longer renews, between the pre-checkout and the
payment): refunded at once with ``refundStarPayment`` (and, for a subscription, its
renewals cancelled), the payer told. When Telegram does not take the refund, the payer
is told that, and every admin gets the charge id, the payer and Telegram's answer: the
Stars were taken and nothing was booked for them, so a person must see it.
"""

from __future__ import annotations

import logging
from datetime import datetime

from aiogram import Bot
from aiogram.exceptions import TelegramAPIError, TelegramNetworkError
from aiogram.types import Message

from bot.access.sales import PlanSales
from bot.access.stars import cuts_short, parse_payload
from bot.chat.delivery import send_text
from bot.ops.admin_notices import AdminNotifier
from bot.text.stars import (
    payment_auto_refunded_text,
    payment_replaced_refunded_text,
    refund_failed_text,
    renewal_refunded_text,
)
from budget.kernel.clock import Clock

__all__ = ["refund_replacing", "refund_unsold"]

log = logging.getLogger(__name__)


async def refund_unsold(
    message: Message,
    bot: Bot,
    clock: Clock,
    notifier: AdminNotifier | None,
    *,
    subscription: bool = False,
    told: str | None = None,
    why: str = "terms no longer sold",
) -> None:
    """Refund the ``successful_payment`` of ``message`` (module docstring); ``told``: the
    payer's text once refunded (default: the terms are no longer sold), ``why``: the
    reason in the log and the admins' notice."""
    paid = message.successful_payment
    assert paid is not None and message.from_user is not None
    user_id, charge, stars = (
        message.from_user.id,
        paid.telegram_payment_charge_id,
        paid.total_amount,
    )
    log.warning("payment %s for %s: refunding", charge[:16], why)
    try:
        await bot.refund_star_payment(user_id, charge)
        if subscription:
            await bot.edit_user_star_subscription(user_id, charge, is_canceled=True)
    except (TelegramAPIError, TelegramNetworkError) as exc:
        answer = exc.message[:200] if isinstance(exc, TelegramAPIError) else type(exc).__name__
        log.error("could not refund payment %s: %s", charge[:16], answer)
        await send_text(bot, message.chat.id, refund_failed_text(stars), clock=clock)
        if notifier is not None:
            await notifier.broadcast(
                f"⚠️ A payment of {stars} Stars by user {user_id} was for {why} and its "
                f"automatic refund failed (Telegram: {answer}). Nothing was booked for it. "
                f"Charge id: {charge}"
            )
        return
    text = renewal_refunded_text(stars) if subscription else payment_auto_refunded_text(stars)
    await send_text(bot, message.chat.id, told if told is not None else text, clock=clock)


async def refund_replacing(
    message: Message,
    bot: Bot,
    clock: Clock,
    plan_sales: PlanSales,
    current: tuple[str | None, datetime | None],
    notifier: AdminNotifier | None,
    *,
    subscription: bool = False,
) -> bool:
    """Refund the ``successful_payment`` of ``message`` (and cancel it, a subscription's)
    when its plan would replace the payer's ``current`` plan (its name and end) while that
    still has time left — what the pre-checkout refuses, paid anyway when two invoices
    passed it one after the other (decision 278). ``True``: refunded (or its refund
    failed, the payer and the admins told), nothing booked; ``False``: not such a payment,
    or one booked before (an update seen again: its booking stands).

    Raises:
        budget.errors.LedgerUnavailable, sqlalchemy.exc.SQLAlchemyError: the payments
            could not be read.
    """
    paid = message.successful_payment
    assert paid is not None
    terms = parse_payload(paid.invoice_payload)
    if terms is None or not cuts_short(plan_sales.plans, terms.plan, current, clock.now()):
        return False
    if await plan_sales.payments.get(paid.telegram_payment_charge_id) is not None:
        return False
    held = plan_sales.plans.by_name.get(current[0] or "")
    title = held.title if held is not None else (current[0] or "")
    told = payment_replaced_refunded_text(title, paid.total_amount, subscription=subscription)
    why = "a plan that would replace the payer's plan with time left"
    await refund_unsold(
        message, bot, clock, notifier, subscription=subscription, told=told, why=why
    )
    return True
