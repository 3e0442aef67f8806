"""The summary cache's single flight against a slow database read (a race seen under load)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from scheduler.cache import CacheKey, Made, SummaryCache
from tests.support.clocks import ManualClock

KEY = CacheKey("tme:channel_a", 1, "0" * 64, "en", "v1")


class Watched(dict[CacheKey, "asyncio.Future[str | None]"]):
    """The in-flight table, telling when a caller found a leader to wait for."""

    def __init__(self) -> None:
        super().__init__()
        self.joined = asyncio.Event()

    def get(self, key: CacheKey, default: object = None) -> asyncio.Future[str | None] | None:  # type: ignore[override]
        found = super().get(key)
        if found is not None:
            self.joined.set()
        return found


class SlowFirstRead(SummaryCache):
    """The first ``get`` reads the database, then returns only when ``release`` is set:
    a read that was answered before another caller's write but reaches its caller after."""

    __slots__ = ("entered", "inflight", "reads", "release", "stored")

    def __init__(self, sessions: async_sessionmaker[AsyncSession]) -> None:
        super().__init__(sessions, ManualClock(datetime(2026, 3, 2, 9, 0, tzinfo=UTC)))
        self.entered = asyncio.Event()
        self.release = asyncio.Event()
        self.stored = asyncio.Event()
        self.reads = 0
        self.inflight = Watched()
        self._inflight = self.inflight

    async def put(self, key: CacheKey, made: Made) -> None:
        await super().put(key, made)
        self.stored.set()

    async def get(self, key: CacheKey) -> str | None:
        self.reads += 1
        first = self.reads == 1
        found = await super().get(key)
        if first:
            self.entered.set()
            await self.release.wait()
        return found


async def test_a_slow_read_never_makes_a_summary_twice(
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    cache = SlowFirstRead(sessions)
    made: list[str] = []

    async def make() -> Made:
        made.append("summary")
        return Made("summary", "groq", "llama")

    slow = asyncio.create_task(cache.get_or_make(KEY, make))
    await cache.entered.wait()  # the slow caller has read "nothing there"
    fast = asyncio.create_task(cache.get_or_make(KEY, make))
    # the fast caller either waits for the slow one (in flight) or makes and stores
    # the summary itself before the slow caller's stale "nothing there" arrives
    outcome = [asyncio.create_task(e.wait()) for e in (cache.inflight.joined, cache.stored)]
    _, pending = await asyncio.wait(outcome, return_when=asyncio.FIRST_COMPLETED)
    for task in pending:
        task.cancel()
    cache.release.set()
    results = await asyncio.gather(slow, fast)
    assert made == ["summary"], "the summary was made once"
    assert sorted(served.hit for served in results) == [False, True]
    assert {served.summary for served in results} == {"summary"}
    assert (
        await SummaryCache(sessions, ManualClock(datetime(2026, 3, 2, tzinfo=UTC))).get(KEY)
        == "summary"
    )
