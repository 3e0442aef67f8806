"""/sub look-ups rate-limited per user; failed look-ups remembered."""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from scheduler.profiles import ProfileRepository
from scheduler.service import DigestService
from scheduler.types import SubscribeStatus
from tests.scheduler.scheduler_fakes import FakeFetcher
from tests.support.clocks import ManualClock

Sessions = async_sessionmaker[AsyncSession]


async def _service(
    sessions: Sessions, clock: ManualClock, fetcher: FakeFetcher, *users: int
) -> DigestService:
    profiles = ProfileRepository(sessions, clock)
    for user in users:
        await profiles.get_or_create(user, user, "en")
    return DigestService(
        sessions, clock, fetcher, profiles, lookups_per_window=3, negative_ttl_s=300
    )


async def test_lookups_beyond_the_rate_are_refused_without_a_fetch(
    sessions: Sessions, clock: ManualClock
) -> None:
    """Three look-ups a minute per user: the fourth is ``rate_limited`` with the seconds
    to wait and fetches nothing; another user is not affected; a minute later it works."""
    fetcher = FakeFetcher()
    for name in ("chan_a1", "chan_a2", "chan_a3", "chan_a4", "chan_b1"):
        fetcher.add(name, [1], datetime(2026, 3, 1, tzinfo=UTC))
    service = await _service(sessions, clock, fetcher, 1, 2)
    for name in ("chan_a1", "chan_a2", "chan_a3"):
        assert (await service.subscribe(1, f"@{name}")).status is SubscribeStatus.OK
        clock.advance(10)
    refused = await service.subscribe(1, "@chan_a4")
    assert refused.status is SubscribeStatus.RATE_LIMITED
    assert refused.retry_after_s == 30  # the first look-up leaves the window at t=60
    assert fetcher.calls == 3
    assert (await service.subscribe(2, "@chan_b1")).status is SubscribeStatus.OK
    clock.advance(30)
    assert (await service.subscribe(1, "@chan_a4")).status is SubscribeStatus.OK
    assert fetcher.calls == 5


async def test_a_failed_lookup_is_remembered_for_the_negative_ttl(
    sessions: Sessions, clock: ManualClock
) -> None:
    """/sub of a channel without preview: fetched once; asked again (by anyone) within
    300 s the same answer comes without a fetch and without using the user's rate."""
    fetcher = FakeFetcher()
    service = await _service(sessions, clock, fetcher, 1, 2)
    for user in (1, 1, 2, 1, 1):
        result = await service.subscribe(user, "@nosuchchannel1")
        assert result.status is SubscribeStatus.NO_PREVIEW
        clock.advance(1)
    assert fetcher.calls == 1
    clock.advance(300)
    assert (await service.subscribe(1, "@nosuchchannel1")).status is SubscribeStatus.NO_PREVIEW
    assert fetcher.calls == 2


async def test_forty_different_missing_channels_cost_three_fetches(
    sessions: Sessions, clock: ManualClock
) -> None:
    """The issue's flood: 40 ``/sub @nosuchchannelN`` in 8 s → 3 fetches, 37 refusals."""
    fetcher = FakeFetcher()
    service = await _service(sessions, clock, fetcher, 1)
    statuses = []
    for n in range(40):
        statuses.append((await service.subscribe(1, f"@nosuchchannel{n}")).status)
        clock.advance(0.2)
    assert fetcher.calls == 3
    assert statuses.count(SubscribeStatus.RATE_LIMITED) == 37
