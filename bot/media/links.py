"""A message that is one link: the page fetched through the feeds' guarded transport,
then read like a document.

:func:`find_link` says whether a message is a link request: the whole message is one
``http``/``https`` URL, or one of :data:`SUMMARY_WORDS` then the URL ("summarise
https://…", "кратко https://…"). Anything else — a URL inside a sentence, two URLs — is
ordinary text for the chat.

:class:`LinkReader` fetches with :meth:`scheduler.sources.feeds.FeedClient.get`: the
same SSRF guard as feeds (every address a host resolves to must be public, checked
again at connect time and on every redirect), the same size cap after decoding (one
``gzip``/``deflate`` layer at most) and deadline. The page is then read by the
:class:`~bot.media.worker.ExtractionPool` as the kind its ``Content-Type`` (or, for
``application/octet-stream``, its bytes) says: HTML, plain text, PDF or DOCX, with the
documents' caps.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import urlsplit

from bot.media.errors import LinkFailed, LinkRefused, LinkTooLarge, LinkUnsupported
from bot.media.kinds import DOCX_MIME, HEAD_BYTES, document_kind
from bot.media.types import DocumentKind, ExtractionResult
from bot.media.worker import ExtractionPool
from scheduler.errors import FetchError, FetchTooLarge, RefusedAddress
from scheduler.sources.feeds import FeedClient

__all__ = ["SUMMARY_WORDS", "LinkPage", "LinkReader", "find_link"]

#: Words that may come before the URL (any case, an optional colon after).
SUMMARY_WORDS = (
    "summarise",
    "summarize",
    "summary",
    "tldr",
    "tl;dr",
    "кратко",
    "перескажи",
    "суть",
)

#: The longest URL taken (longer ones are text: a URL of megabytes is no link).
MAX_URL_CHARS = 2048

_REQUEST = re.compile(
    r"(?:(?P<word>" + "|".join(re.escape(w) for w in SUMMARY_WORDS) + r")\s*:?\s+)?"
    r"(?P<url>https?://\S+)",
    re.IGNORECASE,
)
_BY_CONTENT_TYPE = {
    "text/html": DocumentKind.HTML,
    "application/xhtml+xml": DocumentKind.HTML,
    "text/plain": DocumentKind.TEXT,
    "text/markdown": DocumentKind.TEXT,
    "text/csv": DocumentKind.TEXT,
    "application/pdf": DocumentKind.PDF,
    DOCX_MIME: DocumentKind.DOCX,
}


def find_link(text: str) -> str | None:
    """The URL a message asks about, or ``None`` if it is no link request.

    Trailing sentence punctuation (``.,;:!?``, and a ``)`` with no ``(`` in the URL)
    is not part of the URL. A URL with credentials (``user:pass@``), without a host
    or longer than :data:`MAX_URL_CHARS` is not taken.
    """
    match = _REQUEST.fullmatch(text.strip())
    if match is None:
        return None
    url = match.group("url").rstrip(".,;:!?")
    if url.endswith(")") and "(" not in url:
        url = url[:-1]
    if len(url) > MAX_URL_CHARS:
        return None
    try:
        parts = urlsplit(url)
        host = parts.hostname
    except ValueError:  # an invalid port or IPv6 literal
        return None
    if not host or parts.username is not None or parts.password is not None:
        return None
    return url


@dataclass(frozen=True, slots=True)
class LinkPage:
    """What a link gave.

    Attributes:
        url: the link as sent.
        content_type: the response's media type (``""`` if none).
        size_bytes: the body's size after decoding.
        result: the extraction (:class:`~bot.media.types.Extracted` or why not).
    """

    url: str
    content_type: str
    size_bytes: int
    result: ExtractionResult


class LinkReader:
    """Fetches the page behind a link and reads it.

    Args:
        feeds: the guarded client (``FeedClient`` over
            :class:`~scheduler.sources.feeds.GuardedTransport`, with the fetch caps).
        pool: the extraction pool (the documents' caps apply to pages too).
    """

    __slots__ = ("_feeds", "_pool")

    def __init__(self, feeds: FeedClient, pool: ExtractionPool) -> None:
        self._feeds = feeds
        self._pool = pool

    def __repr__(self) -> str:
        return f"LinkReader(feeds={self._feeds!r}, pool={self._pool!r})"

    async def read(self, url: str) -> LinkPage:
        """Fetch ``url`` and extract its text.

        Raises:
            LinkRefused: the host (or a redirect's) is not public; nothing was sent to it.
            LinkTooLarge: the page is over the fetch cap.
            LinkUnsupported: not HTML, text, PDF or DOCX.
            LinkFailed: any other fetch failure, or a status other than 200.
            WorkerUnavailable: no extraction worker could be started.
        """
        try:
            got = await self._feeds.get(url)
        except RefusedAddress as exc:
            raise LinkRefused(url, exc.host, exc.address) from None
        except FetchTooLarge as exc:
            raise LinkTooLarge(url, exc.limit_bytes) from None
        except FetchError as exc:
            raise LinkFailed(url, "fetch", exc.detail) from None
        if got.status != 200:
            raise LinkFailed(url, "status", f"HTTP {got.status}")
        content_type = got.headers.get("content-type", "").split(";", 1)[0].strip().lower()
        kind = _BY_CONTENT_TYPE.get(content_type)
        if kind is None and content_type in ("", "application/octet-stream"):
            kind = document_kind(urlsplit(url).path, "", got.body[:HEAD_BYTES])
        if kind is None:
            raise LinkUnsupported(url, content_type)
        result = await self._pool.extract(kind, got.body)
        return LinkPage(url, content_type, len(got.body), result)
