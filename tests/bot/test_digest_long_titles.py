"""A feed whose entries have enormous titles.

A 2 MB feed of 30 entries with 60,000-character titles made each title a digest link
label in full: one digest became ~450 Telegram messages. Titles are cut at
``TITLE_MAX_CHARS`` (with an ellipsis); the digest stays a few messages."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from aiogram.utils.i18n import I18n

from bot.chat.delivery import split_formatted
from bot.text.digests import render_digest
from bot.text.i18n import create_i18n
from scheduler.sources.feeds import TITLE_MAX_CHARS, parse_feed
from scheduler.types import DigestItem, DigestSection, SourceKind

URL = "https://feeds.example/big-titles.xml"


@pytest.fixture
def i18n() -> Iterator[I18n]:
    """The bot's catalogues, English."""
    i18n = create_i18n()
    with i18n.context():
        yield i18n


def _feed(entries: int, title_chars: int) -> bytes:
    items = "".join(
        f"<item><guid>g{n}</guid><title>{n} {'W' * title_chars}</title>"
        f"<link>https://feeds.example/{n}</link><description>short {n}</description></item>"
        for n in range(entries)
    )
    return (
        '<?xml version="1.0"?><rss version="2.0"><channel><title>Big</title>'
        f"{items}</channel></rss>"
    ).encode()


def test_enormous_entry_titles_are_cut_and_the_digest_stays_small(i18n: I18n) -> None:
    fetched = parse_feed(_feed(30, 60_000), URL)
    assert len(fetched.posts) == 30
    for post in fetched.posts:
        assert len(post.title) == TITLE_MAX_CHARS
        assert post.title.endswith("…")
        assert post.title.startswith(post.text.split(" ", 1)[0] + " WWW")
    section = DigestSection(
        SourceKind.FEED,
        URL,
        fetched.title,
        URL,
        tuple(
            DigestItem(p.post_id, p.link, p.published, "a summary", title=p.title)
            for p in fetched.posts
        ),
    )
    text, entities = render_digest([section], "UTC")
    assert len(split_formatted(text, entities)) <= 3


def test_a_title_at_the_limit_is_kept_whole() -> None:
    fetched = parse_feed(_feed(1, TITLE_MAX_CHARS - 2), URL)  # "0 " + W * (limit - 2)
    [post] = fetched.posts
    assert post.title == "0 " + "W" * (TITLE_MAX_CHARS - 2)
