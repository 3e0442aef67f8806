"""Parse a /sub or /unsub argument into a :class:`~scheduler.types.SourceRef`.

Accepted forms (case-insensitive for the channel part)::

    @channel                      channel
    channel                       channel (a bare valid name)
    t.me/channel                  channel (also telegram.me, with or without https://)
    https://t.me/s/channel        channel (the web-preview URL)
    https://t.me/channel/123      channel (a post link; the post number is ignored)
    https://example.com/feed.xml  feed (any other http(s) URL)

Channel names follow Telegram's public-username rule: 5–32 characters of
``[a-zA-Z0-9_]`` (https://core.telegram.org/method/account.checkUsername).
"""

from __future__ import annotations

import re

import httpx

from scheduler.errors import InvalidSource
from scheduler.types import SourceKind, SourceRef

__all__ = ["CHANNEL_NAME_RE", "TELEGRAM_HOSTS", "is_channel_name", "parse_source"]

#: A public channel username.
CHANNEL_NAME_RE = re.compile(r"[A-Za-z0-9_]{5,32}")

#: Hosts whose URLs name a Telegram channel rather than a feed.
TELEGRAM_HOSTS = frozenset({"t.me", "www.t.me", "telegram.me", "www.telegram.me"})

_MAX_URL_LENGTH = 2048


def is_channel_name(name: str) -> bool:
    """True when ``name`` is a syntactically valid public channel username."""
    return CHANNEL_NAME_RE.fullmatch(name) is not None


def _channel(name: str, argument: str) -> SourceRef:
    if not is_channel_name(name):
        raise InvalidSource(argument)
    return SourceRef(SourceKind.CHANNEL, name.lower())


def parse_source(argument: str) -> SourceRef:
    """Parse one /sub argument.

    Args:
        argument: the text after the command.

    Returns:
        The source: channel names are lower-cased; feed URLs are kept as given
        (scheme and host lower-cased by URL normalisation).

    Raises:
        InvalidSource: empty, not a valid channel name, not an http(s) URL, or a
            t.me URL that names no channel (``t.me/+invite``, ``t.me/joinchat/...``).
    """
    text = argument.strip()
    if not text or len(text) > _MAX_URL_LENGTH or any(c.isspace() for c in text):
        raise InvalidSource(text)
    if text.startswith("@"):
        return _channel(text[1:], text)
    lowered = text.lower()
    if "://" not in text:
        host = lowered.split("/", 1)[0]
        if host in TELEGRAM_HOSTS:
            text = "https://" + text
        elif "/" not in text and "." not in text:
            return _channel(text, argument.strip())
        else:
            raise InvalidSource(argument.strip())
    try:
        url = httpx.URL(text)
    except (httpx.InvalidURL, ValueError) as exc:
        raise InvalidSource(argument.strip()) from exc
    if url.scheme not in ("http", "https") or not url.host:
        raise InvalidSource(argument.strip())
    if url.host in TELEGRAM_HOSTS:
        parts = [p for p in url.path.split("/") if p]
        if parts and parts[0] == "s":
            parts = parts[1:]
        if not parts:
            raise InvalidSource(argument.strip())
        return _channel(parts[0], argument.strip())
    return SourceRef(SourceKind.FEED, str(url))
