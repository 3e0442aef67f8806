"""One user's chat messages in arrival order, as :class:`bot.chat.service.ChatService`
keeps them (USER_MAX_INFLIGHT run, USER_QUEUE_MAX more wait, the rest are refused)."""

from __future__ import annotations

import asyncio

__all__ = ["MessageKey", "UserQueue"]

#: A message's place in its user's queue: (chat id, message id).
MessageKey = tuple[int, int]


class UserQueue:
    """One user's messages in arrival order: the first USER_MAX_INFLIGHT run, the next
    USER_QUEUE_MAX wait, anything after that is refused."""

    __slots__ = ("changed", "order")

    def __init__(self) -> None:
        self.order: list[MessageKey] = []
        self.changed = asyncio.Event()

    def notify(self) -> None:
        """Wake every waiter of the current event, then arm a fresh one."""
        self.changed.set()
        self.changed = asyncio.Event()
