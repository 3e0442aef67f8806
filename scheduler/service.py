"""What the bot's handlers call for /sub, /unsub, /subs, /digest_time, /digest_on, /digest_off.

Every method returns a value the bot renders with its templates; nothing here builds
user-facing text. A channel is checked at /sub time (its preview page is fetched once):
a channel without a public preview is refused with ``no_preview`` instead of producing
empty digests later; a feed URL passes the address guard (``refused_address``;
``unresolved`` when its host resolves to no address: the guard fails closed, and the
reply says why).

Look-ups are bounded: each user may make ``lookups_per_window`` source look-ups (fetches
at /sub time) per ``lookup_window_s`` seconds (``rate_limited`` beyond, with the seconds
to wait), and a failed look-up (no preview, refused address, unreachable, too large) is
remembered for ``negative_ttl_s`` seconds: asking again within that time answers from
memory without a fetch. Both use the injected clock's monotonic time.
"""

from __future__ import annotations

import logging
import math
from collections import deque
from dataclasses import dataclass

from sqlalchemy import delete, func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from budget.kernel.clock import Clock
from scheduler.errors import (
    FetchError,
    InvalidSource,
    NoPublicPreview,
    RefusedAddress,
    UnknownUser,
)
from scheduler.profiles import Profile, ProfileRepository
from scheduler.sources.feeds import AddressGuard
from scheduler.sources.fetch import SourceFetcher
from scheduler.sources.parse import parse_source
from scheduler.tables import DigestSource, DigestSubscription, UserProfile
from scheduler.types import SourceKind, SourceRef, SubscribeResult, SubscribeStatus

__all__ = ["DigestService", "Subscription"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Subscription:
    """One line of /subs.

    Attributes:
        source: the channel or feed.
        title: last seen title (``""`` if unknown).
        preview_lost: the channel's public preview has disappeared.
    """

    source: SourceRef
    title: str
    preview_lost: bool


class DigestService:
    """Subscription and digest-preference commands.

    Args:
        session_factory: async sessions on the app's engine.
        clock: the one clock.
        fetcher: validates a source at /sub time.
        profiles: the profile repository (digest time/on/off).
        max_subscriptions: subscriptions per user (``too_many`` beyond).
        lookups_per_window: source look-ups one user may make per window (SUB_LOOKUPS_PER_MINUTE).
        lookup_window_s: the window, in seconds.
        negative_ttl_s: seconds a failed look-up is remembered (SUB_NEGATIVE_CACHE_SECONDS;
            0 = not remembered).
        guard: the feeds' address guard: a feed it refuses before any look-up (a
            literal private or loopback address) is ``refused_address`` without
            spending one of the user's look-ups (``None``: every feed spends one).
    """

    __slots__ = (
        "_clock",
        "_failed",
        "_fetcher",
        "_guard",
        "_lookups",
        "_max",
        "_negative_ttl_s",
        "_per_window",
        "_profiles",
        "_sessions",
        "_window_s",
    )

    #: Most failed look-ups remembered at once (oldest forgotten first).
    NEGATIVE_CACHE_SIZE = 1024

    def __init__(
        self,
        session_factory: async_sessionmaker[AsyncSession],
        clock: Clock,
        fetcher: SourceFetcher,
        profiles: ProfileRepository,
        *,
        max_subscriptions: int = 50,
        lookups_per_window: int = 5,
        lookup_window_s: float = 60.0,
        negative_ttl_s: float = 300.0,
        guard: AddressGuard | None = None,
    ) -> None:
        self._sessions = session_factory
        self._guard = guard
        self._clock = clock
        self._fetcher = fetcher
        self._profiles = profiles
        self._max = max_subscriptions
        self._per_window = lookups_per_window
        self._window_s = lookup_window_s
        self._negative_ttl_s = negative_ttl_s
        self._lookups: dict[int, deque[float]] = {}
        self._failed: dict[SourceRef, tuple[float, SubscribeStatus]] = {}

    def __repr__(self) -> str:
        return f"DigestService(max_subscriptions={self._max})"

    async def _find(self, session: AsyncSession, user_id: int, ref: SourceRef) -> int | None:
        return (
            await session.execute(
                select(DigestSubscription.id)
                .join(DigestSource, DigestSource.id == DigestSubscription.source_id)
                .where(
                    DigestSubscription.user_id == user_id,
                    DigestSource.kind == ref.kind.value,
                    DigestSource.key == ref.key,
                )
            )
        ).scalar_one_or_none()

    def _remembered_failure(self, ref: SourceRef) -> SubscribeStatus | None:
        now = self._clock.monotonic()
        for key in [k for k, (until, _) in self._failed.items() if until <= now]:
            del self._failed[key]
        hit = self._failed.get(ref)
        return hit[1] if hit is not None else None

    def _remember_failure(self, ref: SourceRef, status: SubscribeStatus) -> None:
        if self._negative_ttl_s <= 0:
            return
        while len(self._failed) >= self.NEGATIVE_CACHE_SIZE:
            del self._failed[next(iter(self._failed))]
        self._failed[ref] = (self._clock.monotonic() + self._negative_ttl_s, status)

    def _take_lookup(self, user_id: int) -> int:
        """Count one look-up for ``user_id``; 0 when allowed, else seconds to wait."""
        now = self._clock.monotonic()
        for uid in [u for u, q in self._lookups.items() if q and q[-1] <= now - self._window_s]:
            del self._lookups[uid]  # users idle for a whole window are forgotten
        times = self._lookups.setdefault(user_id, deque())
        while times and times[0] <= now - self._window_s:
            times.popleft()
        if len(times) >= self._per_window:
            return max(1, math.ceil(times[0] + self._window_s - now))
        times.append(now)
        return 0

    def _refused_without_lookup(self, url: str) -> bool:
        return self._guard is not None and self._guard.refused_without_lookup(url)

    async def _validate(self, ref: SourceRef) -> tuple[SubscribeStatus, str]:
        try:
            if ref.kind is SourceKind.CHANNEL:
                fetched = await self._fetcher.fetch_channel(ref.key, None)
                return SubscribeStatus.OK, fetched.title
            feed = await self._fetcher.fetch_feed(ref.key)
            return SubscribeStatus.OK, feed.title
        except RefusedAddress as exc:
            log.info("sub.refused_address source=%s: %s", ref.key, exc)
            if exc.host and not exc.address:  # the name resolved to nothing (DNS)
                return SubscribeStatus.UNRESOLVED, ""
            return SubscribeStatus.REFUSED_ADDRESS, ""
        except NoPublicPreview:
            return SubscribeStatus.NO_PREVIEW, ""
        except FetchError as exc:
            log.warning("sub.fetch_failed source=%s: %s", ref.key, exc)
            return SubscribeStatus.UNAVAILABLE, ""

    async def subscribe(
        self, user_id: int, argument: str, *, max_subscriptions: int | None = None
    ) -> SubscribeResult:
        """/sub: follow a channel or feed (``max_subscriptions``: this user's cap, e.g.
        their plan's; ``None``: the service's).

        Returns:
            ``ok`` (with the title), ``already``, ``invalid``, ``no_preview``,
            ``refused_address``, ``unresolved`` (the feed's host resolved to no
            address), ``too_many`` (with ``limit``), ``unavailable`` or
            ``rate_limited`` (with ``retry_after_s``). A failure may come from the
            negative cache (no fetch).

        Raises:
            UnknownUser: no profile (the bot creates it on every update first).
        """
        try:
            ref = parse_source(argument)
        except InvalidSource:
            return SubscribeResult(SubscribeStatus.INVALID)
        async with self._sessions() as session:
            if await session.get(UserProfile, user_id) is None:
                raise UnknownUser(user_id)
            if await self._find(session, user_id, ref) is not None:
                return SubscribeResult(SubscribeStatus.ALREADY, ref)
            count = (
                await session.execute(
                    select(func.count())
                    .select_from(DigestSubscription)
                    .where(DigestSubscription.user_id == user_id)
                )
            ).scalar_one()
        cap = self._max if max_subscriptions is None else max_subscriptions
        if count >= cap:
            return SubscribeResult(SubscribeStatus.TOO_MANY, ref, limit=cap)
        remembered = self._remembered_failure(ref)
        if remembered is not None:
            return SubscribeResult(remembered, ref)
        if ref.kind is SourceKind.FEED and self._refused_without_lookup(ref.key):
            log.info("sub.refused_address source=%s: no look-up made", ref.key)
            return SubscribeResult(SubscribeStatus.REFUSED_ADDRESS, ref)
        wait_s = self._take_lookup(user_id)
        if wait_s:
            return SubscribeResult(SubscribeStatus.RATE_LIMITED, ref, retry_after_s=wait_s)
        status, title = await self._validate(ref)
        if status is not SubscribeStatus.OK:
            self._remember_failure(ref, status)
            return SubscribeResult(status, ref)
        now = self._clock.now()
        try:
            async with self._sessions() as session, session.begin():
                source = (
                    await session.execute(
                        select(DigestSource).where(
                            DigestSource.kind == ref.kind.value, DigestSource.key == ref.key
                        )
                    )
                ).scalar_one_or_none()
                if source is None:
                    source = DigestSource(kind=ref.kind.value, key=ref.key, title=title[:256])
                    session.add(source)
                    await session.flush()
                else:
                    source.preview_lost = False
                    if title:
                        source.title = title[:256]
                session.add(
                    DigestSubscription(
                        user_id=user_id, source_id=source.id, created_at=now, lost_notified=False
                    )
                )
        except IntegrityError:
            return SubscribeResult(SubscribeStatus.ALREADY, ref)  # a concurrent /sub won
        return SubscribeResult(SubscribeStatus.OK, ref, title)

    async def unsubscribe(self, user_id: int, argument: str) -> SubscribeResult:
        """/unsub: returns ``ok``, ``not_subscribed`` or ``invalid``."""
        try:
            ref = parse_source(argument)
        except InvalidSource:
            return SubscribeResult(SubscribeStatus.INVALID)
        async with self._sessions() as session, session.begin():
            sub_id = await self._find(session, user_id, ref)
            if sub_id is None:
                return SubscribeResult(SubscribeStatus.NOT_SUBSCRIBED, ref)
            await session.execute(delete(DigestSubscription).where(DigestSubscription.id == sub_id))
        return SubscribeResult(SubscribeStatus.OK, ref)

    async def list_subscriptions(self, user_id: int) -> list[Subscription]:
        """/subs: the user's subscriptions in the order they were made."""
        async with self._sessions() as session:
            rows = (
                await session.execute(
                    select(DigestSource)
                    .join(DigestSubscription, DigestSubscription.source_id == DigestSource.id)
                    .where(DigestSubscription.user_id == user_id)
                    .order_by(DigestSubscription.id)
                )
            ).scalars()
            return [
                Subscription(SourceRef(SourceKind(r.kind), r.key), r.title, r.preview_lost)
                for r in rows
            ]

    async def set_digest_time(self, user_id: int, hhmm: str) -> Profile:
        """/digest_time HH:MM (local). Raises ``ValueError`` for a bad time, ``UnknownUser``."""
        return await self._profiles.set_digest_time(user_id, hhmm)

    async def digest_on(self, user_id: int) -> Profile:
        """/digest_on. Raises ``UnknownUser``."""
        return await self._profiles.set_digest_enabled(user_id, True)

    async def digest_off(self, user_id: int) -> Profile:
        """/digest_off. Raises ``UnknownUser``."""
        return await self._profiles.set_digest_enabled(user_id, False)
