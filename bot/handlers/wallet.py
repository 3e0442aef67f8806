"""The prepaid wallet's Stars: ``/topup`` sends an invoice, the pre-checkout of a top-up
is answered at once, a successful payment credits the wallet once by its charge id, a
refund (Telegram's ``refunded_payment``) takes out the credit not yet spent
(``docs/access.md#the-wallet``; :mod:`bot.access.wallet`, :mod:`budget.wallet`).

The pre-checkout, payment and refund handlers of :mod:`bot.handlers.stars` hand wallet
payloads (``wallet:…``) to the functions here; they follow the same rules (memory only
before the pre-checkout's answer, no rate limit on money already taken).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from aiogram import Bot
from aiogram.filters import CommandObject
from aiogram.types import LabeledPrice, Message, PreCheckoutQuery, RefundedPayment

from bot.access.sales import PlanSales
from bot.access.store import AccessBook
from bot.chat.delivery import send_text
from bot.handlers.unsold import refund_unsold
from bot.ops.admin_notices import AdminNotifier
from bot.text.wallet import (
    topup_invoice_description,
    topup_invoice_title,
    topup_line,
    topup_list_text,
    topup_none_text,
    topup_unknown_text,
    wallet_paid_text,
    wallet_pre_checkout_refused_text,
    wallet_refunded_text,
)
from budget.kernel.clock import Clock

__all__ = ["on_topup", "wallet_paid", "wallet_pre_checkout", "wallet_refunded"]

log = logging.getLogger(__name__)


async def on_topup(
    message: Message, bot: Bot, clock: Clock, command: CommandObject, plan_sales: PlanSales
) -> None:
    """/topup lists the amounts on sale; /topup N sends the invoice of N Stars."""
    sales = plan_sales.wallet
    arg = (command.args or "").strip()
    if not sales.offers:
        await send_text(bot, message.chat.id, topup_none_text(), clock=clock)
        return
    if not arg:
        rate = sales.musd_per_star or 0
        lines = [topup_line(stars, stars * rate) for stars in sales.offers]
        text = topup_list_text(lines, sales.offers[0])
        await send_text(bot, message.chat.id, text, clock=clock)
        return
    terms = sales.terms(int(arg)) if arg.isdigit() and len(arg) <= 9 else None
    if terms is None:
        await send_text(bot, message.chat.id, topup_unknown_text(), clock=clock)
        return
    title = topup_invoice_title()[:32]
    await bot.send_invoice(
        chat_id=message.chat.id,
        title=title,
        description=topup_invoice_description(terms.credit_musd),
        payload=terms.payload,
        currency="XTR",
        prices=[LabeledPrice(label=title, amount=terms.stars)],
    )


async def wallet_pre_checkout(
    query: PreCheckoutQuery, plan_sales: PlanSales, access: AccessBook
) -> Callable[[], str] | None:
    """Why a top-up's pre-checkout is refused (its text, written in the payer's language
    by :func:`bot.handlers.stars.on_pre_checkout`); ``None``: it is still sold on the
    invoice's terms and the payer may use the bot."""
    terms = plan_sales.wallet.check(query.invoice_payload, query.currency, query.total_amount)
    banned = query.from_user.id in (await access.lists()).banned
    if terms is None or banned:
        log.info("top-up pre-checkout %s refused (sold: %s)", query.id, terms is not None)
        return wallet_pre_checkout_refused_text
    return None


async def wallet_paid(
    message: Message,
    bot: Bot,
    clock: Clock,
    plan_sales: PlanSales,
    notifier: AdminNotifier | None = None,
) -> None:
    """A top-up paid: credited once by its charge id, the payer thanked once; terms no
    longer sold are refunded at once.

    Raises:
        budget.errors.LedgerUnavailable: the credit could not be booked (the update is
            handled again: it is money already taken).
    """
    paid = message.successful_payment
    assert paid is not None and message.from_user is not None
    user_id, charge = message.from_user.id, paid.telegram_payment_charge_id
    sales = plan_sales.wallet
    terms = sales.check(paid.invoice_payload, paid.currency, paid.total_amount)
    if terms is None:
        await refund_unsold(message, bot, clock, notifier)
        return
    booked = await sales.ledger.credit_wallet(charge, user_id, terms.stars, terms.musd_per_star)
    if booked.new:
        left = (await sales.ledger.wallet(user_id)).left_musd
        text = wallet_paid_text(booked.credit_musd, left)
        await send_text(bot, message.chat.id, text, clock=clock)


async def wallet_refunded(
    message: Message, refunded: RefundedPayment, bot: Bot, clock: Clock, plan_sales: PlanSales
) -> bool:
    """Telegram refunded a payment: when it credited a wallet, take out what of it is
    not spent yet, once, and tell the payer. ``False``: it was no top-up."""
    ledger = plan_sales.wallet.ledger
    done = await ledger.refund_wallet(refunded.telegram_payment_charge_id)
    if done is None:
        return False
    if done.new:
        left = (await ledger.wallet(done.user_id)).left_musd
        text = wallet_refunded_text(done.stars, done.removed_musd, done.kept_musd, left)
        await send_text(bot, message.chat.id, text, clock=clock)
    return True
