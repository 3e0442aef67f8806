"""Telegram Stars subscriptions: a plan that ``renews`` in the plans file is sold as a
subscription (``docs/access.md#subscriptions``; decision 330).

* ``/buy NAME`` for such a plan answers with a link from ``createInvoiceLink`` with
  ``subscription_period`` 2,592,000 s (the Bot API's one period, 30 days): Telegram
  takes the Stars now and again every 30 days until the user cancels.
* Every charge, the first and each renewal, arrives as a ``successful_payment`` with the
  same ``sub:`` payload, ``is_recurring`` and ``subscription_expiration_date``; each is
  booked once by its own charge id (:class:`bot.access.stars.StarPayments`) and keeps the
  payer on the plan at least until that date.
* A renewal is honoured on the terms the user subscribed to while the plan still renews
  (Telegram keeps charging the price of the subscription, not the file's new one); a
  renewal of a plan that no longer renews is refunded and the subscription cancelled.
* ``/cancel_renewal`` asks Telegram to stop renewing (``editUserStarSubscription`` with
  ``is_canceled``, the latest charge naming it); the plan stays until its end.
* ``/renew`` undoes that (``is_canceled`` false): the Bot API re-enables a renewal the
  bot cancelled; one the user cancelled in Telegram is turned back on there.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime

from aiogram import Bot
from aiogram.exceptions import TelegramAPIError, TelegramNetworkError
from aiogram.types import InlineKeyboardButton, InlineKeyboardMarkup, LabeledPrice, Message

from bot.access.sales import PlanSales
from bot.access.stars import STARS_CURRENCY, PaymentTerms, invoice_payload
from bot.chat.delivery import send_text
from bot.handlers.unsold import refund_unsold
from bot.middlewares.context import UserContext
from bot.ops.admin_notices import AdminNotifier
from bot.text.stars import (
    cancel_failed_text,
    no_subscription_text,
    no_subscription_to_renew_text,
    renew_failed_text,
    renewal_cancelled_text,
    renewal_resumed_text,
    subscribe_button,
    subscribe_failed_text,
    subscribe_text,
    subscribed_text,
    subscription_description,
)
from bot.text.templates import format_reset
from budget.kernel.clock import Clock
from budget.plans import SUBSCRIPTION_DAYS, Plan

__all__ = [
    "SUBSCRIPTION_PERIOD_S",
    "on_cancel_renewal",
    "on_renew",
    "send_subscription_link",
    "subscription_paid",
]

log = logging.getLogger(__name__)

#: ``createInvoiceLink``'s ``subscription_period``: "Currently, it must always be
#: 2592000 (30 days)" (https://core.telegram.org/bots/api#createinvoicelink).
SUBSCRIPTION_PERIOD_S = SUBSCRIPTION_DAYS * 86_400
#: The Bot API's longest invoice title.
TITLE_MAX = 32


async def send_subscription_link(message: Message, bot: Bot, clock: Clock, plan: Plan) -> None:
    """/buy NAME for a plan that renews: the subscription's link as a button."""
    assert plan.stars is not None and plan.renews
    try:
        link = await bot.create_invoice_link(
            title=plan.title[:TITLE_MAX],
            description=subscription_description(plan.title),
            payload=invoice_payload(plan),
            currency=STARS_CURRENCY,
            prices=[LabeledPrice(label=plan.title[:TITLE_MAX], amount=plan.stars)],
            subscription_period=SUBSCRIPTION_PERIOD_S,
        )
    except (TelegramAPIError, TelegramNetworkError) as exc:
        log.warning("createInvoiceLink for plan %s failed: %s", plan.name, type(exc).__name__)
        await send_text(bot, message.chat.id, subscribe_failed_text(), clock=clock)
        return
    button = InlineKeyboardButton(text=subscribe_button(plan.stars), url=link)
    await bot.send_message(
        message.chat.id,
        subscribe_text(plan.title, plan.stars),
        reply_markup=InlineKeyboardMarkup(inline_keyboard=[[button]]),
    )


async def subscription_paid(
    message: Message,
    bot: Bot,
    clock: Clock,
    plan_sales: PlanSales,
    user_ctx: UserContext,
    terms: PaymentTerms,
    notifier: AdminNotifier | None = None,
) -> None:
    """A subscription's charge (module docstring): booked once, the plan set until at
    least Telegram's next charge, the payer told once; a renewal of a plan that no
    longer renews refunded and the subscription cancelled."""
    paid = message.successful_payment
    assert paid is not None and message.from_user is not None
    user_id = message.from_user.id
    charge = paid.telegram_payment_charge_id
    plan = plan_sales.plans.by_name.get(terms.plan)
    sold = plan is not None and plan.renews and paid.currency == STARS_CURRENCY
    if plan is None or not sold or paid.total_amount != terms.stars:
        await refund_unsold(message, bot, clock, notifier, subscription=True)
        return
    expires = paid.subscription_expiration_date
    status = await plan_sales.ledger.user_status(user_id)
    booked = await plan_sales.payments.book(
        charge,
        user_id,
        terms,
        paid.invoice_payload,
        current=(status.plan, status.plan_until),
        until_at_least=datetime.fromtimestamp(expires, UTC) if expires else None,
    )
    if await plan_sales.apply(booked.payment):
        until = format_reset(booked.payment.plan_until, user_ctx.tz, with_date=True)
        await send_text(bot, message.chat.id, subscribed_text(plan.title, until), clock=clock)


async def on_cancel_renewal(
    message: Message, bot: Bot, clock: Clock, plan_sales: PlanSales, user_ctx: UserContext
) -> None:
    """/cancel_renewal: Telegram stops renewing the user's subscription; the plan stays
    until the end of the period paid for."""
    await _edit_renewal(message, bot, clock, plan_sales, user_ctx, canceled=True)


async def on_renew(
    message: Message, bot: Bot, clock: Clock, plan_sales: PlanSales, user_ctx: UserContext
) -> None:
    """/renew: Telegram renews the user's subscription again (a renewal /cancel_renewal
    stopped); nothing is charged now, the next charge comes at the period's end."""
    await _edit_renewal(message, bot, clock, plan_sales, user_ctx, canceled=False)


async def _edit_renewal(
    message: Message,
    bot: Bot,
    clock: Clock,
    plan_sales: PlanSales,
    user_ctx: UserContext,
    *,
    canceled: bool,
) -> None:
    """``editUserStarSubscription`` with ``is_canceled=canceled`` for the user's latest
    unrefunded subscription charge still running; the reply says what Telegram took."""
    assert message.from_user is not None
    user_id = message.from_user.id
    payment = await plan_sales.payments.latest_subscription(user_id)
    if payment is None or payment.plan_until <= clock.now():
        none = no_subscription_text() if canceled else no_subscription_to_renew_text()
        await send_text(bot, message.chat.id, none, clock=clock)
        return
    try:
        await bot.edit_user_star_subscription(user_id, payment.charge_id, is_canceled=canceled)
    except (TelegramAPIError, TelegramNetworkError) as exc:
        log.warning("editUserStarSubscription failed: %s", type(exc).__name__)
        failed = cancel_failed_text() if canceled else renew_failed_text()
        await send_text(bot, message.chat.id, failed, clock=clock)
        return
    done = "cancelled" if canceled else "re-enabled"
    log.info("user %s %s the renewal of plan %s", user_id, done, payment.plan)
    plan = plan_sales.plans.by_name.get(payment.plan)
    title = plan.title if plan is not None else payment.plan
    until = format_reset(payment.plan_until, user_ctx.tz, with_date=True)
    text = renewal_cancelled_text if canceled else renewal_resumed_text
    await send_text(bot, message.chat.id, text(title, until), clock=clock)
