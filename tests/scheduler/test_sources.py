"""Parsing /sub arguments."""

from __future__ import annotations

import pytest

from scheduler.errors import InvalidSource
from scheduler.sources.parse import parse_source
from scheduler.types import SourceKind


@pytest.mark.parametrize(
    "argument",
    [
        "@Durov_Channel",
        "durov_channel",
        "t.me/durov_channel",
        "https://t.me/s/durov_channel",
        "https://t.me/durov_channel/123",
        "telegram.me/durov_channel",
        " @durov_channel ",
    ],
)
def test_channel_forms(argument: str) -> None:
    """Every accepted channel form gives the lower-cased name."""
    ref = parse_source(argument)
    assert ref.kind is SourceKind.CHANNEL and ref.key == "durov_channel"


@pytest.mark.parametrize(
    "argument",
    [
        "",
        "@abc",
        "@" + "a" * 33,
        "@bad-name",
        "t.me/",
        "https://t.me/+AbCdEf",
        "ftp://x.org/f",
        "two words",
        "example.com",
    ],
)
def test_invalid(argument: str) -> None:
    """Too short/long names, bad characters, invite links and non-http URLs are invalid."""
    with pytest.raises(InvalidSource):
        parse_source(argument)


def test_feed_url() -> None:
    """Any other http(s) URL is a feed."""
    ref = parse_source("https://example.com/feed.xml")
    assert ref.kind is SourceKind.FEED and ref.key == "https://example.com/feed.xml"
