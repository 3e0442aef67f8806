"""Keeps aiogram's ``Response[T]`` model classes alive, so none is built per request.

aiogram validates every Bot API answer with ``Response[method.__returning__]``
(``aiogram/client/session/base.py``, ``check_response``). pydantic caches parametrized
generic models only in a ``WeakValueDictionary``: once the class built for a call is
garbage-collected, the next call builds it again (``create_generic_submodel``, about
0.1 ms, and ~4 % of the bot's samples in a 300-message burst under py-spy). This
session middleware holds one strong reference per method type, taken on its first call,
so every later lookup hits pydantic's cache.
"""

from __future__ import annotations

from typing import Any

from aiogram import Bot
from aiogram.client.session.middlewares.base import (
    BaseRequestMiddleware,
    NextRequestMiddlewareType,
)
from aiogram.methods import Response, TelegramMethod
from aiogram.methods.base import TelegramType

__all__ = ["PinResponseModels"]


class PinResponseModels(BaseRequestMiddleware):
    """Session middleware: pins ``Response[T]`` for each method type it sees."""

    __slots__ = ("_pinned",)

    def __init__(self) -> None:
        self._pinned: dict[type[Any], type[Any]] = {}

    def __repr__(self) -> str:
        return f"PinResponseModels(pinned={len(self._pinned)})"

    async def __call__(
        self,
        make_request: NextRequestMiddlewareType[TelegramType],
        bot: Bot,
        method: TelegramMethod[TelegramType],
    ) -> Response[TelegramType]:
        kind = type(method)
        if kind not in self._pinned:
            self._pinned[kind] = Response[method.__returning__]  # type: ignore[name-defined]
        return await make_request(bot, method)
