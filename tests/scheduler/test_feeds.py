"""Feeds: the SSRF guard and parsing."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from scheduler.errors import RefusedAddress
from scheduler.sources.feeds import AddressGuard, FeedClient, parse_feed

SHARED_FEEDS = Path(__file__).parents[3] / "shared" / "corpus" / "feeds"

RSS = b"""<?xml version="1.0"?><rss version="2.0"><channel><title>T</title>
<item><title>One</title><link>https://e.org/1</link><guid>1</guid>
<pubDate>Mon, 02 Mar 2026 08:00:00 GMT</pubDate>
<description>&lt;p&gt;Body &lt;b&gt;one&lt;/b&gt;&lt;/p&gt;</description></item>
<item><title>Two</title><link>https://e.org/2</link><guid>2</guid>
<pubDate>Mon, 02 Mar 2026 07:00:00 GMT</pubDate></item>
</channel></rss>"""


def _resolver(table: dict[str, list[str]]):  # type: ignore[no-untyped-def]
    async def resolve(host: str, port: int) -> list[str]:
        return table[host]

    return resolve


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1/feed",
        "http://10.0.0.1/feed",
        "http://[::1]/f",
        "http://169.254.169.254/",
        "http://0.0.0.0/",
        "http://[::ffff:10.0.0.1]/",
        "http://224.0.0.1/",
        "http://192.168.1.1/",
    ],
)
async def test_literal_non_public_addresses_refused(url: str) -> None:
    """Loopback, private, link-local, unspecified, mapped and multicast literals are refused."""
    with pytest.raises(RefusedAddress):
        await AddressGuard().check(url)


async def test_hostname_resolving_to_private_refused() -> None:
    """A name with one private address among public ones is refused (every address checked)."""
    guard = AddressGuard(resolver=_resolver({"evil.example": ["93.184.216.34", "10.0.0.1"]}))
    with pytest.raises(RefusedAddress) as info:
        await guard.check("https://evil.example/feed")
    assert info.value.address == "10.0.0.1"


async def test_loopback_knob_off_by_default() -> None:
    """allow_loopback admits 127.0.0.1 only when set; private stays refused."""
    await AddressGuard(allow_loopback=True).check("http://127.0.0.1:8080/feed")
    with pytest.raises(RefusedAddress):
        await AddressGuard(allow_loopback=True).check("http://10.0.0.1/feed")


async def test_redirect_to_private_refused_and_nothing_fetched_there() -> None:
    """A public feed redirecting to 10.0.0.1 is refused before the second request."""
    requested: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        requested.append(str(request.url))
        return httpx.Response(302, headers={"location": "http://10.0.0.1/internal"})

    guard = AddressGuard(resolver=_resolver({"feeds.example": ["93.184.216.34"]}))
    client = FeedClient(httpx.AsyncClient(transport=httpx.MockTransport(handler)), guard)
    with pytest.raises(RefusedAddress):
        await client.fetch("https://feeds.example/rss")
    assert requested == ["https://feeds.example/rss"]


async def test_feed_fetch_and_parse() -> None:
    """RSS entries come back oldest first with text stripped of HTML and UTC dates."""
    guard = AddressGuard(resolver=_resolver({"feeds.example": ["93.184.216.34"]}))
    transport = httpx.MockTransport(lambda r: httpx.Response(200, content=RSS))
    client = FeedClient(httpx.AsyncClient(transport=transport), guard)
    feed = await client.fetch("https://feeds.example/rss")
    assert feed.title == "T"
    assert [p.link for p in feed.posts] == ["https://e.org/2", "https://e.org/1"]
    assert feed.posts[1].text == "One\n\nBody one"
    assert feed.posts[1].published is not None and feed.posts[1].published.hour == 8


@pytest.mark.skipif(not SHARED_FEEDS.exists(), reason="../shared corpus not present")
def test_corpus_feeds_parse() -> None:
    """The saved RSS 2.0 / Atom / RSS 1.0 / ISO-8859-1 feeds all yield dated entries."""
    for path in sorted(SHARED_FEEDS.iterdir()):
        feed = parse_feed(path.read_bytes(), path.name)
        assert feed.posts, path.name
        assert all(p.text for p in feed.posts), path.name
