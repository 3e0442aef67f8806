"""One per-chat send gate for every Bot API call: Telegram's flood waits handled once.

:class:`FloodWaits` is an aiogram *session* middleware (``bot.session.middleware(...)``),
so it sees every call the bot makes — ``sendMessage``, edits, photos, documents, chat
actions — whoever makes it. It never sleeps:

* A 429 (``TelegramRetryAfter``) for a call with a ``chat_id`` closes that chat until
  ``retry_after`` seconds have passed (a later 429 can only extend it).
* While a chat is closed, no call for it leaves the process: a chat action is dropped
  (answered as done: it is cosmetic); any other call raises ``TelegramRetryAfter`` with the
  seconds left, exactly as if Telegram had said it, without asking Telegram.

Waiting is the caller's business, and never a handler's: templates for a closed chat are
dropped (``bot.chat.delivery.send_text``), a paid answer is kept in the outbox and sent by its
worker when the wait ends (``bot.chat.outbox``), digests reschedule (``scheduler.delivery``). So
a flood wait never holds one of the polling's intake slots.

Timeline (monotonic seconds): t=0 ``sendMessage`` → 429 ``retry_after=40``: chat closed
until 40. t=1..39: every send to it raises ``TelegramRetryAfter(retry_after=39..1)``
locally, ``sendChatAction`` returns ``True`` unsent; other chats are not affected. t≥40:
calls go out again.

A chat action that Telegram refuses (400/403: the bot was blocked, has no rights) is
answered as done too, and logged: it is cosmetic, and the "typing…" timer
(``bot/chat/typing.py``) would otherwise end with an exception nobody retrieves.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, cast

from aiogram.client.session.middlewares.base import (
    BaseRequestMiddleware,
    NextRequestMiddlewareType,
)
from aiogram.exceptions import TelegramBadRequest, TelegramForbiddenError, TelegramRetryAfter
from aiogram.methods import Response, SendChatAction, TelegramMethod
from aiogram.methods.base import TelegramType

from budget.kernel.clock import Clock

if TYPE_CHECKING:
    from aiogram import Bot

__all__ = ["FloodWaits"]

log = logging.getLogger(__name__)

#: Closed chats remembered at most (expired ones are pruned first; a bound on memory).
MAX_TRACKED_CHATS = 10_000


class FloodWaits(BaseRequestMiddleware):
    """Per-chat flood-wait gate (see the module docstring).

    Args:
        clock: the monotonic clock waits are measured on.
        on_drop: called with the method name for each call refused locally (a metric).
    """

    __slots__ = ("_clock", "_on_drop", "_until")

    def __init__(self, clock: Clock, on_drop: Callable[[str], None] | None = None) -> None:
        self._clock = clock
        self._on_drop = on_drop
        self._until: dict[int | str, float] = {}

    def __repr__(self) -> str:
        now = self._clock.monotonic()
        closed = sum(1 for until in self._until.values() if until > now)
        return f"FloodWaits(closed_chats={closed})"

    def wait_left(self, chat_id: int | str) -> float:
        """Seconds until ``chat_id`` may be sent to again (0 when open)."""
        until = self._until.get(chat_id)
        if until is None:
            return 0.0
        left = until - self._clock.monotonic()
        if left <= 0:
            del self._until[chat_id]
            return 0.0
        return left

    def close(self, chat_id: int | str, retry_after_s: float) -> None:
        """Close ``chat_id`` for ``retry_after_s`` seconds from now (never shortens)."""
        until = self._clock.monotonic() + max(0.0, retry_after_s)
        if len(self._until) >= MAX_TRACKED_CHATS:
            now = self._clock.monotonic()
            for key in [k for k, v in self._until.items() if v <= now]:
                del self._until[key]
        self._until[chat_id] = max(self._until.get(chat_id, 0.0), until)

    async def __call__(
        self,
        make_request: NextRequestMiddlewareType[TelegramType],
        bot: Bot,
        method: TelegramMethod[TelegramType],
    ) -> Response[TelegramType]:
        chat_id = getattr(method, "chat_id", None)
        if not isinstance(chat_id, int | str):
            return await make_request(bot, method)
        left = self.wait_left(chat_id)
        if left > 0:
            name = type(method).__name__
            if self._on_drop is not None:
                self._on_drop(name)
            if isinstance(method, SendChatAction):
                # make_request hands back the result (True for a chat action), not the
                # Response its annotation names
                return cast(Response[TelegramType], True)
            raise TelegramRetryAfter(
                method=method,
                message=f"Flood wait for chat {chat_id}: {math.ceil(left)} s left (not sent)",
                retry_after=math.ceil(left),
            )
        try:
            return await make_request(bot, method)
        except TelegramRetryAfter as exc:
            log.warning(
                "telegram asked to wait %s s for chat %s (%s)",
                exc.retry_after,
                chat_id,
                type(method).__name__,
            )
            self.close(chat_id, float(exc.retry_after))
            raise
        except (TelegramBadRequest, TelegramForbiddenError) as exc:
            if not isinstance(method, SendChatAction):
                raise
            # "typing…" is cosmetic: a chat that refuses it (blocked, no rights) must not
            # crash the "typing…" timer's send; what matters is reported by the sends
            log.info("chat action for chat %s refused: %s", chat_id, exc.message)
            return cast(Response[TelegramType], True)
