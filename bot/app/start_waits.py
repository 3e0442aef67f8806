"""Telegram's flood waits on the calls a start makes (``setWebhook``, ``setMyCommands``).

Replicas starting together share Telegram's per-bot limit, so one of them may be
answered 429 with a ``retry_after``; that used to end its start with exit 1, and the
supervisor restarted it into the same limit. :class:`StartWaits` waits each
``retry_after`` out and calls again, up to :data:`START_WAIT_S` seconds of waiting in
all for one start; a wait that would go past it is not begun: :class:`StartFloodWait`
is raised at once (the caller exits 1 with its one line), since sleeping less than
Telegram asked only earns another 429.

Timeline: t=0 setWebhook → 429 ``retry_after=2``, one WARNING; t=2 setWebhook → 200;
setMyCommands → 429 ``retry_after=70``: 2 + 70 > 60, raised at t=2.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

from aiogram.exceptions import TelegramRetryAfter

from budget.kernel.clock import Clock

__all__ = ["START_WAIT_S", "StartFloodWait", "StartWaits"]

log = logging.getLogger("bot.app.factory")  # the start's other lines are logged there

#: Seconds one start waits in all for flood waits (a replica that waits longer is
#: better restarted by its supervisor than left half started).
START_WAIT_S = 60.0

T = TypeVar("T")


class StartFloodWait(Exception):
    """Telegram asked a start-up call to wait beyond what a start waits in all.

    Attributes:
        method: the Bot API method (``setWebhook``).
        retry_after: seconds Telegram asked for.
        waited_s: seconds this start had already waited.
    """

    def __init__(self, method: str, retry_after: int, waited_s: float) -> None:
        self.method = method
        self.retry_after = retry_after
        self.waited_s = waited_s
        super().__init__(
            f"Telegram asked to wait {retry_after} s before {method} (flood control; "
            f"{waited_s:g} s waited already): more than the {START_WAIT_S:g} s a start "
            "waits in all; start again later"
        )


class StartWaits:
    """Calls that wait out Telegram's flood waits within one budget.

    Args:
        clock: the one clock (its ``sleep``).
        budget_s: seconds of waiting in all (:data:`START_WAIT_S`).
    """

    __slots__ = ("_clock", "budget_s", "waited_s")

    def __init__(self, clock: Clock, budget_s: float = START_WAIT_S) -> None:
        self._clock = clock
        self.budget_s = budget_s
        self.waited_s = 0.0

    def __repr__(self) -> str:
        return f"StartWaits(waited_s={self.waited_s:g}, budget_s={self.budget_s:g})"

    async def call(self, method: str, make: Callable[[], Awaitable[T]]) -> T:
        """``await make()``, again after each 429's ``retry_after`` while the budget lasts.

        Raises:
            StartFloodWait: a ``retry_after`` beyond what is left of the budget.
            aiogram.exceptions.TelegramAPIError: any other failure of the call.
        """
        while True:
            try:
                return await make()
            except TelegramRetryAfter as exc:
                wait = float(exc.retry_after)
                if self.waited_s + wait > self.budget_s:
                    raise StartFloodWait(method, exc.retry_after, self.waited_s) from None
                log.warning(
                    "Telegram asked to wait %d s before %s (flood control, shared by "
                    "replicas starting together): waiting, then calling again",
                    exc.retry_after,
                    method,
                )
                await self._clock.sleep(wait)
                self.waited_s += wait
