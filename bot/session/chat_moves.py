"""Calls for a group that became a supergroup go to the supergroup.

Telegram refuses every call for an upgraded group's old id with ``400 Bad Request:
group chat was migrated to a supergroup chat`` and ``parameters.migrate_to_chat_id``
(aiogram raises :class:`~aiogram.exceptions.TelegramMigrateToChat`). An answer paid
for and written for that group must not be lost to it, nor followed by a "charged"
template to the same dead id: this session middleware tells
:class:`bot.storage.moves.ChatMoves` (which re-keys the chat's rows) and makes the same
call once more for the new id, without the reply to a message of the old chat. Later
calls for the old id (the typing action's next renewal, the rest of a long answer, the
outbox) go to the new id at once.
"""

from __future__ import annotations

import logging
from typing import Any

from aiogram import Bot
from aiogram.client.session.middlewares.base import (
    BaseRequestMiddleware,
    NextRequestMiddlewareType,
)
from aiogram.exceptions import TelegramMigrateToChat
from aiogram.methods import Response, TelegramMethod
from aiogram.methods.base import TelegramType

from bot.storage.moves import ChatMoves

__all__ = ["FollowChatMoves"]

log = logging.getLogger(__name__)


class FollowChatMoves(BaseRequestMiddleware):
    """Session middleware: re-sends a call refused for a migrated group to its
    supergroup, and sends later calls for the old id there directly.

    Args:
        moves: where chats went (shared with the history and the service-message
            handler).
    """

    __slots__ = ("_moves",)

    def __init__(self, moves: ChatMoves) -> None:
        self._moves = moves

    def __repr__(self) -> str:
        return f"FollowChatMoves({self._moves!r})"

    async def __call__(
        self,
        make_request: NextRequestMiddlewareType[TelegramType],
        bot: Bot,
        method: TelegramMethod[TelegramType],
    ) -> Response[TelegramType]:
        chat_id = getattr(method, "chat_id", None)
        if isinstance(chat_id, int) and self._moves.current(chat_id) != chat_id:
            method = _for_chat(method, self._moves.current(chat_id))
        try:
            return await make_request(bot, method)
        except TelegramMigrateToChat as exc:
            old = getattr(method, "chat_id", None)
            if not isinstance(old, int) or exc.migrate_to_chat_id == old:
                raise
            new = exc.migrate_to_chat_id
            try:
                await self._moves.moved(old, new)
            except Exception:  # the move is remembered; the rows wait for the service message
                log.exception("rows of chat %s not re-keyed to %s", old, new)
            log.info("%s for chat %s sent to its supergroup %s", type(method).__name__, old, new)
            return await make_request(bot, _for_chat(method, new))


def _for_chat(method: TelegramMethod[Any], chat_id: int) -> TelegramMethod[Any]:
    """``method`` for ``chat_id``; a reply names a message of the old chat, so it goes."""
    update: dict[str, Any] = {"chat_id": chat_id}
    if getattr(method, "reply_parameters", None) is not None:
        update["reply_parameters"] = None
    if getattr(method, "reply_to_message_id", None) is not None:
        update["reply_to_message_id"] = None
    return method.model_copy(update=update)
