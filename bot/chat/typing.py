"""The "typing…" indicator shown while the model works, costing nothing for an answer
that comes before it is due (docs/decisions/303-typing-is-a-timer-until-it-is-due.md).

aiogram's ``ChatActionSender`` starts a task per message at once, which sleeps the
first delay in a second task (``asyncio.wait_for`` on an event); almost every answer
comes before that delay, so both were made and cancelled for nothing. :class:`Typing`
is a loop timer until the delay has passed; only then does a task send the action and
renew it, as ``ChatActionSender`` did (``sendChatAction`` every ``interval_s``, real
seconds of the event loop, as aiogram's).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from types import TracebackType

from aiogram import Bot

__all__ = ["Typing"]

log = logging.getLogger(__name__)


class Typing:
    """``async with Typing(...):`` shows "typing…" in ``chat_id`` (topic ``thread_id``)
    from ``delay_s`` seconds after entering until the block ends, renewed every
    ``interval_s`` seconds. A failed send ends the indicator (logged; it is cosmetic)."""

    __slots__ = (
        "_bot",
        "_chat_id",
        "_delay_s",
        "_interval_s",
        "_sending",
        "_task",
        "_thread_id",
        "_timer",
    )

    def __init__(
        self, bot: Bot, chat_id: int, thread_id: int | None, *, delay_s: float, interval_s: float
    ) -> None:
        self._bot = bot
        self._chat_id = chat_id
        self._thread_id = thread_id
        self._delay_s = delay_s
        self._interval_s = interval_s
        self._timer: asyncio.TimerHandle | None = None
        self._task: asyncio.Task[None] | None = None
        self._sending = False  # a sendChatAction is at Telegram

    def __repr__(self) -> str:
        return f"Typing(chat={self._chat_id}, sending={self._task is not None})"

    async def __aenter__(self) -> Typing:
        self._timer = asyncio.get_running_loop().call_later(self._delay_s, self._due)
        return self

    def _due(self) -> None:
        self._timer = None
        self._task = asyncio.ensure_future(self._send())

    async def _send(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            start = loop.time()
            self._sending = True
            try:
                await self._bot.send_chat_action(
                    chat_id=self._chat_id, action="typing", message_thread_id=self._thread_id
                )
            except Exception as exc:  # noqa: BLE001 - cosmetic: the answer goes on
                log.info("typing indicator for chat %s ended: %s", self._chat_id, exc)
                return
            finally:
                self._sending = False
            if self._task is None:  # the block ended while this was at Telegram
                return
            await asyncio.sleep(max(0.0, self._interval_s - (loop.time() - start)))

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        task, self._task = self._task, None
        if task is not None:
            if not self._sending:  # asleep until its renewal: not needed any more
                task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task  # a send at Telegram is let finish, as aiogram's sender did
