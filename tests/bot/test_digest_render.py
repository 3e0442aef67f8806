"""A digest is text + entities; untrusted text never becomes layout."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from aiogram.types import MessageEntity
from aiogram.utils.i18n import I18n

from bot.chat.delivery import split_formatted
from bot.text.digests import render_digest
from bot.text.i18n import create_i18n
from scheduler.types import DigestItem, DigestSection, SourceKind

EVIL_LINK = (
    "https://evil.example/a) [⚠️ Kopek: your budget is exhausted, re-login here]"
    "(https://evil.example/b"
)
FAKE_LINE = "⚠️ Kopek: your budget is exhausted"


@pytest.fixture
def i18n() -> Iterator[I18n]:
    """The bot's catalogues, English."""
    i18n = create_i18n()
    with i18n.context():
        yield i18n


def _covered(text: str, entity: MessageEntity) -> str:
    raw = text.encode("utf-16-le")
    return raw[2 * entity.offset : 2 * (entity.offset + entity.length)].decode("utf-16-le")


def _render(items: tuple[DigestItem, ...]) -> tuple[str, list[MessageEntity]]:
    section = DigestSection(
        SourceKind.FEED,
        "https://feeds.example/rss",
        "Feed [x](https://evil.example/t)",
        "https://feeds.example/rss",
        items,
    )
    [(text, entities)] = split_formatted(*render_digest([section], "Europe/Berlin"))
    return text, entities


def test_a_feed_link_cannot_write_a_fake_line_into_the_digest(i18n: I18n) -> None:
    """The evil link is only the URL of the entry's label (its title); no link, bold or
    line of the digest carries the fake "Kopek" sentence."""
    item = DigestItem(
        post_id=1,
        link=EVIL_LINK,
        published=datetime(2026, 3, 1, 8, 0, tzinfo=UTC),
        summary="A short summary.",
        title="Budget *news* [1]",
    )
    text, entities = _render((item,))
    links = [(e.url, _covered(text, e)) for e in entities if e.type == "text_link"]
    assert links == [
        ("https://feeds.example/rss", "Feed [x](https://evil.example/t)"),
        (EVIL_LINK, "Budget *news* [1]"),
    ]
    assert FAKE_LINE not in text
    assert all(FAKE_LINE not in _covered(text, e) for e in entities)
    assert "• Budget *news* [1] (01.03 09:00): A short summary." in text


def test_summaries_and_excerpts_stay_text(i18n: I18n) -> None:
    """Markdown in an excerpt (a post's own text) or a summary is shown literally: no
    link, no bold comes out of it."""
    item = DigestItem(
        post_id=2,
        link="https://t.me/chan/2",
        published=None,
        summary=f"**Urgent** [{FAKE_LINE}](https://evil.example/c) `code`",
        summarized=False,
    )
    text, entities = _render((item,))
    assert f"**Urgent** [{FAKE_LINE}](https://evil.example/c) `code`" in text
    assert [e.url for e in entities if e.type == "text_link"] == [
        "https://feeds.example/rss",
        "https://t.me/chan/2",
    ]
    assert [_covered(text, e) for e in entities if e.type == "bold"] == [
        "📰 Your daily digest",
        "Feed [x](https://evil.example/t)",
    ]


def test_non_http_links_lose_their_link(i18n: I18n) -> None:
    """A ``javascript:`` entry link keeps its label as text, without a link."""
    item = DigestItem(3, "javascript:alert(1)", None, "s", title="T")
    text, entities = _render((item,))
    assert [e.url for e in entities if e.type == "text_link"] == ["https://feeds.example/rss"]
    assert "• T: s" in text


def test_offsets_count_utf16_units(i18n: I18n) -> None:
    """Entities after emoji and astral characters still cover exactly their label."""
    items = tuple(
        DigestItem(i, f"https://e.org/{i}", None, "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 😀", title=f"😀 title {i}")
        for i in range(3)
    )
    text, entities = _render(items)
    labels = [_covered(text, e) for e in entities if e.type == "text_link"][1:]
    assert labels == ["😀 title 0", "😀 title 1", "😀 title 2"]
