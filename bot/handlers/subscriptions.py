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
* One subscription renews at a time: ``/buy`` (and the pre-checkout) of a subscription
  is refused while one of the user's renews (:func:`renewing_refusal`; decision 278).
* ``/cancel_renewal`` asks Telegram to stop renewing every subscription of the user that
  still renews (``editUserStarSubscription`` with ``is_canceled``, each one's latest
  charge naming it), records each Telegram took, and says how many; the plan stays
  until its end.
* ``/renew`` undoes that (``is_canceled`` false) for the latest subscription the bot
  stopped: the Bot API re-enables a renewal the bot cancelled; one the user cancelled in
  Telegram is turned back on there. Every reply says what is stored and what Telegram
  answered: ``/renew`` of a subscription the bot never stopped calls nothing and says so.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime

from aiogram import Bot
from aiogram.exceptions import TelegramAPIError, TelegramNetworkError
from aiogram.types import InlineKeyboardButton, InlineKeyboardMarkup, LabeledPrice, Message

from bot.access.sales import PlanSales
from bot.access.stars import STARS_CURRENCY, PaymentTerms, invoice_payload
from bot.chat.delivery import send_text
from bot.handlers.unsold import refund_replacing, refund_unsold
from bot.middlewares.context import UserContext
from bot.ops.admin_notices import AdminNotifier
from bot.storage.tables import StarPayment
from bot.text.stars import (
    cancel_failed_text,
    cancel_partly_text,
    no_subscription_text,
    no_subscription_to_renew_text,
    paid_kept_text,
    renew_failed_text,
    renew_not_cancelled_text,
    renewal_already_cancelled_text,
    renewal_cancelled_text,
    renewal_resumed_text,
    renewals_cancelled_text,
    subscribe_button,
    subscribe_failed_text,
    subscribe_text,
    subscribed_text,
    subscription_description,
    subscription_kept_text,
    subscription_renewing_text,
)
from bot.text.templates import format_reset
from budget.kernel.clock import Clock
from budget.plans import SUBSCRIPTION_DAYS, Plan

__all__ = [
    "SUBSCRIPTION_PERIOD_S",
    "on_cancel_renewal",
    "on_renew",
    "renewing_refusal",
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
    current = (status.plan, status.plan_until)
    if await refund_replacing(
        message, bot, clock, plan_sales, current, notifier, subscription=True
    ):
        return
    booked = await plan_sales.payments.book(
        charge,
        user_id,
        terms,
        paid.invoice_payload,
        current=(status.plan, status.plan_until),
        until_at_least=datetime.fromtimestamp(expires, UTC) if expires else None,
    )
    applied = await plan_sales.apply(booked.payment)
    if applied is None:
        return
    if applied.until is None:  # already the plan with no end: kept (decision 278)
        text = f"{paid_kept_text(plan.title)} {subscription_kept_text()}"
    else:
        until = format_reset(applied.until, user_ctx.tz, with_date=True)
        text = subscribed_text(plan.title, until)
    await send_text(bot, message.chat.id, text, clock=clock)


def _title(plan_sales: PlanSales, payment: StarPayment) -> str:
    """The title of the payment's plan (its name when the file no longer has it)."""
    plan = plan_sales.plans.by_name.get(payment.plan)
    return plan.title if plan is not None else payment.plan


def _renews_at(payment: StarPayment) -> datetime:
    """When Telegram charges the payment's subscription again."""
    return payment.renews_at or payment.plan_until


async def renewing_refusal(
    plan_sales: PlanSales, user_id: int, tz: str
) -> Callable[[], str] | None:
    """The refusal of a second subscription (its text, to be written in the reader's
    language) while one of the user's renews, else ``None``."""
    live = await plan_sales.payments.live_subscriptions(user_id)
    renewing = next((p for p in live if p.renewal_cancelled_at is None), None)
    if renewing is None:
        return None
    title = _title(plan_sales, renewing)
    until = format_reset(_renews_at(renewing), tz, with_date=True)
    return lambda: subscription_renewing_text(title, until)


async def on_cancel_renewal(
    message: Message, bot: Bot, clock: Clock, plan_sales: PlanSales, user_ctx: UserContext
) -> None:
    """/cancel_renewal: Telegram stops renewing each of the user's subscriptions that
    still renews; the plan stays until the end of the period paid for. The reply says
    how many Telegram stopped, or that it took none, or that none renewed."""
    assert message.from_user is not None
    user_id = message.from_user.id
    live = await plan_sales.payments.live_subscriptions(user_id)
    renewing = [p for p in live if p.renewal_cancelled_at is None]
    if not live or not renewing:
        text = (
            renewal_already_cancelled_text(_title(plan_sales, live[0]), _until(live, user_ctx))
            if live
            else no_subscription_text()
        )
        await send_text(bot, message.chat.id, text, clock=clock)
        return
    stopped = [p for p in renewing if await _edit(bot, plan_sales, p, canceled=True)]
    if not stopped:
        text = cancel_failed_text()
    elif len(stopped) < len(renewing):
        text = cancel_partly_text(len(stopped), len(renewing))
    elif len(stopped) == 1:
        text = renewal_cancelled_text(_title(plan_sales, stopped[0]), _until(live, user_ctx))
    else:
        text = renewals_cancelled_text(len(stopped), _until(live, user_ctx))
    await send_text(bot, message.chat.id, text, clock=clock)


async def on_renew(
    message: Message, bot: Bot, clock: Clock, plan_sales: PlanSales, user_ctx: UserContext
) -> None:
    """/renew: Telegram renews again the latest subscription /cancel_renewal stopped;
    nothing is charged now, the next charge comes at the period's end. A subscription
    the bot never stopped is not touched: the reply says so."""
    assert message.from_user is not None
    live = await plan_sales.payments.live_subscriptions(message.from_user.id)
    renewing = next((p for p in live if p.renewal_cancelled_at is None), None)
    if not live:
        text = no_subscription_to_renew_text()
    elif renewing is not None:
        when = format_reset(_renews_at(renewing), user_ctx.tz, with_date=True)
        text = renew_not_cancelled_text(_title(plan_sales, renewing), when)
    elif await _edit(bot, plan_sales, live[0], canceled=False):
        text = renewal_resumed_text(_title(plan_sales, live[0]), _until(live[:1], user_ctx))
    else:  # stored as stopped, and Telegram did not turn it back on
        text = renew_failed_text()
    await send_text(bot, message.chat.id, text, clock=clock)


def _until(payments: list[StarPayment], user_ctx: UserContext) -> str:
    """The latest end of the plan the ``payments`` bought, in the user's zone."""
    until = max(p.plan_until for p in payments)
    return format_reset(until, user_ctx.tz, with_date=True)


async def _edit(bot: Bot, plan_sales: PlanSales, payment: StarPayment, *, canceled: bool) -> bool:
    """``editUserStarSubscription`` with ``is_canceled=canceled`` for the subscription
    ``payment`` names; what Telegram took is recorded. ``True``: Telegram took it."""
    try:
        await bot.edit_user_star_subscription(
            payment.user_id, payment.charge_id, is_canceled=canceled
        )
    except (TelegramAPIError, TelegramNetworkError) as exc:
        log.warning("editUserStarSubscription failed: %s", type(exc).__name__)
        return False
    await plan_sales.payments.mark_renewal(payment.charge_id, cancelled=canceled)
    done = "cancelled" if canceled else "re-enabled"
    log.info("user %s %s the renewal of plan %s", payment.user_id, done, payment.plan)
    return True
