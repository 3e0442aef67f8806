"""Public Telegram channels through their web preview, ``{TELEGRAM_WEB_BASE}/s/<channel>``.

Markup read (as served by t.me in 2022–2023; see the saved pages in
``tests/fixtures/telegram_html/``, sources in its README):

* each post is a ``div.tgme_widget_message`` with ``data-post="<channel>/<id>"``;
  service messages ("Channel created", "pinned …") carry the ``service_message`` class;
* the post's date is the ``time[datetime]`` inside ``a.tgme_widget_message_date`` — a
  video's duration is also a ``<time>`` (``time.message_video_duration``) and is not it;
* the post's own text is the outermost ``.tgme_widget_message_text`` that is not inside a
  reply quote (``a.tgme_widget_message_reply`` holds the quoted text with the same class);
* ``.tgme_widget_message_forwarded_from_name`` names the origin of a forwarded post;
* ``a.tme_messages_more[data-before]`` is the cursor for older posts (``?before=<id>``);
* a channel without a public preview answers ``/s/<name>`` with a redirect to its contact
  page ``/<name>``; an empty one shows ``.tme_no_messages_found``.

A post whose id or date cannot be read is counted in :attr:`ChannelPage.unparseable`
and logged, never dropped silently. That includes ids outside 1..2^53-1 (a 23-digit id
fits no database integer) and dates outside 2013–9000 (year 1 cannot even be shown in
a zone west of UTC). Pages are parsed in a worker thread, never on the event loop.
"""

from __future__ import annotations

import asyncio
import logging
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime

import httpx
from selectolax.lexbor import LexborHTMLParser, LexborNode

from scheduler.errors import FetchError, NoPublicPreview
from scheduler.sources.http import get_limited
from scheduler.types import Post

__all__ = ["ChannelFetch", "ChannelPage", "TmeClient", "parse_channel_page"]

log = logging.getLogger(__name__)

_SPACES = re.compile(r"[ \t\r\f\v\n]+")

#: Telegram ids have at most 52 significant bits (core.telegram.org/bots/api).
_MAX_POST_ID = 2**53 - 1
#: Telegram started in August 2013; anything outside this is no real post date.
_EARLIEST = datetime(2013, 8, 1, tzinfo=UTC)
_LATEST = datetime(9000, 1, 1, tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class ChannelPage:
    """One parsed preview page.

    Attributes:
        channel: the channel name (lower case).
        title: the channel title (``og:title``), ``""`` if absent.
        posts: readable, non-service posts, oldest first.
        service_skipped: service messages seen and skipped.
        unparseable: posts whose id or date could not be read.
        is_preview: False when the page is not a channel preview at all (contact page).
        before: cursor for the next older page (``?before=``), ``None`` at the start.
    """

    channel: str
    title: str
    posts: tuple[Post, ...]
    service_skipped: int = 0
    unparseable: int = 0
    is_preview: bool = True
    before: int | None = None

    @property
    def min_id(self) -> int | None:
        """Smallest post id on the page (service messages excluded), or ``None``."""
        return min((p.post_id for p in self.posts), default=None)


@dataclass(frozen=True, slots=True)
class ChannelFetch:
    """Posts newer than a cursor, gathered over one or more pages.

    Attributes:
        channel: the channel name.
        title: the channel title.
        posts: posts with id > ``after_id``, oldest first, no duplicates.
        pages: pages fetched.
        complete: True when the cursor (or the channel's start) was reached;
            False when ``max_pages`` stopped the walk (older posts were left out).
        unparseable: posts that could not be read, summed over the pages.
    """

    channel: str
    title: str
    posts: tuple[Post, ...]
    pages: int
    complete: bool
    unparseable: int = 0
    newest_id: int | None = field(default=None)


def _clean_text(node: LexborNode) -> str:
    """Plain text of a message-text node: ``<br>`` becomes a newline, runs of spaces one."""
    parts: list[str] = []
    for child in node.traverse(include_text=True):
        if child.tag == "-text":
            parts.append(_SPACES.sub(" ", child.text_content or ""))
        elif child.tag == "br":
            parts.append("\n")
    lines = (line.strip() for line in "".join(parts).split("\n"))
    text = "\n".join(lines)
    return re.sub(r"\n{3,}", "\n\n", text).strip()


def _inside(node: LexborNode, stop: LexborNode, css_class: str) -> bool:
    """True when an ancestor of ``node`` below ``stop`` has ``css_class``."""
    parent = node.parent
    while parent is not None and parent.mem_id != stop.mem_id:
        classes = (parent.attributes.get("class") or "").split()
        if css_class in classes:
            return True
        parent = parent.parent
    return False


def _own_text(message: LexborNode) -> str:
    """The post's own text: the outermost message-text node outside any reply quote."""
    for candidate in message.css(".tgme_widget_message_text"):
        if _inside(candidate, message, "tgme_widget_message_reply"):
            continue
        if _inside(candidate, message, "tgme_widget_message_text"):
            continue  # nested copy inside the outer text node (seen in album markup)
        return _clean_text(candidate)
    return ""


def _parse_datetime(value: str) -> datetime:
    parsed = datetime.fromisoformat(value)
    if parsed.tzinfo is None:
        raise ValueError(f"naive datetime {value!r}")
    try:
        when = parsed.astimezone(UTC)
    except OverflowError as exc:
        raise ValueError(f"date out of range {value!r}") from exc
    if not _EARLIEST <= when < _LATEST:
        raise ValueError(f"date out of range {value!r}")
    return when


def parse_channel_page(html: str | bytes, channel: str) -> ChannelPage:
    """Parse a ``/s/<channel>`` page.

    Args:
        html: the page (bytes are decoded as UTF-8, invalid bytes replaced).
        channel: the channel name the page was fetched for.

    Returns:
        The page's posts (oldest first) and counters; ``is_preview`` is False for a
        page that is no preview (e.g. the contact page served instead).
    """
    if isinstance(html, bytes):
        html = html.decode("utf-8", errors="replace")
    tree = LexborHTMLParser(html)
    channel = channel.lower()
    title_node = tree.css_first('meta[property="og:title"]')
    title = (title_node.attributes.get("content") or "") if title_node is not None else ""
    history = tree.css_first(".tgme_channel_history")
    messages = tree.css("div.tgme_widget_message[data-post]")
    if history is None and not messages:
        no_posts = tree.css_first(".tme_no_messages_found") is not None
        return ChannelPage(channel, title, (), is_preview=no_posts)
    posts: list[Post] = []
    service = 0
    unparseable = 0
    for message in messages:
        classes = (message.attributes.get("class") or "").split()
        data_post = message.attributes.get("data-post") or ""
        try:
            post_id = int(data_post.rsplit("/", 1)[1])
            if not 0 < post_id <= _MAX_POST_ID:
                raise ValueError("post id out of range")
        except (IndexError, ValueError):
            unparseable += 1
            log.warning("tme.unparseable_post channel=%s data_post=%r", channel, data_post)
            continue
        if "service_message" in classes:
            service += 1
            continue
        time_node = message.css_first("a.tgme_widget_message_date time[datetime]")
        try:
            if time_node is None:
                raise ValueError("no date link")
            published = _parse_datetime(time_node.attributes.get("datetime") or "")
        except ValueError as exc:
            unparseable += 1
            log.warning("tme.unparseable_post channel=%s post=%s (%s)", channel, post_id, exc)
            continue
        date_link = message.css_first("a.tgme_widget_message_date")
        link = (date_link.attributes.get("href") if date_link is not None else None) or ""
        if not link:
            link = f"https://t.me/{data_post}"
        fwd = message.css_first(".tgme_widget_message_forwarded_from_name")
        forwarded = _clean_text(fwd) if fwd is not None else None
        posts.append(
            Post(
                source_key=channel,
                post_id=post_id,
                published=published,
                text=_own_text(message),
                link=link,
                forwarded_from=forwarded or None,
            )
        )
    posts.sort(key=lambda p: p.post_id)
    more = tree.css_first("a.tme_messages_more[data-before]")
    before: int | None = None
    if more is not None:
        raw = more.attributes.get("data-before") or ""
        before = int(raw) if raw.isdigit() and len(raw) <= 16 else None
    if unparseable:
        log.warning("tme.page channel=%s unparseable=%d", channel, unparseable)
    return ChannelPage(channel, title, tuple(posts), service, unparseable, True, before)


class TmeClient:
    """Fetches channel preview pages.

    Args:
        client: shared httpx client (its own redirect setting is overridden: never followed).
        base_url: ``TELEGRAM_WEB_BASE`` (``https://t.me`` or the loopback fake).
        max_bytes: largest page accepted, in bytes (FETCH_MAX_BYTES).
        timeout_s: deadline per page, in seconds (FETCH_TIMEOUT_SECONDS).
        max_pages: most pages walked back by :meth:`fetch_since`.
    """

    __slots__ = ("_base", "_client", "_max_bytes", "_max_pages", "_timeout_s")

    def __init__(
        self,
        client: httpx.AsyncClient,
        *,
        base_url: str,
        max_bytes: int = 2_000_000,
        timeout_s: float = 15.0,
        max_pages: int = 5,
    ) -> None:
        self._client = client
        self._base = base_url.rstrip("/")
        self._max_bytes = max_bytes
        self._timeout_s = timeout_s
        self._max_pages = max_pages

    def __repr__(self) -> str:
        return f"TmeClient(base={self._base!r}, max_pages={self._max_pages})"

    async def fetch_page(self, channel: str, before: int | None = None) -> ChannelPage:
        """Fetch and parse one page (the newest, or the one before post ``before``).

        Raises:
            NoPublicPreview: redirect (to the contact page), 404, a page that is no
                preview, or the newest page listing no posts at all.
            FetchTooLarge: the page exceeded ``max_bytes``.
            FetchError: timeout, transport error or another non-2xx status.
        """
        params = {"before": str(before)} if before is not None else None
        got = await get_limited(
            self._client,
            f"{self._base}/s/{channel}",
            source=channel,
            max_bytes=self._max_bytes,
            timeout_s=self._timeout_s,
            params=params,
        )
        if 300 <= got.status < 400 or got.status == 404:
            raise NoPublicPreview(channel, f"HTTP {got.status} -> {got.location or ''}")
        if got.status != 200:
            raise FetchError(channel, f"HTTP {got.status}")
        page = await asyncio.to_thread(parse_channel_page, got.body, channel)
        if not page.is_preview or (before is None and not page.posts and not page.service_skipped):
            raise NoPublicPreview(channel, "no public posts")
        return page

    async def fetch_since(
        self, channel: str, after_id: int | None, *, max_pages: int | None = None
    ) -> ChannelFetch:
        """Posts newer than ``after_id``, walking back with ``?before=`` (bounded).

        Args:
            channel: channel name.
            after_id: last post already digested; ``None`` = only the newest page.
            max_pages: override of the page bound.

        Raises:
            Same as :meth:`fetch_page` (for the first page; a later page that fails with
            :class:`FetchError` ends the walk with ``complete=False``).
        """
        limit = max_pages or self._max_pages
        page = await self.fetch_page(channel)
        pages = 1
        title = page.title
        unparseable = page.unparseable
        seen: dict[int, Post] = {p.post_id: p for p in page.posts}
        newest = max(seen, default=None)
        complete = after_id is None
        while not complete:
            low = page.min_id
            if low is None or low <= (after_id or 0) + 1 or page.before is None:
                complete = True
                break
            if pages >= limit:
                log.info("tme.walk_bounded channel=%s pages=%d after=%s", channel, pages, after_id)
                break
            try:
                page = await self.fetch_page(channel, before=low)
            except FetchError as exc:
                log.warning("tme.older_page_failed channel=%s before=%s: %s", channel, low, exc)
                break
            pages += 1
            unparseable += page.unparseable
            if not page.posts:
                complete = True
                break
            for post in page.posts:
                seen.setdefault(post.post_id, post)
        floor = after_id if after_id is not None else -1
        posts = tuple(seen[i] for i in sorted(seen) if i > floor)
        return ChannelFetch(channel, title, posts, pages, complete, unparseable, newest)
