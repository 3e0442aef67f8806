"""The digests' side of the composition root: the channel fetchers (t.me previews;
feeds behind the address guard), their HTTP clients, the digest service (what /sub and
friends call) and the runner (between replicas each run and summary claimed by one
process). :func:`build_digests` makes them; :class:`DigestParts` is what the app starts
and closes, and what the chat's tools and the media path read through.
"""

from __future__ import annotations

import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace

import httpx
from aiogram import Bot
from aiogram.utils.i18n import I18n
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from bot.app.wiring import digest_config
from bot.settings import Settings
from bot.text.digests import TelegramDeliverer
from budget.kernel.clock import Clock
from budget.ledger import Ledger
from llm.cascade.cascade import Cascade
from scheduler.claims import Claimant
from scheduler.profiles import ProfileRepository
from scheduler.runner import DigestRunner
from scheduler.service import DigestService
from scheduler.sources.feeds import AddressGuard, FeedClient, GuardedTransport
from scheduler.sources.fetch import Fetchers
from scheduler.sources.tme import TmeClient

__all__ = ["DigestParts", "build_digests"]

_USER_AGENT = "KopekBot/0.1 (+digests)"


@dataclass(frozen=True, slots=True)
class DigestParts:
    """The digests' pieces: what /sub and friends call, the runner, their HTTP clients,
    the feed reader (which also reads a lone link's page: :mod:`bot.media`) and the
    guarded sources (which the chat's tools read through too)."""

    service: DigestService
    runner: DigestRunner
    http: httpx.AsyncClient
    feed_http: httpx.AsyncClient
    feeds: FeedClient
    fetchers: Fetchers


def build_digests(
    settings: Settings,
    *,
    clock: Clock,
    sessions: async_sessionmaker[AsyncSession],
    ledger: Ledger,
    bot: Bot,
    i18n: I18n,
    repo: ProfileRepository,
    cascade: Cascade,
    count_tokens: Callable[[str], int],
    claimant: Claimant | None,
    paid_allowed: Callable[[], bool],
    tls: ssl.SSLContext,
    recipient_allowed: Callable[[int], Awaitable[bool]] | None = None,
) -> DigestParts:
    """The digests' parts from the settings (nothing started). ``count_tokens``: ``str
    -> tokens`` for the runner's pacing; ``claimant``: this process's claims between
    replicas (``None``: one process); ``paid_allowed``: false while paid digests are
    shed (:mod:`bot.ops.shedding`); ``recipient_allowed``: whether a user may be sent a
    digest (:meth:`bot.access.store.AccessBook.serves_privately`; decision 296)."""

    async def tz_of(user_id: int) -> str:
        profile = await repo.get(user_id)
        return (profile.tz if profile and profile.tz else None) or settings.user_tz

    http = httpx.AsyncClient(headers={"User-Agent": _USER_AGENT}, verify=tls)
    guard = AddressGuard()
    feed_http = httpx.AsyncClient(
        headers={"User-Agent": _USER_AGENT},
        transport=GuardedTransport(guard),  # certifi's bundle; no SSL_CERT_FILE for feeds
        trust_env=False,
    )
    max_bytes, timeout_s = settings.fetch_max_bytes, settings.fetch_timeout_seconds
    fetchers = Fetchers(
        TmeClient(
            http, base_url=settings.telegram_web_base, max_bytes=max_bytes, timeout_s=timeout_s
        ),
        feeds := FeedClient(feed_http, guard, max_bytes=max_bytes, timeout_s=timeout_s),
        clock,
    )
    service = DigestService(
        sessions,
        clock,
        fetchers,
        repo,
        lookups_per_window=settings.sub_lookups_per_minute,
        lookup_window_s=60.0,
        negative_ttl_s=settings.sub_negative_cache_seconds,
        guard=guard,
    )
    runner = DigestRunner(
        clock=clock,
        session_factory=sessions,
        ledger=ledger,
        backend=cascade,
        deliverer=TelegramDeliverer(bot, i18n, clock, tz_of),
        fetcher=fetchers,
        config=replace(digest_config(settings), paid_allowed=paid_allowed),
        count_tokens=count_tokens,
        claimant=claimant,
        recipient_allowed=recipient_allowed,
    )
    return DigestParts(service, runner, http, feed_http, feeds, fetchers)
