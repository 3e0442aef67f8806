"""Last line of defence: an exception no handler expected becomes a template reply.

The user (or admin) gets the "something went wrong" template in their language — never
the exception text — and the full traceback goes to the log. A failure of the database
itself (read-only, full, gone) gets the ledger-unavailable template instead, and admins
are told once.
"""

from __future__ import annotations

import logging

from aiogram import Bot, Router
from aiogram.exceptions import TelegramAPIError
from aiogram.types import ErrorEvent
from aiogram.utils.i18n import I18n

from bot import templates
from bot.admin_notify import AdminNotifier
from bot.delivery import send_text
from bot.i18n import in_locale, pick_language
from bot.store import is_storage_failure
from budget.clock import Clock
from budget.types import Refusal, RefusalReason

__all__ = ["create_error_router"]

log = logging.getLogger(__name__)


def create_error_router() -> Router:
    """The router whose error handler answers any failed message update."""
    router = Router(name="errors")

    @router.errors()
    async def on_error(
        event: ErrorEvent, bot: Bot, clock: Clock, i18n: I18n, notifier: AdminNotifier
    ) -> None:
        storage = is_storage_failure(event.exception)
        if storage:
            log.error("database failure while handling an update: %r", event.exception)
            await notifier.storage_failed("storage")
        else:
            log.error("unhandled error in a handler", exc_info=event.exception)
        message = event.update.message
        if message is None:
            return
        code = message.from_user.language_code if message.from_user else None
        with in_locale(i18n, pick_language(None, code)):
            if storage:
                text = templates.refusal_text(Refusal(RefusalReason.UNAVAILABLE), tz="UTC")
            else:
                text = templates.error_text()
        try:
            await send_text(bot, message.chat.id, text, clock=clock)
        except TelegramAPIError as exc:
            log.warning("could not send the error template: %s", exc.message)

    return router
