"""The chat service's end: refuse new work, let what runs finish within a grace, stop
streams, cancel the rest (:class:`Draining`, a part of :class:`bot.chat.service.ChatService`)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from budget.kernel.clock import Clock
from budget.kernel.tasks import ended_within

__all__ = ["CANCEL_WAIT_S", "STOP_WAIT_S", "Draining"]

#: Seconds a drain gives stopped streams to settle and deliver their text before it
#: cancels them (a stop closes the provider connection at once; what remains is a
#: ledger write and one or two Bot API calls).
STOP_WAIT_S = 5.0
#: Seconds a drain gives the operations it cancelled to end (each settles its hold).
CANCEL_WAIT_S = 5.0


class Draining:
    """What :class:`~bot.chat.service.ChatService` needs to drain: its running tasks,
    its ``closing`` flag and its clock."""

    _tasks: set[asyncio.Task[object]]
    _clock: Clock
    closing: bool

    async def drain(
        self,
        grace_s: float,
        *,
        stop_streams: Callable[[], int] | None = None,
        stop_wait_s: float = STOP_WAIT_S,
    ) -> None:
        """Refuse new work; let in-flight operations finish for ``grace_s`` seconds.
        Then streams still running are stopped (``stop_streams``, e.g.
        ``StreamRegistry.stop_all("shutdown")``: each settles on what it received, as a
        Stop does, and its handler sends the text so far, marked) and given
        ``stop_wait_s`` seconds to do so; whatever is left is cancelled (the cascade
        settles interrupted calls by the ledger's rule). Seconds of the injected clock
        (``docs/decisions/020-clock-rule.md``)."""
        self.closing = True
        pending = set(self._tasks)
        if not pending:
            return
        still = await self._ended_within(pending, grace_s)
        if still and stop_streams is not None and stop_streams():
            still = await self._ended_within(still, stop_wait_s)
        for task in still:
            task.cancel()
        if still:
            await self._ended_within(still, CANCEL_WAIT_S)

    async def _ended_within(
        self, tasks: set[asyncio.Task[object]], seconds: float
    ) -> set[asyncio.Task[object]]:
        """Wait until every task of ``tasks`` ended or the clock slept ``seconds``; the
        tasks still running then (none is cancelled here)."""
        return await ended_within(tasks, seconds, self._clock)
