"""The fake t.me: saved pages, generated pages in the real markup, paging, redirects."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime

import pytest
from aiohttp import ClientSession
from selectolax.lexbor import LexborHTMLParser

from tests.support.tme import FIXTURES_DIR, FakeTme, TmePost, render_channel_page, synthetic_channel


@pytest.fixture
async def tme() -> AsyncIterator[FakeTme]:
    """A started fake t.me."""
    async with FakeTme() as fake:
        yield fake


@pytest.fixture
async def http() -> AsyncIterator[ClientSession]:
    """A client that does not follow redirects (like the digest fetcher)."""
    async with ClientSession() as session:
        yield session


def post_ids(page: str) -> list[int]:
    """Post ids of a preview page, in page order."""
    tree = LexborHTMLParser(page)
    refs = [n.attributes.get("data-post") or "" for n in tree.css("div.tgme_widget_message")]
    return [int(r.rsplit("/", 1)[1]) for r in refs if "/" in r]


def cursor(page: str) -> int | None:
    """The ?before= cursor of a page (``a.tme_messages_more[data-before]``)."""
    node = LexborHTMLParser(page).css_first("a.tme_messages_more[data-before]")
    return int(node.attributes["data-before"] or 0) if node is not None else None


async def get(http: ClientSession, url: str) -> tuple[int, str, str | None]:
    """Status, body and Location of a GET without following redirects."""
    async with http.get(url, allow_redirects=False) as resp:
        return resp.status, await resp.text(), resp.headers.get("Location")


async def test_saved_page_is_served_byte_for_byte(tme: FakeTme, http: ClientSession) -> None:
    """The newest page of a saved channel is the saved file itself."""
    name = tme.add_fixture_channel("infoscape_test_page.html")
    status, body, _ = await get(http, f"{tme.base_url}/s/{name}")
    assert status == 200
    assert body == (FIXTURES_DIR / "infoscape_test_page.html").read_text(encoding="utf-8")
    assert post_ids(body) == [1, 2, 3, 4, 5, 7]


async def test_saved_page_before_paging_filters_posts(tme: FakeTme, http: ClientSession) -> None:
    """?before=N re-pages the posts cut out of the saved page."""
    tme.add_fixture_channel("any2feed_full.html")
    _, body, _ = await get(http, f"{tme.base_url}/s/topwar_official?before=71000")
    assert post_ids(body) == [70989, 70990, 70992, 70995, 70996, 70997, 70998, 70999]
    assert cursor(body) is None
    title = LexborHTMLParser(body).css_first('meta[property="og:title"]')
    assert title is not None and title.attributes["content"] == "Военное обозрение"


async def test_generated_channel_pages_backwards(tme: FakeTme, http: ClientSession) -> None:
    """Pages hold page_size posts, oldest first, with a cursor while older posts exist."""
    posts = synthetic_channel("news", 45, seed=3)
    tme.add_posts("news", posts, title="News")
    ids = [p.post_id for p in posts]
    _, newest, _ = await get(http, f"{tme.base_url}/s/news")
    assert post_ids(newest) == ids[-20:]
    assert cursor(newest) == ids[-20]
    assert f'<link rel="prev" href="/s/news?before={ids[-20]}">' in newest
    _, older, _ = await get(http, f"{tme.base_url}/s/news?before={cursor(newest)}")
    assert post_ids(older) == ids[-40:-20]
    _, oldest, _ = await get(http, f"{tme.base_url}/s/news?before={cursor(older)}")
    assert post_ids(oldest) == ids[:5]
    assert cursor(oldest) is None
    _, after, _ = await get(http, f"{tme.base_url}/s/news?after={ids[2]}")
    assert post_ids(after) == ids[3:23]


async def test_hidden_and_unknown_channels_redirect_to_contact_page(
    tme: FakeTme, http: ClientSession
) -> None:
    """No preview → 302 to /<name>; that page is a contact page (titled or empty)."""
    tme.set_no_preview("alyatrend", title="Аля про AliExpress")
    for name, title in (("alyatrend", "Аля про AliExpress"), ("nobody_here", "")):
        status, _, location = await get(http, f"{tme.base_url}/s/{name}")
        assert (status, location) == (302, f"/{name}")
        status, body, _ = await get(http, f"{tme.base_url}{location}")
        assert status == 200
        assert f"<title>Telegram: Contact @{name}</title>" in body
        assert f'<meta property="og:title" content="{title}">' in body
    assert [(r.path, r.status) for r in tme.requests("/s/")] == [
        ("/s/alyatrend", 302),
        ("/s/nobody_here", 302),
    ]


async def test_channel_losing_its_preview(tme: FakeTme, http: ClientSession) -> None:
    """A channel that had a preview and lost it starts redirecting."""
    tme.add_posts("gone", synthetic_channel("gone", 3))
    assert (await get(http, f"{tme.base_url}/s/gone"))[0] == 200
    tme.set_no_preview("gone")
    assert (await get(http, f"{tme.base_url}/s/gone"))[0] == 302


async def test_empty_channel_says_no_posts_found(tme: FakeTme, http: ClientSession) -> None:
    """A channel without posts shows t.me's 'No posts found' block."""
    tme.add_posts("empty", [])
    _, body, _ = await get(http, f"{tme.base_url}/s/empty")
    assert '<div class="tme_no_messages_found">No posts found</div>' in body


async def test_registered_feed_path(tme: FakeTme, http: ClientSession) -> None:
    """add_path serves a body with its content type and status; others are 404."""
    url = tme.add_path("/feeds/news.rss", "<rss version='2.0'></rss>")
    async with http.get(url) as resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"] == "application/rss+xml; charset=utf-8"
        assert await resp.text() == "<rss version='2.0'></rss>"
    tme.add_path("/feeds/broken.rss", "oops", status=503, content_type="text/plain")
    assert (await get(http, f"{tme.base_url}/feeds/broken.rss"))[0] == 503
    assert (await get(http, f"{tme.base_url}/feeds/missing.rss"))[0] == 404


def test_rendered_post_markup_matches_telegrams() -> None:
    """Date link time, video duration, reply quote, forward and service class as on t.me."""
    when = datetime(2026, 3, 29, 1, 30, tzinfo=UTC)
    page = render_channel_page(
        "ch",
        [
            TmePost(1, when, "Channel created", service=True),
            TmePost(2, when, "Own <text>", reply_to=(1, "quoted"), video_duration="0:16"),
            TmePost(3, when, "fwd", forwarded_from="Other News"),
        ],
        title="Ch",
    )
    tree = LexborHTMLParser(page)
    messages = tree.css("div.tgme_widget_message")
    assert "service_message" in (messages[0].attributes.get("class") or "")
    second = messages[1]
    date = second.css_first("a.tgme_widget_message_date time")
    assert date is not None and date.attributes["datetime"] == "2026-03-29T01:30:00+00:00"
    assert [t.text() for t in second.css("time")] == ["0:16", "01:30"]
    own = [
        n.text()
        for n in second.css(".tgme_widget_message_text")
        if "js-message_text" in (n.attributes.get("class") or "")
    ]
    assert own == ["Own <text>"]
    reply = second.css_first("a.tgme_widget_message_reply .tgme_widget_message_text")
    assert reply is not None and reply.text() == "quoted"
    fwd = messages[2].css_first(".tgme_widget_message_forwarded_from_name")
    assert fwd is not None and fwd.text() == "Other News"


def test_synthetic_channel_is_deterministic_and_varied() -> None:
    """Same arguments give the same posts; ids and dates increase; the mix is realistic."""
    first = synthetic_channel("c1", 200, seed=7)
    assert first == synthetic_channel("c1", 200, seed=7)
    assert first != synthetic_channel("c2", 200, seed=7)
    ids = [p.post_id for p in first]
    assert ids == sorted(set(ids))
    assert [p.date for p in first] == sorted(p.date for p in first)
    assert first[-1].date == datetime(2026, 1, 1, 9, 0, tzinfo=UTC)
    assert any(p.service for p in first) and any(p.forwarded_from for p in first)
    assert any(p.reply_to for p in first) and any(p.video_duration for p in first)
    assert all(p.date.tzinfo is not None for p in first)
