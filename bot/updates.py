"""Polling survives an update the client cannot decode, and takes updates in small
batches.

aiogram decodes a whole ``getUpdates`` batch at once: one update whose shape its models
reject (seen with shapes newer than the installed aiogram: a ``forward_origin``, reaction
or paid-media ``type`` it does not know) fails the whole batch with
``ClientDecodeError``, the offset never advances, and polling retries the same batch
forever. :class:`SkipUndecodableUpdates`, a session middleware on ``getUpdates`` only,
decodes such a batch one update at a time, passes on those that decode, and skips the
others: logged (update id and where the model refused it, never the content), counted,
and confirmed by moving the offset past them, so polling goes on.

:class:`PollInSmallBatches` asks ``getUpdates`` for at most :data:`POLL_BATCH` updates
(issue 10): aiogram decodes a batch in one synchronous step of the event loop (~70 µs
an update: Telegram's default of 100 held the loop ~7 ms in a burst, every other task
and timer behind it) and then starts a task for each, whose first steps all become
ready together. Ten at a time cost a ``getUpdates`` round trip per ten (~1 ms on
loopback, long polling answers at once while updates wait).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

from aiogram.client.session.middlewares.base import (
    BaseRequestMiddleware,
    NextRequestMiddlewareType,
)
from aiogram.exceptions import ClientDecodeError
from aiogram.methods import GetUpdates, Response, TelegramMethod
from aiogram.methods.base import TelegramType
from aiogram.types import Update
from pydantic import ValidationError

if TYPE_CHECKING:
    from aiogram import Bot

__all__ = ["POLL_BATCH", "PollInSmallBatches", "SkipUndecodableUpdates"]

log = logging.getLogger(__name__)

#: Skipped update ids remembered, so that one seen again is counted once.
REMEMBERED = 1000
#: Updates asked of one ``getUpdates`` (Telegram's default and maximum: 100).
POLL_BATCH = 10


class PollInSmallBatches(BaseRequestMiddleware):
    """Sets ``limit`` (:data:`POLL_BATCH`) on a ``getUpdates`` that has none (see the
    module docstring); every other request passes untouched."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"PollInSmallBatches(limit={POLL_BATCH})"

    async def __call__(
        self,
        make_request: NextRequestMiddlewareType[TelegramType],
        bot: Bot,
        method: TelegramMethod[TelegramType],
    ) -> Response[TelegramType]:
        if isinstance(method, GetUpdates) and method.limit is None:
            method.limit = POLL_BATCH
        return await make_request(bot, method)


class SkipUndecodableUpdates(BaseRequestMiddleware):
    """Skips updates aiogram cannot decode (see the module docstring).

    Args:
        on_skip: called once per skipped update (a metric), if given.
    """

    __slots__ = ("_on_skip", "_skipped")

    def __init__(self, on_skip: Callable[[], None] | None = None) -> None:
        self._on_skip = on_skip
        self._skipped: dict[int, None] = {}

    def __repr__(self) -> str:
        return f"SkipUndecodableUpdates(skipped={len(self._skipped)})"

    async def __call__(
        self,
        make_request: NextRequestMiddlewareType[TelegramType],
        bot: Bot,
        method: TelegramMethod[TelegramType],
    ) -> Response[TelegramType]:
        try:
            return await make_request(bot, method)
        except ClientDecodeError as exc:
            batch = _batch(exc.data)
            if not isinstance(method, GetUpdates) or batch is None:
                raise
            good, bad = self._split(batch, bot)
            if not bad:
                raise
            if not good:
                # nothing for aiogram to confirm: move the offset past the skipped ones
                method.offset = max(bad) + 1
            # a session's make_request hands back the *result* (aiogram's annotations say
            # Response, its AiohttpSession returns ``response.result``)
            return cast(Response[TelegramType], good)

    def _split(self, batch: list[Any], bot: Bot) -> tuple[list[Update], list[int]]:
        good: list[Update] = []
        bad: list[int] = []
        for raw in batch:
            update_id = raw.get("update_id") if isinstance(raw, dict) else None
            try:
                good.append(Update.model_validate(raw, context={"bot": bot}))
            except ValidationError as err:
                if not isinstance(update_id, int):
                    continue
                bad.append(update_id)
                if update_id not in self._skipped:
                    self._skipped[update_id] = None
                    if len(self._skipped) > REMEMBERED:
                        del self._skipped[next(iter(self._skipped))]
                    where = ".".join(str(p) for p in err.errors()[0].get("loc", ()))
                    log.error(
                        "skipped update %s: the client cannot decode it (at %s)", update_id, where
                    )
                    if self._on_skip is not None:
                        self._on_skip()
        return good, bad


def _batch(data: Any) -> list[Any] | None:
    if isinstance(data, dict) and data.get("ok") is True and isinstance(data.get("result"), list):
        return cast(list[Any], data["result"])
    return None
