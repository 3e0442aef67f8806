"""/refund of a wallet top-up: recorded pending and booked, then Telegram gives the
Stars back (``refundStarPayment``), then marked done — an order a crash cannot split
(:mod:`bot.access.refunds`; decision 300)."""

from __future__ import annotations

from aiogram import Bot
from aiogram.types import Message

from bot.access.refunds import WalletRefunds
from bot.handlers.admin.base import reply
from budget.kernel.clock import Clock
from budget.ledger import Ledger
from budget.policy.money import usd
from budget.wallet import CreditEntry

__all__ = ["recent_topups", "refund_topup"]


async def recent_topups(ledger: Ledger, limit: int = 10) -> list[str]:
    """The latest top-ups, one line each, for ``/refund`` alone."""
    return [
        f"{c.credited_at:%Y-%m-%d %H:%M} UTC user {c.user_id}: {c.stars} Stars, wallet"
        f" {usd(c.credit_musd)}{_refund_mark(c)} — {c.charge_id}"
        for c in await ledger.wallet_credits(limit=limit)
    ]


def _refund_mark(credit: CreditEntry) -> str:
    if credit.refund_state == "pending":  # booked; Telegram has not said yes yet
        return " (refund pending: its credit is out of the wallet)"
    return " (refunded)" if credit.refunded_at else ""


async def refund_topup(
    message: Message, bot: Bot, clock: Clock, charge: str, refunds: WalletRefunds
) -> bool:
    """Refund the top-up ``charge`` and tell the admin what happened (the payer is told
    by :class:`~bot.access.refunds.WalletRefunds`); ``False``: no top-up has that charge
    id (nothing done)."""
    by = message.from_user.id if message.from_user else None
    text = await refunds.request(charge, by)
    if text is None:
        return False
    await reply(bot, message, text, clock)
    return True
