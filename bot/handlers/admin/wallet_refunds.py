"""/refund of a wallet top-up: the ledger takes out the credit not yet spent, then
Telegram gives the Stars back (``refundStarPayment``); if Telegram refuses, the credit
is put back (``docs/decisions/240-the-wallet-is-a-balance-level.md``)."""

from __future__ import annotations

from aiogram import Bot
from aiogram.exceptions import TelegramAPIError
from aiogram.types import Message
from aiogram.utils.i18n import I18n

from bot.chat.delivery import send_text
from bot.handlers.admin.base import reply
from bot.middlewares.context import ProfileStore
from bot.text.i18n import in_locale
from bot.text.wallet import wallet_refunded_text
from budget.kernel.clock import Clock
from budget.ledger import Ledger
from budget.policy.money import remaining_usd, usd

__all__ = ["recent_topups", "refund_topup"]


async def recent_topups(ledger: Ledger, limit: int = 10) -> list[str]:
    """The latest top-ups, one line each, for ``/refund`` alone."""
    return [
        f"{c.credited_at:%Y-%m-%d %H:%M} UTC user {c.user_id}: {c.stars} Stars, wallet"
        f" {usd(c.credit_musd)}{' (refunded)' if c.refunded_at else ''} — {c.charge_id}"
        for c in await ledger.wallet_credits(limit=limit)
    ]


async def refund_topup(
    message: Message,
    bot: Bot,
    clock: Clock,
    charge: str,
    ledger: Ledger,
    profiles: ProfileStore,
    i18n: I18n,
) -> bool:
    """Refund the top-up ``charge``, tell the admin and the payer; ``False``: no top-up
    has that charge id (nothing done)."""
    by = message.from_user.id if message.from_user else None
    done = await ledger.refund_wallet(charge, by=by)
    if done is None:
        return False
    if not done.new:
        await reply(bot, message, "That payment was refunded already; nothing changed.", clock)
        return True
    try:
        await bot.refund_star_payment(done.user_id, charge)
    except TelegramAPIError as exc:
        await ledger.unrefund_wallet(charge)
        text = f"Telegram refused the refund ({exc.message[:200]}); nothing changed."
        await reply(bot, message, text, clock)
        return True
    left = (await ledger.wallet(done.user_id)).left_musd
    await reply(
        bot,
        message,
        f"Refunded {done.stars} Stars to user {done.user_id}; {usd(done.removed_musd)} left the"
        f" wallet, {usd(done.kept_musd)} of the credit had already been spent; the wallet has"
        f" {remaining_usd(left)} now.",
        clock,
    )
    language = (await profiles.touch(done.user_id, done.user_id, None)).language
    with in_locale(i18n, language or "en"):
        text = wallet_refunded_text(done.stars, done.removed_musd, done.kept_musd, left)
    await send_text(bot, done.user_id, text, clock=clock)
    return True
