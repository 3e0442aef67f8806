"""Gathering a digest's posts: each subscription's new posts, and the cap on their number.

Channels are read past the subscription's last post id (a new subscription reaches back
``lookback_hours``); feeds leave out the entries the subscription already delivered (its
first digest also those dated before the last digest or ``lookback_hours``). A channel
without a public preview is marked lost and its subscriber told once; it is marked back
when a preview returns.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from datetime import timedelta

from budget.kernel.clock import Clock
from llm.sanitize import clean_prompt, has_visible
from scheduler.errors import FetchError, NoPublicPreview
from scheduler.job import DigestConfig, Gathered, Job, RunnerStats
from scheduler.run_store import RunStore
from scheduler.sources.fetch import SourceFetcher
from scheduler.tables import DigestSource, UserProfile
from scheduler.types import Notice, NoticeKind, Post, SourceKind

__all__ = ["Gatherer", "cap_posts"]

log = logging.getLogger("scheduler.runner")  # the runner's log lines keep their logger


def cap_posts(per_source: Sequence[Sequence[Post]], max_posts: int) -> list[list[Post]]:
    """Keep at most ``max_posts`` posts, the newest of each source first, round robin.

    Args:
        per_source: each source's posts, oldest first.
        max_posts: the cap.

    Returns:
        The kept posts per source (same order of sources), oldest first.
    """
    newest_first = [list(reversed(posts)) for posts in per_source]
    kept: list[list[Post]] = [[] for _ in per_source]
    total = 0
    depth = 0
    while total < max_posts and any(depth < len(p) for p in newest_first):
        for index, posts in enumerate(newest_first):
            if depth < len(posts) and total < max_posts:
                kept[index].append(posts[depth])
                total += 1
        depth += 1
    return [list(reversed(k)) for k in kept]


class Gatherer:
    """Fetches the posts of one digest (see the module docstring).

    Args:
        fetcher: channel/feed reader.
        store: the digest tables.
        clock: the one clock (the lookback).
        config: the runner's knobs (``lookback_hours``).
        stats: the runner's counters (unparseable posts).
        notify: ``async (profile, notice) -> delivered`` (the channel-lost notice).
    """

    __slots__ = ("_clock", "_config", "_fetcher", "_notify", "_stats", "_store")

    def __init__(
        self,
        *,
        fetcher: SourceFetcher,
        store: RunStore,
        clock: Clock,
        config: DigestConfig,
        stats: RunnerStats,
        notify: Callable[[UserProfile, Notice], Awaitable[bool]],
    ) -> None:
        self._fetcher = fetcher
        self._store = store
        self._clock = clock
        self._config = config
        self._stats = stats
        self._notify = notify

    def __repr__(self) -> str:
        return f"Gatherer(lookback_hours={self._config.lookback_hours})"

    async def gather(self, job: Job, profile: UserProfile) -> list[Gathered]:
        """Each subscription's posts not delivered yet, with visible text, in
        subscription order. A channel without a public preview is marked lost (the user
        told once); a source that fails to fetch is left out of this digest."""
        now = self._clock.now()
        lookback = now - timedelta(hours=self._config.lookback_hours)
        subs = await self._store.subscriptions(job.user_id)
        gathered: list[Gathered] = []
        for sub in subs:
            sub_id, last_post_id, source = sub.sub_id, sub.last_post_id, sub.source
            kind = SourceKind(source.kind)
            seen: tuple[int, ...] = ()
            try:
                if kind is SourceKind.CHANNEL:
                    fetched = await self._fetcher.fetch_channel(source.key, last_post_id)
                    title, newest = fetched.title, fetched.newest_id
                    self._stats.unparseable_posts += fetched.unparseable
                    posts = list(fetched.posts)
                    if last_post_id is None:
                        posts = [p for p in posts if p.published is None or p.published >= lookback]
                else:
                    feed = await self._fetcher.fetch_feed(source.key)
                    title, newest = feed.title, None
                    delivered = await self._store.delivered(sub_id)
                    posts = [p for p in feed.posts if p.post_id not in delivered]
                    if not delivered:  # first digest: the backlog is remembered, not sent
                        since = sub.last_digest_at or lookback
                        posts = [p for p in posts if p.published is None or p.published > since]
                    seen = tuple(p.post_id for p in feed.posts)
            except NoPublicPreview:
                await self._source_lost(job, profile, sub_id, source, sub.lost_notified)
                continue
            except FetchError as exc:
                log.warning(
                    "digest.fetch_failed user=%s source=%s: %s", job.user_id, source.key, exc
                )
                continue
            if source.preview_lost or sub.lost_notified:
                await self._store.source_back(sub_id, source.id)
            posts = [p for p in posts if has_visible(clean_prompt(p.text))]
            gathered.append(
                Gathered(
                    sub_id,
                    source.id,
                    kind,
                    source.key,
                    title or source.title,
                    posts,
                    newest,
                    seen,
                )
            )
        return gathered

    async def _source_lost(
        self, job: Job, profile: UserProfile, sub_id: int, source: DigestSource, notified: bool
    ) -> None:
        await self._store.source_lost(source.id)
        if notified:
            return
        notice = Notice(NoticeKind.CHANNEL_LOST, channel=source.key)
        if await self._notify(profile, notice):
            await self._store.lost_notified(sub_id)
