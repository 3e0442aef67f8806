"""Profiles repository and the /sub service."""

from __future__ import annotations

import pytest
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from scheduler.errors import RefusedAddress, UnknownUser
from scheduler.profiles import ProfileRepository
from scheduler.service import DigestService
from scheduler.sources.feeds import FeedFetch
from scheduler.types import SourceKind, SubscribeStatus
from tests.scheduler.scheduler_fakes import FakeFetcher
from tests.support.clocks import ManualClock

Sessions = async_sessionmaker[AsyncSession]


async def test_profile_lifecycle(sessions: Sessions, clock: ManualClock) -> None:
    """Created with Telegram's language; setters validate; inactive/active round trip."""
    repo = ProfileRepository(sessions, clock)
    p = await repo.get_or_create(7, 70, "ru-RU")
    assert (p.language, p.tz, p.digest_time, p.active) == ("ru", None, "09:00", True)
    assert (await repo.set_tz(7, "Europe/Moscow")).tz == "Europe/Moscow"
    assert (await repo.set_digest_time(7, "7:05")).digest_time == "07:05"
    with pytest.raises(ValueError):
        await repo.set_digest_time(7, "25:00")
    with pytest.raises(ValueError):
        await repo.set_tz(7, "Mars/Olympus")
    with pytest.raises(ValueError):
        await repo.set_language(7, "fr")
    with pytest.raises(UnknownUser):
        await repo.set_language(8, "en")
    await repo.mark_inactive(7)
    assert (await repo.get(7)).active is False  # type: ignore[union-attr]
    await repo.mark_active(7)
    assert (await repo.get(7)).active is True  # type: ignore[union-attr]


class GuardedFetcher(FakeFetcher):
    """Feeds: 10.0.0.1 is refused like the real address guard does."""

    async def fetch_feed(self, url: str) -> FeedFetch:
        if "10.0.0.1" in url or "127.0.0.1" in url:
            raise RefusedAddress(url, "10.0.0.1", "10.0.0.1")
        return FeedFetch(url, "Feed", ())


async def test_subscribe_outcomes(sessions: Sessions, clock: ManualClock) -> None:
    """ok, already, invalid, no_preview, refused_address, too_many; unsub; list."""
    fetcher = GuardedFetcher()
    fetcher.add("channel_a", [1], clock.now())
    fetcher.add("channel_b", [1], clock.now())
    repo = ProfileRepository(sessions, clock)
    service = DigestService(sessions, clock, fetcher, repo, max_subscriptions=2)
    await repo.get_or_create(1, 10)
    assert (await service.subscribe(1, "t.me/channel_a")).status is SubscribeStatus.OK
    assert (await service.subscribe(1, "@Channel_A")).status is SubscribeStatus.ALREADY
    assert (await service.subscribe(1, "@x")).status is SubscribeStatus.INVALID
    assert (await service.subscribe(1, "@nopreview")).status is SubscribeStatus.NO_PREVIEW
    refused = await service.subscribe(1, "http://10.0.0.1/feed")
    assert refused.status is SubscribeStatus.REFUSED_ADDRESS
    assert (await service.subscribe(1, "https://e.org/rss")).status is SubscribeStatus.OK
    too_many = await service.subscribe(1, "@channel_b")
    assert too_many.status is SubscribeStatus.TOO_MANY and too_many.limit == 2
    subs = await service.list_subscriptions(1)
    assert [(s.source.kind, s.source.key) for s in subs] == [
        (SourceKind.CHANNEL, "channel_a"),
        (SourceKind.FEED, "https://e.org/rss"),
    ]
    assert (await service.unsubscribe(1, "@channel_a")).status is SubscribeStatus.OK
    assert (await service.unsubscribe(1, "@channel_a")).status is SubscribeStatus.NOT_SUBSCRIBED
    assert (await service.digest_off(1)).digest_enabled is False
