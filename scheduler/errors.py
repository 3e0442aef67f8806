"""The scheduler package's error tree.

::

    SchedulerError
    ├── InvalidSource          .argument — a /sub argument that is no channel name or feed URL
    ├── UnknownUser            .user_id — a profile operation on a user never seen
    ├── FetchError             .source — a channel page or feed could not be read
    │   ├── NoPublicPreview    the channel has no web preview (redirect to the contact page,
    │   │                      "No posts found", or not a channel at all)
    │   ├── FetchTooLarge      .limit_bytes — the body (decoded) exceeded the size limit
    │   ├── BadEncoding        .encoding — stacked, unknown or corrupt Content-Encoding
    │   └── RefusedAddress     .host, .address — the URL resolves to a non-public address (SSRF)
    └── DeliveryError          raised by a :class:`scheduler.types.Deliverer` (the bot translates
        │                      aiogram's exceptions into these at its boundary)
        ├── DeliveryRetryAfter .retry_after_s — Telegram said 429: wait that long for this chat;
        │                      .messages_sent — of a digest, the messages delivered before
        └── RecipientGone      Telegram said 403: the user blocked the bot or was deactivated

httpx transport errors and feedparser problems are translated into :class:`FetchError`
inside ``scheduler/sources/tme.py`` and ``scheduler/sources/feeds.py``; nothing above them sees
httpx types.
"""

from __future__ import annotations

__all__ = [
    "BadEncoding",
    "DeliveryError",
    "DeliveryRetryAfter",
    "FetchError",
    "FetchTooLarge",
    "InvalidSource",
    "NoPublicPreview",
    "RecipientGone",
    "RefusedAddress",
    "SchedulerError",
    "UnknownUser",
]


class SchedulerError(Exception):
    """Base of every error raised by ``scheduler/``."""


class InvalidSource(SchedulerError):
    """The argument of /sub or /unsub names no valid channel or feed.

    Attributes:
        argument: the text as given (stripped).
    """

    def __init__(self, argument: str) -> None:
        super().__init__(f"invalid source {argument!r}")
        self.argument = argument


class UnknownUser(SchedulerError):
    """No ``user_profiles`` row for this user (call ``get_or_create`` first).

    Attributes:
        user_id: the Telegram user id.
    """

    def __init__(self, user_id: int) -> None:
        super().__init__(f"unknown user {user_id}")
        self.user_id = user_id


class FetchError(SchedulerError):
    """A source could not be fetched or read (transient unless a subclass says otherwise).

    Attributes:
        source: the channel name or feed URL.
        detail: operator-facing detail (status code, exception name); never shown to users.
    """

    def __init__(self, source: str, detail: str = "") -> None:
        super().__init__(f"{source}: {detail}" if detail else source)
        self.source = source
        self.detail = detail


class NoPublicPreview(FetchError):
    """The channel serves no public web preview (``/s/<name>`` redirects or lists no posts)."""


class FetchTooLarge(FetchError):
    """The response body exceeded the configured size limit.

    Attributes:
        limit_bytes: the limit that was hit, in bytes.
    """

    def __init__(self, source: str, limit_bytes: int) -> None:
        super().__init__(source, f"body larger than {limit_bytes} bytes")
        self.limit_bytes = limit_bytes


class BadEncoding(FetchError):
    """The response's ``Content-Encoding`` is refused: more than one coding layer (a
    stacked-gzip bomb), a coding we did not offer, or a body that does not decode.

    Attributes:
        encoding: the ``Content-Encoding`` header as received.
    """

    def __init__(self, source: str, encoding: str, why: str) -> None:
        super().__init__(source, f"content-encoding {encoding!r} refused: {why}")
        self.encoding = encoding


class RefusedAddress(FetchError):
    """The URL's host resolves to a loopback/private/link-local/reserved address.

    Attributes:
        host: the host name from the URL.
        address: the offending resolved address (``""`` when the host did not resolve).
    """

    def __init__(self, source: str, host: str, address: str) -> None:
        super().__init__(source, f"host {host!r} resolves to non-public address {address!r}")
        self.host = host
        self.address = address


class DeliveryError(SchedulerError):
    """Base of the errors a :class:`scheduler.types.Deliverer` may raise."""


class DeliveryRetryAfter(DeliveryError):
    """Telegram answered 429 for this chat.

    Attributes:
        retry_after_s: seconds to wait before sending to this chat again
            (Telegram's ``parameters.retry_after``).
        messages_sent: of a digest, the messages delivered before the wait (those it
            was asked to skip included): the retry starts after them. 0 for a notice.
    """

    def __init__(self, retry_after_s: float, messages_sent: int = 0) -> None:
        super().__init__(f"retry after {retry_after_s} s")
        self.retry_after_s = retry_after_s
        self.messages_sent = messages_sent


class RecipientGone(DeliveryError):
    """Telegram answered 403: the bot was blocked or the user deactivated."""
