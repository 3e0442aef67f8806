"""Forum topics: whatever the bot sends about a message in a topic goes to that topic.

In a forum supergroup a message in a topic has ``is_topic_message`` and its
``message_thread_id``; a send without ``message_thread_id`` lands in *General*
(Bot API, sendMessage/sendChatAction/sendPhoto: "message_thread_id — unique identifier
for the target message thread (topic) of the forum; for forum supergroups only").

Rather than threading the id through every template call, the handling of one message
runs inside :func:`in_topic_of` (set by :class:`TopicMiddleware` for every message
update, and by the error handler and the resend notices explicitly), and
:class:`TopicRequestMiddleware` — a request middleware of the bot's session — adds the
topic's ``message_thread_id`` to every Bot API call that targets *that* chat and has
none. Calls to another chat (a digest to a user's private chat) are left alone, and so
are messages in General or in groups without topics (a reply thread in a plain
supergroup also has a ``message_thread_id``, but is not a topic: nothing is added).
The scope is a context variable, so it follows the handler's task and the tasks it
starts (the typing action) and nothing else.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

from aiogram import BaseMiddleware
from aiogram.client.session.middlewares.base import (
    BaseRequestMiddleware,
    NextRequestMiddlewareType,
)
from aiogram.methods import TelegramMethod
from aiogram.methods.base import Response, TelegramType
from aiogram.types import Message, TelegramObject

if TYPE_CHECKING:
    from aiogram import Bot

__all__ = [
    "TopicMiddleware",
    "TopicRequestMiddleware",
    "current_topic",
    "in_topic",
    "in_topic_of",
    "topic_of",
]

#: (chat id, message_thread_id) of the message being handled, if it is in a topic.
_TOPIC: ContextVar[tuple[int, int] | None] = ContextVar("kopek_topic", default=None)


def topic_of(message: Message) -> int | None:
    """The forum topic ``message`` was posted in (``message_thread_id``), or ``None``
    (private chat, General, plain group, reply thread of a non-forum supergroup)."""
    if message.is_topic_message and message.message_thread_id is not None:
        return message.message_thread_id
    return None


@contextmanager
def in_topic(chat_id: int, thread_id: int | None) -> Iterator[None]:
    """Within the block, Bot API calls to ``chat_id`` go to topic ``thread_id``
    (``None``: no topic)."""
    token = _TOPIC.set((chat_id, thread_id) if thread_id is not None else None)
    try:
        yield
    finally:
        _TOPIC.reset(token)


def current_topic(chat_id: int) -> int | None:
    """The topic calls to ``chat_id`` go to in the current scope (``None``: none), so
    work that outlives the handler (a kept answer) can send there later."""
    topic = _TOPIC.get()
    return topic[1] if topic is not None and topic[0] == chat_id else None


def in_topic_of(message: Message) -> Any:
    """:func:`in_topic` for the chat and topic of ``message``."""
    return in_topic(message.chat.id, topic_of(message))


class TopicMiddleware(BaseMiddleware):
    """Outer message middleware: handles each message inside :func:`in_topic_of`."""

    async def __call__(
        self,
        handler: Callable[[TelegramObject, dict[str, Any]], Awaitable[Any]],
        event: TelegramObject,
        data: dict[str, Any],
    ) -> Any:
        if not isinstance(event, Message):
            return await handler(event, data)
        with in_topic_of(event):
            return await handler(event, data)


class TopicRequestMiddleware(BaseRequestMiddleware):
    """Adds the current topic's ``message_thread_id`` to calls for its chat."""

    async def __call__(
        self,
        make_request: NextRequestMiddlewareType[TelegramType],
        bot: Bot,
        method: TelegramMethod[TelegramType],
    ) -> Response[TelegramType]:
        topic = _TOPIC.get()
        if (
            topic is not None
            and "message_thread_id" in type(method).model_fields
            and getattr(method, "message_thread_id", None) is None
            and getattr(method, "chat_id", None) == topic[0]
        ):
            method = method.model_copy(update={"message_thread_id": topic[1]})
        return await make_request(bot, method)
