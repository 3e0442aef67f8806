"""What happens when Telegram refuses to take a message the bot sends.

A 400 (``TOPIC_CLOSED``, ``CHAT_WRITE_FORBIDDEN``, ``not enough rights to send text
messages to the chat``, ``chat not found``…) or a 403 (blocked, kicked) on a send means
that chat will not take *this* message, and retrying or sending a template about it
would only fail again (or land somewhere else). So: the failure is logged with
Telegram's description and counted (``kopek_delivery_failures_total``), nothing more is
sent to that chat for that message, and the message is recorded ``undeliverable`` — its
answer is never generated again (a redelivered update is dropped by the intake).
"""

from __future__ import annotations

import logging

from aiogram.exceptions import TelegramAPIError, TelegramBadRequest, TelegramForbiddenError
from prometheus_client import Counter

from bot.ops.metrics import delivery_failure_reason

__all__ = ["UNDELIVERABLE", "record_delivery_failure", "refuses_chat"]

log = logging.getLogger(__name__)

#: Refusals that end delivery to that chat for the message being handled.
UNDELIVERABLE = (TelegramBadRequest, TelegramForbiddenError)


def _status(exc: TelegramAPIError) -> int | None:
    if isinstance(exc, TelegramBadRequest):
        return 400
    if isinstance(exc, TelegramForbiddenError):
        return 403
    return None


def record_delivery_failure(
    exc: TelegramAPIError, *, chat_id: int, what: str, failures: Counter | None
) -> None:
    """Log Telegram's description of a refused send and count it.

    Args:
        exc: what aiogram raised (its ``message`` is Telegram's description).
        chat_id: the chat that refused.
        what: ``answer``, ``template`` or ``error_template`` (metric label).
        failures: the ``kopek_delivery_failures`` counter, if metrics are wired.
    """
    reason = delivery_failure_reason(exc.message, _status(exc))
    log.warning("could not deliver the %s to chat %s (%s): %s", what, chat_id, reason, exc.message)
    if failures is not None:
        failures.labels(what, reason).inc()


def refuses_chat(exc: TelegramAPIError) -> bool:
    """Telegram's refusal means the chat takes no message from the bot now (a 403:
    blocked, kicked; a 400 naming the chat or topic: ``CHAT_WRITE_FORBIDDEN``,
    ``TOPIC_CLOSED``, not enough rights, chat not found) — not a refusal of one text."""
    if isinstance(exc, TelegramForbiddenError):
        return True
    if isinstance(exc, TelegramBadRequest):
        return delivery_failure_reason(exc.message, 400) != "bad_request"
    return False
