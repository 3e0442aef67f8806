"""Parsing saved t.me preview pages and fetching them through httpx.MockTransport."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest

from scheduler.errors import FetchTooLarge, NoPublicPreview
from scheduler.sources.tme import TmeClient, parse_channel_page

FIXTURES = Path(__file__).parents[1] / "fixtures" / "telegram_html"
SHARED = Path(__file__).parents[3] / "shared" / "corpus" / "telegram_html"


def _page(name: str) -> str:
    return (FIXTURES / name).read_text(encoding="utf-8")


def test_infoscape_page_matches_golden_parse() -> None:
    """Ids, dates and texts match the project's golden file; 'Channel created' skipped."""
    page = parse_channel_page(_page("infoscape_test_page.html"), "infoscape_test")
    canon = json.loads(_page("infoscape_test_canon_posts.json"))
    expected = {
        int(c["link"].rsplit("/", 1)[1]): c for c in canon if c["text"] != "Channel created"
    }
    assert [p.post_id for p in page.posts] == sorted(expected) == [2, 3, 4, 5, 7]
    assert page.service_skipped == 1 and page.unparseable == 0
    for post in page.posts:
        assert post.published == datetime.fromtimestamp(expected[post.post_id]["timestamp"], UTC)
        assert post.link == expected[post.post_id]["link"]
    texts = {p.post_id: p.text for p in page.posts}
    assert texts[2] == "простое сообщение"
    assert texts[4] == "ссылка на https://yandex.ru/"


def test_reply_quote_is_not_the_post_text() -> None:
    """Post 7 replies to post 2: its text is its own, not the quoted 'простое сообщение'."""
    page = parse_channel_page(_page("infoscape_test_page.html"), "infoscape_test")
    reply = next(p for p in page.posts if p.post_id == 7)
    assert reply.text == "ответ на сообщение"


def test_full_page_dates_texts_forwards_and_cursor() -> None:
    """topwar_official: 12 posts; video durations are not dates; 5 forwards; ?before cursor."""
    page = parse_channel_page(_page("any2feed_full.html"), "topwar_official")
    ids = [p.post_id for p in page.posts]
    assert len(ids) == 12 and ids[0] == 70989 and ids[-1] == 71008
    by_id = {p.post_id: p for p in page.posts}
    assert by_id[70992].published == datetime(2023, 2, 28, 8, 51, 58, tzinfo=UTC)
    assert by_id[70992].text.startswith("Сегодня ночью в Республике Адыгея")
    assert "\n" not in by_id[70992].text.split(".")[0]
    assert by_id[70989].text.startswith("В Санкт-Петербурге в небо над городом подняли")
    assert "Baza.\nСудя по сервису" in by_id[70989].text
    assert sum(1 for p in page.posts if p.forwarded_from) == 5
    assert by_id[70996].forwarded_from == "Военкор Ярем"
    assert "Милитарист" not in by_id[70996].text  # link preview is not the post text
    assert page.before == 70989
    assert page.title


def test_single_post_pages_parse() -> None:
    """Each saved single-post page yields exactly one dated post."""
    for name in (
        "any2feed_message_link_preview.html",
        "any2feed_message_media_forwarded_from.html",
        "any2feed_message_media_photo_and_video.html",
        "any2feed_message_poll.html",
        "any2feed_message_voice.html",
    ):
        page = parse_channel_page(_page(name), "x")
        assert len(page.posts) == 1, name
        assert page.posts[0].published is not None
    fwd = parse_channel_page(_page("any2feed_message_media_forwarded_from.html"), "oper_goblin")
    assert fwd.posts[0].post_id == 22358 and fwd.posts[0].forwarded_from


def test_unparseable_post_is_counted() -> None:
    """A post without a date link is counted, not silently dropped."""
    html = (
        '<section class="tgme_channel_history">'
        '<div class="tgme_widget_message" data-post="c/1">'
        '<div class="tgme_widget_message_text">no date</div></div>'
        '<div class="tgme_widget_message" data-post="c/x"></div></section>'
    )
    page = parse_channel_page(html, "c")
    assert page.posts == () and page.unparseable == 2


@pytest.mark.skipif(not SHARED.exists(), reason="../shared corpus not present")
def test_tchan_service_messages_and_reply_to_video() -> None:
    """tchan fragments (read in place, LGPL): service messages skipped, reply text own."""
    fragments = SHARED / "tchan_tchantest_fragments"
    for name in (
        "parse_service_message_channel_created.html",
        "parse_service_message_pinned.html",
        "parse_service_message_channel_name_changed.html",
    ):
        page = parse_channel_page(
            '<section class="tgme_channel_history">'
            + (fragments / name).read_text()
            + "</section>",
            "tchantest",
        )
        assert page.posts == () and page.service_skipped >= 1, name
    reply = parse_channel_page(
        '<section class="tgme_channel_history">'
        + (fragments / "parse_text_reply_to_video.html").read_text()
        + "</section>",
        "tchantest",
    )
    assert [p.text for p in reply.posts] == ["Reply to a video (not recorded in telegram)"]


def _client(handler: httpx.MockTransport, **kw: int) -> TmeClient:
    return TmeClient(httpx.AsyncClient(transport=handler), base_url="https://t.example", **kw)


async def test_redirect_means_no_public_preview() -> None:
    """/s/<name> answered by a redirect to the contact page → NoPublicPreview."""
    transport = httpx.MockTransport(
        lambda r: httpx.Response(302, headers={"location": "https://t.example/somechan"})
    )
    with pytest.raises(NoPublicPreview):
        await _client(transport).fetch_page("somechan")


async def test_contact_page_is_no_preview() -> None:
    """A 200 page without any post markup (contact page) → NoPublicPreview."""
    transport = httpx.MockTransport(
        lambda r: httpx.Response(200, text="<html><div class='tgme_page'>x</div></html>")
    )
    with pytest.raises(NoPublicPreview):
        await _client(transport).fetch_page("somechan")


async def test_too_large_page_refused() -> None:
    """A page over max_bytes raises FetchTooLarge."""
    transport = httpx.MockTransport(lambda r: httpx.Response(200, content=b"x" * 5000))
    with pytest.raises(FetchTooLarge):
        await _client(transport, max_bytes=1024).fetch_page("somechan")


async def test_fetch_since_pages_back_until_cursor() -> None:
    """Paging with ?before= stops at the last digested id; posts are newer than it."""
    html = _page("any2feed_full.html")
    older = html.replace("topwar_official/709", "topwar_official/708")
    seen: list[str | None] = []

    def handler(request: httpx.Request) -> httpx.Response:
        before = request.url.params.get("before")
        seen.append(before)
        return httpx.Response(200, text=html if before is None else older)

    fetched = await _client(httpx.MockTransport(handler)).fetch_since("topwar_official", 70890)
    assert seen == [None, "70989"]
    assert all(p.post_id > 70890 for p in fetched.posts)
    assert fetched.complete and fetched.newest_id == 71008
    assert 70899 in {p.post_id for p in fetched.posts}
