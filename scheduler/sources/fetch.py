"""Where the runner gets posts: the :class:`SourceFetcher` port and its implementation.

:class:`Fetchers` combines :class:`~scheduler.sources.tme.TmeClient` and
:class:`~scheduler.sources.feeds.FeedClient` and shares results between digests for
``memo_s`` seconds (monotonic clock): a hundred subscribers of one channel cause one
fetch per run, and concurrent digests asking for the same page wait for one request.
"""

from __future__ import annotations

import asyncio
from typing import Any, Protocol

from budget.kernel.clock import Clock
from scheduler.sources.feeds import FeedClient, FeedFetch
from scheduler.sources.tme import ChannelFetch, TmeClient

__all__ = ["Fetchers", "SourceFetcher"]


class SourceFetcher(Protocol):
    """Reads sources for the runner and the subscription service.

    Both methods raise :class:`scheduler.errors.FetchError` subclasses:
    ``NoPublicPreview`` (permanent until it comes back), ``RefusedAddress`` (feeds),
    ``FetchTooLarge`` and plain ``FetchError`` (transient).
    """

    async def fetch_channel(self, channel: str, after_id: int | None) -> ChannelFetch:
        """Posts of ``channel`` newer than ``after_id`` (``None`` = newest page)."""
        ...

    async def fetch_feed(self, url: str) -> FeedFetch:
        """The feed's current entries."""
        ...


class Fetchers:
    """The production :class:`SourceFetcher`.

    Args:
        tme: channel preview client.
        feeds: feed client (with its address guard).
        clock: monotonic clock for the memo.
        memo_s: seconds a fetch result is reused (0 = never).
    """

    __slots__ = ("_clock", "_feeds", "_memo", "_memo_s", "_tme")

    def __init__(self, tme: TmeClient, feeds: FeedClient, clock: Clock, *, memo_s: float = 300.0):
        self._tme = tme
        self._feeds = feeds
        self._clock = clock
        self._memo_s = memo_s
        self._memo: dict[tuple[str, str, int | None], tuple[float, asyncio.Future[Any]]] = {}

    def __repr__(self) -> str:
        return f"Fetchers(memo_s={self._memo_s}, memo={len(self._memo)})"

    def _lookup(self, key: tuple[str, str, int | None]) -> asyncio.Future[Any] | None:
        now = self._clock.monotonic()
        for stale in [k for k, (at, _) in self._memo.items() if now - at > self._memo_s]:
            del self._memo[stale]
        hit = self._memo.get(key)
        if hit is None:
            return None
        task = hit[1]
        if task.done() and (task.cancelled() or task.exception() is not None):
            del self._memo[key]  # failures are not memoised
            return None
        return task

    async def fetch_channel(self, channel: str, after_id: int | None) -> ChannelFetch:
        """See :class:`SourceFetcher`."""
        key = ("channel", channel, after_id)
        task = self._lookup(key)
        if task is None:
            task = asyncio.ensure_future(self._tme.fetch_since(channel, after_id))
            if self._memo_s > 0:
                self._memo[key] = (self._clock.monotonic(), task)
        result = await asyncio.shield(task)
        assert isinstance(result, ChannelFetch)
        return result

    async def fetch_feed(self, url: str) -> FeedFetch:
        """See :class:`SourceFetcher`."""
        key = ("feed", url, None)
        task = self._lookup(key)
        if task is None:
            task = asyncio.ensure_future(self._feeds.fetch(url))
            if self._memo_s > 0:
                self._memo[key] = (self._clock.monotonic(), task)
        result = await asyncio.shield(task)
        assert isinstance(result, FeedFetch)
        return result
