"""Telegram Stars: ``/buy`` sends an invoice, the pre-checkout is answered at once, a
successful payment puts the payer on the plan, a refund takes it back
(``docs/access.md#telegram-stars``; :mod:`bot.access.stars`, :mod:`bot.access.sales`).

The pre-checkout handler reads memory (the plans file, the access lists), the payer's
plan and, for a subscription, their subscriptions (bounded together; decision 278) and,
for a refusal only, the payer's language (bounded:
:mod:`bot.middlewares.languages`), and answers before anything else: Telegram waits 10
seconds for it. The payment handlers are
exempt from the update rate (a ``successful_payment`` is money already taken: it is
never dropped) and the access gate lets them through.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from aiogram import Bot, F, Router
from aiogram.filters import Command, CommandObject
from aiogram.types import LabeledPrice, Message, PreCheckoutQuery
from aiogram.utils.i18n import I18n
from sqlalchemy.exc import SQLAlchemyError

from bot.access.sales import PlanSales
from bot.access.stars import (
    STARS_CURRENCY,
    check_terms,
    cuts_short,
    invoice_payload,
    owns_without_end,
    parse_payload,
)
from bot.access.store import AccessBook
from bot.access.wallet import WALLET_PREFIX, parse_wallet_payload
from bot.chat.delivery import send_text
from bot.handlers.subscriptions import (
    on_cancel_renewal,
    on_renew,
    renewing_refusal,
    send_subscription_link,
    subscription_paid,
)
from bot.handlers.unsold import refund_replacing, refund_unsold
from bot.handlers.wallet import on_topup, wallet_paid, wallet_pre_checkout, wallet_refunded
from bot.middlewares.context import UserContext
from bot.middlewares.languages import TELEGRAM_ONLY, ReplyLanguages
from bot.middlewares.rate import NOT_RATE_LIMITED
from bot.ops.admin_notices import AdminNotifier
from bot.text.i18n import in_locale
from bot.text.stars import (
    buy_line,
    buy_list_text,
    buy_none_text,
    buy_renews_line,
    buy_unknown_text,
    invoice_description,
    paid_kept_text,
    paid_text,
    payment_refunded_text,
    payments_private_text,
    plan_check_failed_text,
    plan_held_text,
    plan_owned_text,
    pre_checkout_period_text,
    pre_checkout_price_text,
    pre_checkout_refused_text,
    pre_checkout_unknown_text,
)
from bot.text.templates import format_reset
from budget.errors import BudgetError
from budget.kernel.clock import Clock
from budget.plans import Plan, Plans

__all__ = ["create_stars_router"]

log = logging.getLogger(__name__)

#: The Bot API's longest invoice title.
TITLE_MAX = 32
#: Seconds the pre-checkout waits for the payer's plan (Telegram waits 10 s in all).
PLAN_CHECK_S = 3.0


async def _plan_held(
    plan_sales: PlanSales, user_id: int, target: Plan, clock: Clock, tz: str
) -> Callable[[], str] | None:
    """The refusal (its text, to be written in the reader's language) when buying
    ``target`` would leave the user worse off or charge them twice, else ``None``
    (decision 278): they have ``target`` with no end already
    (:func:`bot.access.stars.owns_without_end`), it would cut their other plan short
    (:func:`bot.access.stars.cuts_short`), or it is a subscription and one of theirs
    still renews.

    Raises:
        budget.errors.LedgerUnavailable: the plan could not be read.
    """
    status = await plan_sales.ledger.user_status(user_id)
    current = (status.plan, status.plan_until)
    if owns_without_end(target.name, current):
        return lambda: plan_owned_text(target.title)
    if cuts_short(plan_sales.plans, target.name, current, clock.now()):
        assert status.plan is not None
        held = plan_sales.plans.by_name.get(status.plan)
        title = held.title if held is not None else status.plan
        until = status.plan_until
        return lambda: plan_held_text(
            title, None if until is None else format_reset(until, tz, with_date=True)
        )
    if target.renews:
        return await renewing_refusal(plan_sales, user_id, tz)
    return None


async def on_buy(
    message: Message,
    bot: Bot,
    clock: Clock,
    command: CommandObject,
    plan_sales: PlanSales,
    user_ctx: UserContext,
) -> None:
    """/buy lists the plans for sale; /buy NAME sends that plan's invoice in Stars."""
    plans = plan_sales.plans
    name = (command.args or "").strip()
    if not name:
        lines = [
            buy_renews_line(p.name, p.title, p.stars)
            if p.renews
            else buy_line(p.name, p.title, p.stars, p.period_days)
            for p in plans.by_name.values()
            if p.stars is not None
        ]
        first = next((p.name for p in plans.by_name.values() if p.stars is not None), "")
        text = buy_list_text(lines, first) if lines else buy_none_text()
        await send_text(bot, message.chat.id, text, clock=clock)
        return
    plan = plans.by_name.get(name)
    if plan is None or plan.stars is None:
        await send_text(bot, message.chat.id, buy_unknown_text(), clock=clock)
        return
    held = await _plan_held(plan_sales, user_ctx.user_id, plan, clock, user_ctx.tz)
    if held is not None:  # a purchase that would leave the user worse off: not sold
        await send_text(bot, message.chat.id, held(), clock=clock)
        return
    if plan.renews:
        await send_subscription_link(message, bot, clock, plan)
        return
    await bot.send_invoice(
        chat_id=message.chat.id,
        title=plan.title[:TITLE_MAX],
        description=invoice_description(plan.title, plan.period_days),
        payload=invoice_payload(plan),
        currency=STARS_CURRENCY,
        prices=[LabeledPrice(label=plan.title[:TITLE_MAX], amount=plan.stars)],
    )


async def on_pre_checkout(
    query: PreCheckoutQuery,
    bot: Bot,
    clock: Clock,
    plan_sales: PlanSales,
    access: AccessBook,
    i18n: I18n,
    languages: ReplyLanguages = TELEGRAM_ONLY,
) -> None:
    """Answer at once: ``ok`` when the plan is still sold on the invoice's terms and the
    payer may use the bot, else the refusal Telegram shows (nothing is charged), in the
    payer's language — read for a refusal only: an ``ok`` waits for nothing more."""
    refusal = await _pre_checkout_refusal(query, clock, plan_sales, access)
    if refusal is None:
        await bot.answer_pre_checkout_query(query.id, ok=True)
        return
    with in_locale(i18n, await languages.of(query.from_user)):
        text = refusal()
    await bot.answer_pre_checkout_query(query.id, ok=False, error_message=text)


async def _pre_checkout_refusal(
    query: PreCheckoutQuery, clock: Clock, plan_sales: PlanSales, access: AccessBook
) -> Callable[[], str] | None:
    """Why the pre-checkout is refused (its text), ``None`` when it is not. A wallet
    top-up's: :func:`bot.handlers.wallet.wallet_pre_checkout`."""
    payload = query.invoice_payload
    if parse_payload(payload) is None and parse_wallet_payload(payload) is None:
        log.info("pre-checkout %s refused: not an invoice of this bot", query.id)
        return pre_checkout_unknown_text
    if payload.startswith(WALLET_PREFIX):
        return await wallet_pre_checkout(query, plan_sales, access)
    plan = check_terms(plan_sales.plans, query.invoice_payload, query.currency, query.total_amount)
    banned = query.from_user.id in (await access.lists()).banned
    if plan is None or banned:
        log.info("pre-checkout %s refused (plan sold: %s)", query.id, plan is not None)
        return pre_checkout_refused_text if banned else _what_changed(query, plan_sales.plans)
    try:  # the plan and the subscriptions, bounded: Telegram waits 10 s for the answer
        async with asyncio.timeout(PLAN_CHECK_S):
            held = await _plan_held(plan_sales, query.from_user.id, plan, clock, "UTC")
    except (TimeoutError, BudgetError, SQLAlchemyError):
        return plan_check_failed_text
    if held is not None:
        log.info("pre-checkout %s refused: the payer would be worse off", query.id)
    return held


def _what_changed(query: PreCheckoutQuery, plans: Plans) -> Callable[[], str]:
    """The refusal of an invoice of a plan whose terms are not sold now: what changed
    since it was sent (the price, the period), else "no longer sold on these terms"."""
    terms = parse_payload(query.invoice_payload)
    plan = plans.by_name.get(terms.plan) if terms is not None else None
    if (
        terms is None
        or plan is None
        or plan.stars is None
        or plan.renews != terms.renews
        or query.currency != STARS_CURRENCY
        or query.total_amount != terms.stars
    ):
        return pre_checkout_refused_text
    name, stars = plan.name, plan.stars
    if stars != terms.stars:
        return lambda: pre_checkout_price_text(name, terms.stars, stars)
    return lambda: pre_checkout_period_text(name)


async def on_paid(
    message: Message,
    bot: Bot,
    clock: Clock,
    plan_sales: PlanSales,
    user_ctx: UserContext,
    notifier: AdminNotifier | None = None,
) -> None:
    """A successful payment: booked once by its charge id, the plan set, the payer told
    once; a plan no longer sold is refunded at once."""
    paid = message.successful_payment
    assert paid is not None and message.from_user is not None
    if paid.invoice_payload.startswith(WALLET_PREFIX):
        await wallet_paid(message, bot, clock, plan_sales, notifier)
        return
    terms = parse_payload(paid.invoice_payload)
    if terms is not None and terms.renews:
        await subscription_paid(message, bot, clock, plan_sales, user_ctx, terms, notifier)
        return
    user_id = message.from_user.id
    charge = paid.telegram_payment_charge_id
    plan = check_terms(plan_sales.plans, paid.invoice_payload, paid.currency, paid.total_amount)
    if plan is None or terms is None:
        await refund_unsold(message, bot, clock, notifier)
        return
    status = await plan_sales.ledger.user_status(user_id)
    current = (status.plan, status.plan_until)
    if await refund_replacing(message, bot, clock, plan_sales, current, notifier):
        return
    booked = await plan_sales.payments.book(
        charge, user_id, terms, paid.invoice_payload, current=current
    )
    applied = await plan_sales.apply(booked.payment)
    if applied is None:
        return
    if applied.until is None:  # already the plan with no end: kept (decision 278)
        text = paid_kept_text(plan.title)
    else:
        text = paid_text(plan.title, format_reset(applied.until, user_ctx.tz, with_date=True))
    await send_text(bot, message.chat.id, text, clock=clock)


async def on_refunded(message: Message, bot: Bot, clock: Clock, plan_sales: PlanSales) -> None:
    """Telegram says a payment was refunded (``refunded_payment``): take back what it
    bought, once (an admin's ``/refund`` already did: nothing more)."""
    refunded = message.refunded_payment
    assert refunded is not None
    if await wallet_refunded(message, refunded, bot, clock, plan_sales):
        return
    charge = refunded.telegram_payment_charge_id
    payment = await plan_sales.payments.get(charge)
    if payment is None or not await plan_sales.payments.claim_refund(charge, None):
        return
    await plan_sales.take_back(payment)
    text = payment_refunded_text(refunded.total_amount)
    await send_text(bot, message.chat.id, text, clock=clock)


async def on_payments_in_group(message: Message, bot: Bot, clock: Clock) -> None:
    """/buy, /topup, /cancel_renewal or /renew in a group (addressed to this bot, or
    bare): the template pointing to the private chat, where they work."""
    command = (message.text or message.caption or "/buy").split(maxsplit=1)[0].split("@", 1)[0]
    me = await bot.me()
    link = f"https://t.me/{me.username}" if me.username else "t.me"
    await send_text(bot, message.chat.id, payments_private_text(command, link), clock=clock)


def create_stars_router() -> Router:
    """/buy, /topup, /cancel_renewal, /renew, the pre-checkout and the payment messages."""
    router = Router(name="stars")
    router.pre_checkout_query.register(on_pre_checkout, flags=NOT_RATE_LIMITED)
    router.message.register(on_paid, F.successful_payment, flags=NOT_RATE_LIMITED)
    router.message.register(on_refunded, F.refunded_payment, flags=NOT_RATE_LIMITED)
    router.message.register(on_buy, Command("buy"), F.chat.type == "private")
    router.message.register(on_topup, Command("topup"), F.chat.type == "private")
    router.message.register(on_cancel_renewal, Command("cancel_renewal"), F.chat.type == "private")
    router.message.register(on_renew, Command("renew"), F.chat.type == "private")
    router.message.register(
        on_payments_in_group,
        Command("buy", "topup", "cancel_renewal", "renew"),
        F.chat.type.in_({"group", "supergroup"}),
    )
    return router
