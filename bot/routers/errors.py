"""Last line of defence: an exception no handler expected becomes a template reply.

The user (or admin) gets the "something went wrong, nothing was charged" template in
their language — never the exception text — and the full traceback goes to the log.
"""

from __future__ import annotations

import logging

from aiogram import Bot, Router
from aiogram.exceptions import TelegramAPIError
from aiogram.types import ErrorEvent
from aiogram.utils.i18n import I18n

from bot import templates
from bot.delivery import send_text
from bot.i18n import in_locale, pick_language
from budget.clock import Clock

__all__ = ["create_error_router"]

log = logging.getLogger(__name__)


def create_error_router() -> Router:
    """The router whose error handler answers any failed message update."""
    router = Router(name="errors")

    @router.errors()
    async def on_error(event: ErrorEvent, bot: Bot, clock: Clock, i18n: I18n) -> None:
        log.error("unhandled error in a handler", exc_info=event.exception)
        message = event.update.message
        if message is None:
            return
        code = message.from_user.language_code if message.from_user else None
        with in_locale(i18n, pick_language(None, code)):
            text = templates.error_text()
        try:
            await send_text(bot, message.chat.id, text, clock=clock)
        except TelegramAPIError as exc:
            log.warning("could not send the error template: %s", exc.message)

    return router
