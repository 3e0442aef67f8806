"""A limit on provider calls in flight with a priority queue — per process, or across
every process of a deployment.

GLOBAL_MAX_INFLIGHT_CALLS protects the providers' concurrency quotas however many
users write at once. Waiters are served by :class:`llm.types.Priority` (chat before
digest), first come first served within a priority. A request waits for a slot
*before* it takes its ledger hold, so queued work holds no money.

:class:`PrioritySlots` is one process's semaphore. :class:`DeploymentSlots` adds a
*lease* per call in flight, kept by a :class:`CallClaimStore` that every process shares
(:mod:`llm.keys.claims` on PostgreSQL): a call first takes one of its process's slots (in
priority order), then a lease, granted only while fewer than the limit are held in the
whole deployment (a waiter asks again after a short pause: chat every 20–250 ms,
digests every 200–1,000 ms, so chat goes first across processes too, though not
strictly). In a process one waiter per priority asks at a time, the others queue
behind it first come first served: a process's asks stay one per pause however many
of its calls wait. A lease is given back when the call's slot is; a lease left by a process
that died stops counting once that process's heartbeat is older than
PROCESS_DEAD_AFTER_SECONDS, and any lease once its TTL (HOLD_TTL_SECONDS) has passed.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
import uuid
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Protocol

from budget.errors import BudgetError
from budget.kernel.clock import Clock

__all__ = ["CallClaimStore", "CallSlots", "DeploymentSlots", "PrioritySlots"]

log = logging.getLogger("kopek.llm.cascade")  # one logger for every part of the cascade


class CallSlots(Protocol):
    """What a governed attempt needs: one slot held around its hold and call."""

    def slot(self, priority: int) -> AbstractAsyncContextManager[None]:
        """``async with slots.slot(priority):`` — hold a slot for the block."""
        ...


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


class CallClaimStore(Protocol):
    """Leases of calls in flight shared by a deployment's processes
    (:class:`llm.keys.claims.CallClaims`)."""

    async def try_take(self, lease_id: str, priority: int, limit: int) -> bool:
        """Take lease ``lease_id`` if fewer than ``limit`` live leases are held.

        Raises:
            budget.errors.LedgerUnavailable: the store cannot be written.
        """
        ...

    async def give_back(self, lease_id: str) -> None:
        """Drop lease ``lease_id`` (a lease not held is ignored).

        Raises:
            budget.errors.LedgerUnavailable: the store cannot be written.
        """
        ...


#: Pause before asking again for a lease, seconds: (first, longest) per priority
#: (chat 0, digest 1; later priorities as digest).
_LEASE_POLL_S = ((0.02, 0.25), (0.2, 1.0))


class DeploymentSlots:
    """GLOBAL_MAX_INFLIGHT_CALLS across a deployment (module docstring).

    Args:
        local: this process's slots (their limit is the deployment's too).
        store: the shared leases.
        clock: the one clock (its ``sleep`` between asks).
    """

    __slots__ = ("_askers", "_clock", "_store", "local")

    def __init__(self, local: PrioritySlots, store: CallClaimStore, clock: Clock) -> None:
        self.local = local
        self._store = store
        self._clock = clock
        #: One caller per priority asks the store at a time in this process; the others
        #: wait their turn here (FIFO), not each polling the shared table: with three
        #: replicas two thirds of a burst's callers waited, and every one of them asked
        #: again and again (decision 295).
        self._askers: dict[int, asyncio.Lock] = {}

    def __repr__(self) -> str:
        return f"DeploymentSlots(local={self.local!r})"

    @asynccontextmanager
    async def slot(self, priority: int) -> AsyncIterator[None]:
        """Hold one of this process's slots and a deployment lease for the block.

        Raises:
            budget.errors.LedgerUnavailable: the leases cannot be written (no call).
        """
        first, longest = _LEASE_POLL_S[min(max(priority, 0), len(_LEASE_POLL_S) - 1)]
        asker = self._askers.get(priority)
        if asker is None:
            asker = self._askers[priority] = asyncio.Lock()
        async with self.local.slot(priority):
            lease_id = uuid.uuid4().hex
            pause = first
            async with asker:
                while not await self._store.try_take(lease_id, priority, self.local.limit):
                    await self._clock.sleep(pause)
                    pause = min(pause * 2, longest)
            try:
                yield
            finally:
                try:
                    await asyncio.shield(self._store.give_back(lease_id))
                except BudgetError:
                    log.warning("call lease %s not given back; it lapses at its TTL", lease_id)
