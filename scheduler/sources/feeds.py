"""RSS/Atom feeds: fetched with httpx under size/time limits, parsed with feedparser.

Server-side request forgery guard: before every request (the first and each redirect,
at most ``max_redirects``) the URL's host is resolved with ``loop.getaddrinfo`` and the
fetch is refused when *any* resolved address is loopback, private, link-local,
multicast, reserved, unspecified or otherwise not global (``ipaddress`` module, IPv4 and
IPv6, IPv4-mapped IPv6 unwrapped). ``allow_loopback`` exists for tests against the
loopback fake servers and is off by default.

DNS rebinding (a name that resolves to a public address for the check and to a private
one a moment later, for the connect) is closed by :class:`GuardedTransport`: the feed
client's connections are opened by a network backend that resolves the host itself,
checks every address with the same guard and connects to a checked address — the
address connected to is the one validated. TLS still verifies the certificate against
the URL's host name (SNI and verification use the origin's host, not the address).

Parsing (feedparser, selectolax) is CPU work proportional to the document (an
18,500-item feed takes seconds): it runs in a worker thread, never on the event loop.

Entry identity: ``id``/``guid``, else ``link``, else a hash of title + content; dates are
kept only for ordering and display (see :func:`parse_feed`).
"""

from __future__ import annotations

import asyncio
import calendar
import hashlib
import ipaddress
import logging
import socket
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import feedparser
import httpcore
import httpx
from selectolax.lexbor import LexborHTMLParser

from scheduler.errors import FetchError, NoPublicPreview, RefusedAddress
from scheduler.sources.http import FetchedBody, get_limited
from scheduler.types import Post

__all__ = [
    "AddressGuard",
    "FeedClient",
    "FeedFetch",
    "GuardedTransport",
    "entry_identity",
    "parse_feed",
]

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
        await self.public_addresses(host, port, source=url)

    def refused_without_lookup(self, url: str) -> bool:
        """True when ``url`` is refused before any name is resolved: no host, or a
        literal IP address that is not public (the check :meth:`check` would make
        first). A name is never judged here: it needs a look-up."""
        try:
            host = httpx.URL(url).host
        except (httpx.InvalidURL, ValueError):
            return False  # the fetch refuses it in its own way
        if not host:
            return True
        try:
            literal = ipaddress.ip_address(host)
        except ValueError:
            return False
        return not _public(literal, self._allow_loopback)

    async def public_addresses(self, host: str, port: int, *, source: str) -> list[str]:
        """Resolve ``host`` once and return its addresses, all checked public.

        Args:
            host: a host name or literal IP address.
            port: the port (passed to the resolver).
            source: the URL, for the error.

        Raises:
            RefusedAddress: as :meth:`check`.
        """
        url = source
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
        return addresses


class _GuardedBackend(httpcore.AsyncNetworkBackend):
    """httpcore's network backend, connecting only to addresses the guard checked."""

    def __init__(self, guard: AddressGuard) -> None:
        self._guard = guard
        self._inner = httpcore.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 - httpcore's interface
        local_address: str | None = None,
        socket_options: Any = None,
    ) -> httpcore.AsyncNetworkStream:
        addresses = await self._guard.public_addresses(host, port, source=f"{host}:{port}")
        failure: Exception | None = None
        for address in addresses:
            try:
                return await self._inner.connect_tcp(
                    address,
                    port,
                    timeout=timeout,
                    local_address=local_address,
                    socket_options=socket_options,
                )
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                failure = exc
        assert failure is not None  # public_addresses never returns an empty list
        raise failure

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,  # noqa: ASYNC109 - httpcore's interface
        socket_options: Any = None,
    ) -> httpcore.AsyncNetworkStream:
        raise httpcore.ConnectError("unix sockets are not allowed for feeds")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


class GuardedTransport(httpx.AsyncHTTPTransport):
    """An httpx transport whose every TCP connection goes to an address ``guard`` checked.

    No proxy and no environment settings (a proxy would make the checked address the
    proxy's). Closes the DNS-rebinding gap between :meth:`AddressGuard.check` and the
    connect: the host is resolved once, at connect time, and that checked address is
    the one connected to.

    Args:
        guard: the address guard.
        ssl_context: the TLS context to verify servers with; default a new one of
            httpx's from certifi's CA bundle, ignoring ``SSL_CERT_FILE``/``SSL_CERT_DIR``
            like the proxy settings. It is built once and used by both layers of the
            transport (a CA bundle load costs ~20-40 ms of CPU).
    """

    def __init__(self, guard: AddressGuard, ssl_context: ssl.SSLContext | None = None) -> None:
        context = ssl_context or httpx.create_ssl_context(trust_env=False)
        super().__init__(verify=context, trust_env=False)
        # httpx builds its pool without a way to pass a network backend; this is the
        # same pool httpx would build (default limits, no proxy) with ours.
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=context,
            max_connections=httpx.Limits().max_connections,
            max_keepalive_connections=20,
            keepalive_expiry=5.0,
            network_backend=_GuardedBackend(guard),
        )


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


#: Longest entry title kept, characters (a digest shows it as the item's link label; a
#: feed with 60 KB titles would otherwise turn one digest into hundreds of messages).
TITLE_MAX_CHARS = 256


def _short_title(title: str) -> str:
    if len(title) <= TITLE_MAX_CHARS:
        return title
    return title[: TITLE_MAX_CHARS - 1].rstrip() + "…"


def _html_text(value: str) -> str:
    if "<" in value:
        body = LexborHTMLParser(value).body
        value = body.text(separator=" ") if body is not None else ""
    return " ".join(value.split())


#: Dates outside this range are treated as missing (year 1, year 9999: unrenderable
#: in some zones, and meaningless for ordering).
_EARLIEST = datetime(1990, 1, 1, tzinfo=UTC)
_LATEST = datetime(9000, 1, 1, tzinfo=UTC)


def _when(entry: Any) -> datetime | None:
    parsed = entry.get("published_parsed") or entry.get("updated_parsed")
    if not parsed:
        return None
    try:
        when = datetime.fromtimestamp(calendar.timegm(parsed), tz=UTC)
    except (OverflowError, OSError, ValueError):
        return None
    return when if _EARLIEST <= when < _LATEST else None


def _timestamp(post: Post) -> float:
    return post.published.timestamp() if post.published is not None else 0.0


def entry_identity(entry: Any) -> str:
    """An entry's identity: ``id``/``guid``, else ``link``, else a hash of title + content.

    The identity (never the date) is what a subscription remembers as delivered.
    """
    for field in ("id", "link"):
        value = str(entry.get(field) or "").strip()
        if value:
            return f"{field}:{value}"
    title = str(entry.get("title", ""))
    content = " ".join(str(c.get("value", "")) for c in entry.get("content", []) or [])
    body = content or str(entry.get("summary", ""))
    digest = hashlib.sha256(f"{title}\x00{body}".encode()).hexdigest()
    return f"hash:{digest}"


def parse_feed(body: bytes, url: str) -> FeedFetch:
    """Parse an RSS/Atom document.

    Args:
        body: the raw bytes (feedparser detects the encoding).
        url: the feed URL (the posts' ``source_key``).

    Returns:
        The feed; ``posts`` are ordered oldest first by date where dates exist. Undated
        entries come first, in reverse document order (feeds list newest first), so
        the newest of them stay nearest the end. A date outside 1990–9000 counts as
        none. An entry with neither text nor identity is skipped. Titles longer than
        :data:`TITLE_MAX_CHARS` are cut with an ellipsis (the post's text keeps them).

    CPU-bound: call it through :func:`asyncio.to_thread` from async code.

    Raises:
        NoPublicPreview: the document is no feed (no entries and no feed title, or a
            fatal parse error).
    """
    parsed = feedparser.parse(body)
    feed_title = str(parsed.feed.get("title", "")) if parsed.get("feed") else ""
    if not parsed.entries and (parsed.get("bozo") or not feed_title):
        raise NoPublicPreview(url, "not an RSS/Atom feed")
    posts: list[Post] = []
    seen: set[int] = set()
    for entry in parsed.entries:
        title = _html_text(str(entry.get("title", "")))
        summary = _html_text(str(entry.get("summary", "")))
        text = f"{title}\n\n{summary}".strip() if summary and summary != title else title
        post_id = _entry_id(entry_identity(entry))
        if not text and not entry.get("link"):
            log.warning("feeds.unparseable_entry url=%s", url)
            continue
        if post_id in seen:
            continue  # the same entry twice in one document: once
        seen.add(post_id)
        posts.append(
            Post(
                source_key=url,
                post_id=post_id,
                published=_when(entry),
                text=text,
                link=str(entry.get("link", "")),
                title=_short_title(title),
            )
        )
    undated = [p for p in reversed(posts) if p.published is None]
    dated = sorted((p for p in posts if p.published is not None), key=_timestamp)
    return FeedFetch(url, feed_title, tuple(undated + dated))


class FeedClient:
    """Fetches feeds through the address guard (and, with :meth:`get`, any page: the
    chat's links use the same guarded, size-capped client).

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

    async def get(self, url: str) -> FetchedBody:
        """GET ``url`` through the guard: each redirect (at most ``max_redirects``, to
        http/https only) is checked again before it is followed; the body is bounded
        by ``max_bytes`` (decoded) and the exchange by ``timeout_s`` per request.

        Returns:
            The last response, whatever its status (the caller judges it).

        Raises:
            RefusedAddress: the URL or a redirect target is not public.
            FetchTooLarge: body over ``max_bytes``.
            BadEncoding: stacked, unknown or corrupt ``Content-Encoding``.
            FetchError: timeout, transport error, a redirect without ``Location`` or
                to a non-http URL, too many redirects.
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
            if not 300 <= got.status < 400:
                return got
            if not got.location:
                raise FetchError(url, f"HTTP {got.status} without Location")
            current = str(httpx.URL(current).join(got.location))
            if httpx.URL(current).scheme not in ("http", "https"):
                raise FetchError(url, "redirect to a non-http URL")
        raise FetchError(url, f"more than {self._max_redirects} redirects")

    async def fetch(self, url: str) -> FeedFetch:
        """Fetch and parse the feed at ``url`` (through :meth:`get`).

        Raises:
            RefusedAddress: the URL or a redirect target is not public.
            NoPublicPreview: 404/410 or a body that is no feed.
            FetchTooLarge: body over ``max_bytes``.
            FetchError: timeout, transport error, other status, too many redirects.
        """
        got = await self.get(url)
        if got.status in (404, 410):
            raise NoPublicPreview(url, f"HTTP {got.status}")
        if got.status != 200:
            raise FetchError(url, f"HTTP {got.status}")
        return await asyncio.to_thread(parse_feed, got.body, url)
