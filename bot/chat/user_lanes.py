"""Every user's chat messages in arrival order, as :class:`bot.chat.service.ChatService`
admits them: a message's place in its user's queue is its place among this process's
messages of that user plus, with replicas sharing a PostgreSQL database
(:mod:`bot.chat.lanes`), the user's earlier unfinished messages in that chat held by the
other live replicas. Lanes are dropped when empty, so the map does not grow without bound.
"""

from __future__ import annotations

import asyncio

from bot.chat.lanes import POLL_S, LaneStore
from bot.chat.user_queue import MessageKey, UserQueue
from budget.errors import HoldRefused
from budget.kernel.clock import Clock

__all__ = ["UserLanes"]


class UserLanes:
    """Each user's :class:`~bot.chat.user_queue.UserQueue` (``shared``: the other
    replicas' unfinished messages, ``None`` for one process)."""

    __slots__ = ("_clock", "_lanes", "_shared")

    def __init__(self, shared: LaneStore | None, clock: Clock) -> None:
        self._shared = shared
        self._clock = clock
        self._lanes: dict[int, UserQueue] = {}

    def __len__(self) -> int:
        return len(self._lanes)

    def __contains__(self, user_id: object) -> bool:
        return user_id in self._lanes

    def __getitem__(self, user_id: int) -> UserQueue:
        return self._lanes[user_id]

    def arrive(self, user_id: int, key: MessageKey) -> None:
        """Put ``key`` at the end of its user's queue (no await: the arrival order)."""
        lane = self._lanes.get(user_id)
        if lane is None:
            lane = self._lanes[user_id] = UserQueue()
        if key not in lane.order:
            lane.order.append(key)

    def depart(self, user_id: int, key: MessageKey) -> None:
        """Take ``key`` out of its user's queue, waking the messages waiting behind it."""
        lane = self._lanes.get(user_id)
        if lane is None or key not in lane.order:
            return
        lane.order.remove(key)
        lane.notify()
        if not lane.order:
            del self._lanes[user_id]

    async def place(self, user_id: int, key: MessageKey) -> int:
        """``key``'s place in its user's queue (0 = first): this process's messages
        before it, plus (shared) the other live replicas' unfinished earlier ones.

        Raises:
            budget.errors.LedgerUnavailable: the shared queue cannot be read.
        """
        place = self._lanes[user_id].order.index(key)
        if self._shared is not None and key[1] > 0:
            place += await self._shared.ahead(user_id, key[0], key[1])
        return place

    async def running_ahead(self, user_id: int, key: MessageKey) -> bool:
        """Whether an earlier message of the user is surely being answered (what a refusal
        may say): this process's, or one a replica whose connection is not gone runs
        (:meth:`bot.chat.lanes.LaneStore.running_ahead`); an unreadable database: no."""
        if self._lanes[user_id].order.index(key) > 0:
            return True
        if self._shared is None or key[1] <= 0:
            return False
        try:
            return await self._shared.running_ahead(user_id, key[0], key[1]) > 0
        except HoldRefused:
            return False

    async def wait_turn(self, user_id: int) -> None:
        """Until one of this process's messages of the user ends or (shared) for
        :data:`bot.chat.lanes.POLL_S` seconds."""
        lane = self._lanes[user_id]
        if self._shared is None:
            await lane.changed.wait()
            return
        changed = asyncio.ensure_future(lane.changed.wait())
        pause = asyncio.ensure_future(self._clock.sleep(POLL_S))
        try:
            await asyncio.wait({changed, pause}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in (changed, pause):
                waiter.cancel()
            await asyncio.gather(changed, pause, return_exceptions=True)
