"""A Stars payment for terms no longer sold (a plan removed or repriced, a top-up rate
changed, a subscription's plan that no longer renews, between the pre-checkout and the
payment): refunded at once with ``refundStarPayment`` (and, for a subscription, its
renewals cancelled), the payer told. When Telegram does not take the refund, the payer
is told that, and every admin gets the charge id, the payer and Telegram's answer: the
Stars were taken and nothing was booked for them, so a person must see it.
"""

from __future__ import annotations

import logging

from aiogram import Bot
from aiogram.exceptions import TelegramAPIError, TelegramNetworkError
from aiogram.types import Message

from bot.chat.delivery import send_text
from bot.ops.admin_notices import AdminNotifier
from bot.text.stars import payment_auto_refunded_text, refund_failed_text, renewal_refunded_text
from budget.kernel.clock import Clock

__all__ = ["refund_unsold"]

log = logging.getLogger(__name__)


async def refund_unsold(
    message: Message,
    bot: Bot,
    clock: Clock,
    notifier: AdminNotifier | None,
    *,
    subscription: bool = False,
) -> None:
    """Refund the ``successful_payment`` of ``message`` (module docstring)."""
    paid = message.successful_payment
    assert paid is not None and message.from_user is not None
    user_id, charge, stars = (
        message.from_user.id,
        paid.telegram_payment_charge_id,
        paid.total_amount,
    )
    log.warning("payment %s for terms no longer sold: refunding", charge[:16])
    try:
        await bot.refund_star_payment(user_id, charge)
        if subscription:
            await bot.edit_user_star_subscription(user_id, charge, is_canceled=True)
    except (TelegramAPIError, TelegramNetworkError) as exc:
        why = exc.message[:200] if isinstance(exc, TelegramAPIError) else type(exc).__name__
        log.error("could not refund payment %s: %s", charge[:16], why)
        await send_text(bot, message.chat.id, refund_failed_text(stars), clock=clock)
        if notifier is not None:
            await notifier.broadcast(
                f"⚠️ A payment of {stars} Stars by user {user_id} was for terms no longer "
                f"sold and its automatic refund failed (Telegram: {why}). Nothing was booked "
                f"for it. Charge id: {charge}"
            )
        return
    text = renewal_refunded_text(stars) if subscription else payment_auto_refunded_text(stars)
    await send_text(bot, message.chat.id, text, clock=clock)
