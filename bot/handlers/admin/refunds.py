"""/refund: give a Telegram Stars payment back and take back the plan it bought
(``docs/access.md#telegram-stars``; what is taken back: :mod:`bot.access.sales`), or the
wallet credit a top-up left unspent (:mod:`bot.handlers.admin.wallet_refunds`)."""

from __future__ import annotations

from aiogram import Bot
from aiogram.filters import CommandObject
from aiogram.types import Message

from bot.access.refunds import WalletRefunds
from bot.access.sales import PlanSales
from bot.handlers.admin.base import reply
from bot.handlers.admin.wallet_refunds import recent_topups, refund_topup
from budget.kernel.clock import Clock
from budget.kernel.shown import echoed
from budget.wallet import CHARGE_ID_MAX

__all__ = ["REFUND_USAGE", "on_refund"]

REFUND_USAGE = "Usage: /refund <telegram_payment_charge_id> (/refund alone lists the latest)"
#: The refusal of a charge id no payment can have (the ledger keeps at most
#: :data:`~budget.wallet.CHARGE_ID_MAX` characters): nothing is looked up or changed.
TOO_LONG = (
    f"No payment can have that id: a charge id is at most {CHARGE_ID_MAX} characters,"
    " this one is {length}.\n" + REFUND_USAGE
)


async def on_refund(
    message: Message,
    bot: Bot,
    clock: Clock,
    command: CommandObject,
    plan_sales: PlanSales,
    wallet_refunds: WalletRefunds,
) -> None:
    """/refund <charge id>: recorded pending, ``refundStarPayment``, then the plan taken
    back (a top-up: the unspent credit taken out first; :mod:`bot.access.refunds`);
    /refund alone: the latest payments."""
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
    if len(charge) > CHARGE_ID_MAX:
        await reply(bot, message, TOO_LONG.format(length=f"{len(charge):,}"), clock)
        return
    payment = await payments.get(charge)
    if payment is None and await refund_topup(message, bot, clock, charge, wallet_refunds):
        return
    if payment is None:
        await reply(bot, message, f"No payment '{echoed(charge)}'.\n{REFUND_USAGE}", clock)
        return
    by = message.from_user.id if message.from_user else None
    await reply(bot, message, await wallet_refunds.request_plan(charge, by), clock)
