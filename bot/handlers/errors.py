"""Last line of defence: an exception no handler expected becomes a template reply.

The user (or admin) gets the "something went wrong" template in their language (their
/lang choice, read by :mod:`bot.middlewares.languages`; in the
message's forum topic) — never the exception text — and the full traceback goes to the
log. It says "nothing was charged" only for a command (commands start no LLM call); for
a chat message this handler cannot ask the ledger about an operation, so it says nothing
about money. A failure of the database itself (read-only, full, gone) gets the
ledger-unavailable template instead, and admins are told once. When the exception *is*
Telegram refusing a send to that chat (400/403: ``TOPIC_CLOSED``,
``CHAT_WRITE_FORBIDDEN``, no rights…), nothing more is sent there.
"""

from __future__ import annotations

import logging

from aiogram import Bot, Router
from aiogram.exceptions import TelegramAPIError
from aiogram.types import ErrorEvent
from aiogram.utils.i18n import I18n
from prometheus_client import Counter

from bot.chat.delivery import send_text
from bot.chat.failures import UNDELIVERABLE, record_delivery_failure
from bot.middlewares.languages import TELEGRAM_ONLY, ReplyLanguages
from bot.middlewares.topics import in_topic_of
from bot.ops.admin_notices import AdminNotifier
from bot.storage.repos import is_storage_failure
from bot.text import templates
from bot.text.i18n import in_locale
from budget.kernel.clock import Clock
from budget.types import Refusal, RefusalReason

__all__ = ["create_error_router"]

log = logging.getLogger(__name__)


async def on_error(
    event: ErrorEvent,
    bot: Bot,
    clock: Clock,
    i18n: I18n,
    notifier: AdminNotifier,
    delivery_failures: Counter | None = None,
    languages: ReplyLanguages = TELEGRAM_ONLY,
) -> None:
    """An exception no handler expected: the template reply (module docstring)."""
    message = event.update.message
    if message is not None and isinstance(event.exception, UNDELIVERABLE):
        record_delivery_failure(
            event.exception,
            chat_id=message.chat.id,
            what="template",
            failures=delivery_failures,
        )
        return
    storage = is_storage_failure(event.exception)
    if storage:
        log.error("database failure while handling an update: %r", event.exception)
        await notifier.storage_failed("storage")
    else:
        log.error("unhandled error in a handler", exc_info=event.exception)
    if message is None:
        return
    # the sender's /lang choice, else (it cannot be read: the database failed) Telegram's
    language = await languages.of(message.from_user)
    is_command = (message.text or "").startswith("/")
    with in_locale(i18n, language):
        if storage:
            text = templates.refusal_text(Refusal(RefusalReason.UNAVAILABLE), tz="UTC")
        else:
            text = templates.error_text(0 if is_command else None)
    try:
        with in_topic_of(message):
            await send_text(bot, message.chat.id, text, clock=clock)
    except UNDELIVERABLE as exc:
        record_delivery_failure(
            exc, chat_id=message.chat.id, what="error_template", failures=delivery_failures
        )
    except TelegramAPIError as exc:
        log.warning("could not send the error template: %s", exc.message)


def create_error_router() -> Router:
    """The router whose error handler answers any failed message update."""
    router = Router(name="errors")
    router.errors.register(on_error)
    return router
