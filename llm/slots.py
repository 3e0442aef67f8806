"""A process-wide limit on provider calls in flight with a priority queue.

GLOBAL_MAX_INFLIGHT_CALLS protects the providers' concurrency quotas however many
users write at once. Waiters are served by :class:`llm.types.Priority` (chat before
digest), first come first served within a priority. A request waits for a slot
*before* it takes its ledger hold, so queued work holds no money.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

__all__ = ["PrioritySlots"]


class PrioritySlots:
    """A semaphore whose waiters are ordered by priority (lower first).

    Args:
        limit: slots, ≥ 1.

    Raises:
        ValueError: ``limit`` < 1.
    """

    __slots__ = ("_in_use", "_limit", "_seq", "_waiters", "max_in_use")

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError("limit must be >= 1")
        self._limit = limit
        self._in_use = 0
        self._seq = itertools.count()
        self._waiters: list[tuple[int, int, asyncio.Future[None]]] = []
        self.max_in_use = 0

    @property
    def limit(self) -> int:
        """Number of slots."""
        return self._limit

    @property
    def in_use(self) -> int:
        """Slots taken now."""
        return self._in_use

    @property
    def waiting(self) -> int:
        """Callers queued for a slot."""
        return sum(1 for _, _, fut in self._waiters if not fut.done())

    def _prune(self) -> None:
        while self._waiters and self._waiters[0][2].done():
            heapq.heappop(self._waiters)

    async def acquire(self, priority: int) -> None:
        """Wait for a slot. Cancellation while waiting leaves no slot taken."""
        self._prune()
        if self._in_use < self._limit and not self._waiters:
            self._take()
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._waiters, (priority, next(self._seq), fut))
        try:
            await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():
                # the slot had been handed over just before the cancellation
                self.release()
            raise

    def _take(self) -> None:
        self._in_use += 1
        self.max_in_use = max(self.max_in_use, self._in_use)

    def release(self) -> None:
        """Return a slot; it goes to the most urgent waiter, if any."""
        self._in_use -= 1
        while self._waiters:
            _, _, fut = heapq.heappop(self._waiters)
            if not fut.done():
                self._take()
                fut.set_result(None)
                return

    @asynccontextmanager
    async def slot(self, priority: int) -> AsyncIterator[None]:
        """``async with slots.slot(priority):`` — hold a slot for the block."""
        await self.acquire(priority)
        try:
            yield
        finally:
            self.release()

    def __repr__(self) -> str:
        return f"PrioritySlots(in_use={self._in_use}/{self._limit}, waiting={self.waiting})"
