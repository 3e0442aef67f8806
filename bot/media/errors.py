"""The error tree of Telegram file downloads and of links.

::

    MediaError
    ├── DownloadError            .file_id — a Telegram file could not be had
    │   ├── TooBigToDownload     .size_bytes, .limit_bytes — over the limit: before any
    │   │                        download (the message's file_size, getFile's, or
    │   │                        Telegram's "file is too big"), or while streaming
    │   └── DownloadFailed       .reason — getFile refused (an expired file id), an HTTP
    │                            error, the deadline, a dropped connection
    └── LinkError                .url — the page behind a link could not be read
        ├── LinkRefused          .host, .address — the host resolves to a non-public
        │                        address (loopback, private, link-local…): never fetched
        ├── LinkTooLarge         .limit_bytes — the page (decoded) is over the fetch cap
        ├── LinkUnsupported      .content_type — not a page or document Kopek reads
        └── LinkFailed           .reason — the deadline, a connection error, an HTTP
                                 status, too many redirects

aiohttp's, aiogram's and the feeds client's exceptions are translated into these at
the boundary (:mod:`bot.media.download`, :mod:`bot.media.links`). Their messages never
hold the bot token: a Telegram file URL (``/file/bot<token>/…``) is never put in one.
Extraction failures are not exceptions: see :class:`bot.media.types.ExtractionFailed`.
"""

from __future__ import annotations

__all__ = [
    "DownloadError",
    "DownloadFailed",
    "LinkError",
    "LinkFailed",
    "LinkRefused",
    "LinkTooLarge",
    "LinkUnsupported",
    "MediaError",
    "TooBigToDownload",
]


class MediaError(Exception):
    """Base of every error raised by ``bot/media/``."""


class DownloadError(MediaError):
    """A Telegram file could not be had.

    Attributes:
        file_id: the file's id (not secret; never the download URL).
    """

    def __init__(self, file_id: str, detail: str) -> None:
        super().__init__(f"file {file_id[:24]}: {detail}")
        self.file_id = file_id


class TooBigToDownload(DownloadError):
    """The file is over the download limit.

    Attributes:
        size_bytes: its size as declared (or as counted when it ran past the limit
            while streaming; ``None`` when Telegram only said "too big").
        limit_bytes: the limit, bytes.
    """

    def __init__(self, file_id: str, size_bytes: int | None, limit_bytes: int) -> None:
        super().__init__(file_id, f"{size_bytes} bytes over the {limit_bytes}-byte limit")
        self.size_bytes = size_bytes
        self.limit_bytes = limit_bytes


class DownloadFailed(DownloadError):
    """getFile or the download itself failed.

    Attributes:
        reason: ``file_id`` (Telegram refused the id: expired or wrong), ``http`` (a
            status), ``timeout``, ``connection``, ``api`` (another Bot API error).
    """

    def __init__(self, file_id: str, reason: str, detail: str = "") -> None:
        super().__init__(file_id, f"{reason}" + (f" ({detail})" if detail else ""))
        self.reason = reason


class LinkError(MediaError):
    """The page behind a link could not be read.

    Attributes:
        url: the link as the user sent it.
    """

    def __init__(self, url: str, detail: str) -> None:
        super().__init__(f"{url[:200]}: {detail}")
        self.url = url


class LinkRefused(LinkError):
    """The link's host is not public (server-side request forgery guard), or does not
    resolve at all (``address`` ``""``: the guard fails closed).

    Attributes:
        host: the host name or literal address.
        address: the non-public address it resolved to (``""``: it did not resolve).
    """

    def __init__(self, url: str, host: str, address: str) -> None:
        super().__init__(url, f"refused: {host} -> {address or 'no address'}")
        self.host = host
        self.address = address


class LinkTooLarge(LinkError):
    """The page is over the fetch cap.

    Attributes:
        limit_bytes: the cap, bytes (decoded).
    """

    def __init__(self, url: str, limit_bytes: int) -> None:
        super().__init__(url, f"over {limit_bytes} bytes")
        self.limit_bytes = limit_bytes


class LinkUnsupported(LinkError):
    """The link leads to something Kopek does not read (an image, an archive…).

    Attributes:
        content_type: the response's ``Content-Type`` (``""`` if none).
    """

    def __init__(self, url: str, content_type: str) -> None:
        super().__init__(url, f"unsupported content type {content_type!r}"[:200])
        self.content_type = content_type


class LinkFailed(LinkError):
    """The fetch failed.

    Attributes:
        reason: ``status`` (an HTTP status other than 200), ``fetch`` (the deadline, a
            connection error, redirects, a bad encoding).
    """

    def __init__(self, url: str, reason: str, detail: str = "") -> None:
        super().__init__(url, reason + (f" ({detail})" if detail else ""))
        self.reason = reason
