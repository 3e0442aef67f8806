"""RSS/Atom feeds: fetched with httpx under size/time limits, parsed with feedparser.

Server-side request forgery guard: before every request (the first and each redirect,
at most ``max_redirects``) the URL's host is resolved with ``loop.getaddrinfo`` and the
fetch is refused when *any* resolved address is loopback, private, link-local,
multicast, reserved, unspecified or otherwise not global (``ipaddress`` module, IPv4 and
IPv6, IPv4-mapped IPv6 unwrapped). ``allow_loopback`` exists for tests against the
loopback fake servers and is off by default.

Known limit: httpx resolves the host again when it connects, so a DNS server that answers
differently within milliseconds (DNS rebinding) is not covered by this check alone.
"""

from __future__ import annotations

import asyncio
import calendar
import hashlib
import ipaddress
import logging
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import feedparser
import httpx
from selectolax.lexbor import LexborHTMLParser

from scheduler.errors import FetchError, NoPublicPreview, RefusedAddress
from scheduler.http import get_limited
from scheduler.types import Post

__all__ = ["AddressGuard", "FeedClient", "FeedFetch", "parse_feed"]

log = logging.getLogger(__name__)

Resolver = Callable[[str, int], Awaitable[list[str]]]
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


async def _system_resolve(host: str, port: int) -> list[str]:
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [str(info[4][0]) for info in infos]


def _public(address: IPAddress, allow_loopback: bool) -> bool:
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    if address.is_loopback:
        return allow_loopback
    return not (
        address.is_private
        or address.is_link_local
        or address.is_multicast
        or address.is_reserved
        or address.is_unspecified
        or not address.is_global
    )


class AddressGuard:
    """Refuses URLs whose host resolves to a non-public address.

    Args:
        allow_loopback: accept 127.0.0.0/8 and ::1 (tests with loopback fakes only).
        resolver: ``async (host, port) -> [address, ...]``; defaults to ``loop.getaddrinfo``.
    """

    __slots__ = ("_allow_loopback", "_resolve")

    def __init__(self, *, allow_loopback: bool = False, resolver: Resolver | None = None) -> None:
        self._allow_loopback = allow_loopback
        self._resolve = resolver or _system_resolve

    def __repr__(self) -> str:
        return f"AddressGuard(allow_loopback={self._allow_loopback})"

    async def check(self, url: str) -> None:
        """Resolve ``url``'s host and check every address.

        Raises:
            RefusedAddress: a resolved address (or a literal IP host) is not public,
                or the host does not resolve at all (fail closed).
        """
        parsed = httpx.URL(url)
        host = parsed.host
        if not host:
            raise RefusedAddress(url, host, "")
        port = parsed.port or (443 if parsed.scheme == "https" else 80)
        try:
            literal: IPAddress | None = ipaddress.ip_address(host)
        except ValueError:
            literal = None
        if literal is not None:
            addresses = [str(literal)]
        else:
            try:
                addresses = await self._resolve(host, port)
            except OSError as exc:
                raise RefusedAddress(url, host, "") from exc
        if not addresses:
            raise RefusedAddress(url, host, "")
        for raw in addresses:
            address = ipaddress.ip_address(raw.split("%", 1)[0])
            if not _public(address, self._allow_loopback):
                raise RefusedAddress(url, host, str(address))


@dataclass(frozen=True, slots=True)
class FeedFetch:
    """A parsed feed.

    Attributes:
        url: the feed URL as subscribed.
        title: the feed's title (``""`` if none).
        posts: entries, oldest first (entries without a date keep document order, first).
    """

    url: str
    title: str
    posts: tuple[Post, ...]


def _entry_id(value: str) -> int:
    """A stable positive 63-bit number for an entry id/link (sha256 prefix)."""
    return int.from_bytes(hashlib.sha256(value.encode()).digest()[:8], "big") >> 1


def _html_text(value: str) -> str:
    if "<" in value:
        body = LexborHTMLParser(value).body
        value = body.text(separator=" ") if body is not None else ""
    return " ".join(value.split())


def _when(entry: Any) -> datetime | None:
    parsed = entry.get("published_parsed") or entry.get("updated_parsed")
    if not parsed:
        return None
    return datetime.fromtimestamp(calendar.timegm(parsed), tz=UTC)


def parse_feed(body: bytes, url: str) -> FeedFetch:
    """Parse an RSS/Atom document.

    Args:
        body: the raw bytes (feedparser detects the encoding).
        url: the feed URL (the posts' ``source_key``).

    Raises:
        NoPublicPreview: the document is no feed (no entries and no feed title, or a
            fatal parse error).
    """
    parsed = feedparser.parse(body)
    feed_title = str(parsed.feed.get("title", "")) if parsed.get("feed") else ""
    if not parsed.entries and (parsed.get("bozo") or not feed_title):
        raise NoPublicPreview(url, "not an RSS/Atom feed")
    posts: list[Post] = []
    for entry in parsed.entries:
        ident = str(entry.get("id") or entry.get("link") or entry.get("title") or "")
        if not ident:
            log.warning("feeds.unparseable_entry url=%s", url)
            continue
        title = _html_text(str(entry.get("title", "")))
        summary = _html_text(str(entry.get("summary", "")))
        text = f"{title}\n\n{summary}".strip() if summary and summary != title else title
        posts.append(
            Post(
                source_key=url,
                post_id=_entry_id(ident),
                published=_when(entry),
                text=text,
                link=str(entry.get("link", "")),
            )
        )
    epoch = datetime.min.replace(tzinfo=UTC)
    posts.sort(key=lambda p: p.published or epoch)
    return FeedFetch(url, feed_title, tuple(posts))


class FeedClient:
    """Fetches feeds through the address guard.

    Args:
        client: shared httpx client.
        guard: the SSRF guard (checked before the first request and every redirect).
        max_bytes: largest document accepted, in bytes (FETCH_MAX_BYTES).
        timeout_s: deadline per request, in seconds (FETCH_TIMEOUT_SECONDS).
        max_redirects: redirects followed, each re-checked by ``guard``.
    """

    __slots__ = ("_client", "_guard", "_max_bytes", "_max_redirects", "_timeout_s")

    def __init__(
        self,
        client: httpx.AsyncClient,
        guard: AddressGuard,
        *,
        max_bytes: int = 2_000_000,
        timeout_s: float = 15.0,
        max_redirects: int = 3,
    ) -> None:
        self._client = client
        self._guard = guard
        self._max_bytes = max_bytes
        self._timeout_s = timeout_s
        self._max_redirects = max_redirects

    def __repr__(self) -> str:
        return f"FeedClient(guard={self._guard!r}, max_redirects={self._max_redirects})"

    async def fetch(self, url: str) -> FeedFetch:
        """Fetch and parse the feed at ``url``.

        Raises:
            RefusedAddress: the URL or a redirect target is not public.
            NoPublicPreview: 404/410 or a body that is no feed.
            FetchTooLarge: body over ``max_bytes``.
            FetchError: timeout, transport error, other status, too many redirects.
        """
        current = url
        for _ in range(self._max_redirects + 1):
            await self._guard.check(current)
            got = await get_limited(
                self._client,
                current,
                source=url,
                max_bytes=self._max_bytes,
                timeout_s=self._timeout_s,
            )
            if 300 <= got.status < 400:
                if not got.location:
                    raise FetchError(url, f"HTTP {got.status} without Location")
                current = str(httpx.URL(current).join(got.location))
                if httpx.URL(current).scheme not in ("http", "https"):
                    raise FetchError(url, "redirect to a non-http URL")
                continue
            if got.status in (404, 410):
                raise NoPublicPreview(url, f"HTTP {got.status}")
            if got.status != 200:
                raise FetchError(url, f"HTTP {got.status}")
            return parse_feed(got.body, url)
        raise FetchError(url, f"more than {self._max_redirects} redirects")
