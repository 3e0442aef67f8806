"""The block a stream's stop cancels (:meth:`llm.stream.StreamControl.until_stopped`):
the provider's opening and the stream's read run in the answer's own task, and a stop
ends them there, instead of a waiter task on the stop's event beside each
(docs/decisions/303-typing-is-a-timer-until-it-is-due.md)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

__all__ = ["StopScope"]


class StopScope:
    """A block a :meth:`~llm.stream.StreamControl.stop` cancels, as :func:`asyncio.timeout`
    does with its deadline (it is one, set to "now" by the stop): its cancellation is
    swallowed at its end and :attr:`stopped` set; any other exception of the block
    propagates (:attr:`stopped` set too when a stop was what ended it).

    Args:
        get, put: read and set the control's scope (the one its stop cancels).

    Attributes:
        stopped: the block was ended by a stop (read it after the block).
    """

    __slots__ = ("_get", "_set", "_timeout", "stopped")

    def __init__(
        self,
        get: Callable[[], asyncio.Timeout | None],
        put: Callable[[asyncio.Timeout | None], None],
    ) -> None:
        self._get = get
        self._set = put
        self._timeout = asyncio.timeout(None)
        self.stopped = False

    async def __aenter__(self) -> StopScope:
        await self._timeout.__aenter__()
        self._set(self._timeout)
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: Any
    ) -> bool:
        if self._get() is self._timeout:
            self._set(None)
        try:
            await self._timeout.__aexit__(et, e, tb)
        except TimeoutError:
            if not self._timeout.expired():
                raise
            self.stopped = True
            return True  # the stop's cancellation, swallowed
        self.stopped = self._timeout.expired()
        return False
