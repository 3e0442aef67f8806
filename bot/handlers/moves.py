"""Telegram's service messages of a group upgraded to a supergroup.

The old group gets ``migrate_to_chat_id`` (from the member who upgraded it), the new
supergroup ``migrate_from_chat_id`` (from ``GroupAnonymousBot``); both are Telegram's
own messages, not a member's text, and either moves the chat's rows
(:class:`bot.storage.moves.ChatMoves`). Nothing is sent and nothing costs.
"""

from __future__ import annotations

from aiogram import F, Router
from aiogram.types import Message

from bot.storage.moves import ChatMoves

__all__ = ["create_chat_moves_router"]


async def group_upgraded(message: Message, chat_moves: ChatMoves) -> None:
    """The old group's service message: its rows go to the supergroup."""
    if message.chat.type == "group" and message.migrate_to_chat_id is not None:
        await chat_moves.moved(message.chat.id, message.migrate_to_chat_id)


async def supergroup_created(message: Message, chat_moves: ChatMoves) -> None:
    """The new supergroup's service message: the old group's rows come here."""
    if message.chat.type == "supergroup" and message.migrate_from_chat_id is not None:
        await chat_moves.moved(message.migrate_from_chat_id, message.chat.id)


def create_chat_moves_router() -> Router:
    """The router of the two migration service messages."""
    router = Router(name="chat_moves")
    router.message.register(group_upgraded, F.migrate_to_chat_id)
    router.message.register(supergroup_created, F.migrate_from_chat_id)
    return router
