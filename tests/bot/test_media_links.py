"""A message that is one link: which messages are, and the page fetched through the
feeds' guarded transport (SSRF guard, size cap) and read like a document."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

import httpx
import pytest

from bot.media.errors import LinkFailed, LinkRefused, LinkTooLarge, LinkUnsupported
from bot.media.links import LinkReader, find_link
from bot.media.types import DocumentKind, Extracted, ExtractionFailed, ExtractionLimits, Refusal
from bot.media.worker import ExtractionPool
from scheduler.sources.feeds import AddressGuard, FeedClient, GuardedTransport
from tests.support.documents import FIXTURES
from tests.support.tme import FakeTme

ARTICLE = (
    "<html><head><title>Holds before spending</title></head><body>"
    "<nav><a href='/'>Home</a> <a href='/login'>Log in to your account</a></nav><article>"
    + "<p>The ledger holds the worst case of a call before the call is made. </p>" * 8
    + "</article><footer>All rights reserved</footer></body></html>"
)


def _resolver(table: dict[str, list[str]]) -> Callable[[str, int], Awaitable[list[str]]]:
    async def resolve(host: str, port: int) -> list[str]:
        return table[host]

    return resolve


@pytest.fixture
async def pool() -> AsyncIterator[ExtractionPool]:
    pool = ExtractionPool(ExtractionLimits(max_chars=100_000), prewarm=0)
    yield pool
    await pool.close()


@pytest.fixture
async def tme() -> AsyncIterator[FakeTme]:
    async with FakeTme() as fake:
        yield fake


Reader = Callable[..., LinkReader]


@pytest.fixture
async def reader(pool: ExtractionPool) -> AsyncIterator[Reader]:
    """``reader(guard, max_bytes=…)``: a LinkReader over a guarded client like the
    bot's (closed after the test)."""
    clients: list[httpx.AsyncClient] = []

    def make(guard: AddressGuard, *, max_bytes: int = 2_000_000) -> LinkReader:
        http = httpx.AsyncClient(transport=GuardedTransport(guard), trust_env=False)
        clients.append(http)
        return LinkReader(FeedClient(http, guard, max_bytes=max_bytes, timeout_s=10.0), pool)

    yield make
    for http in clients:
        await http.aclose()


def _news_guard() -> AddressGuard:
    """``news.example`` resolves to the loopback fake (loopback allowed for it only in
    tests; production's guard refuses loopback)."""
    return AddressGuard(allow_loopback=True, resolver=_resolver({"news.example": ["127.0.0.1"]}))


@pytest.mark.parametrize(
    ("text", "url"),
    [
        ("https://example.org/article", "https://example.org/article"),
        ("  http://example.org/a?b=1#c \n", "http://example.org/a?b=1#c"),
        ("summarise https://example.org/x", "https://example.org/x"),
        ("Summarize: https://example.org/x", "https://example.org/x"),
        ("кратко https://example.org/статья", "https://example.org/статья"),
        ("TL;DR https://example.org/x.", "https://example.org/x"),
        ("https://en.wikipedia.org/wiki/Foo_(bar)", "https://en.wikipedia.org/wiki/Foo_(bar)"),
        ("https://example.org/x)", "https://example.org/x"),
        ("what do you think of https://example.org/x", None),
        ("https://a.org https://b.org", None),
        ("ftp://example.org/file", None),
        ("https://user:pass@example.org/", None),
        ("https:///nohost", None),
        ("https://[::1", None),
        ("https://example.org/" + "a" * 3000, None),
        ("hello", None),
    ],
)
def test_only_a_message_that_is_one_link_is_a_link_request(text: str, url: str | None) -> None:
    assert find_link(text) == url


async def test_a_page_is_fetched_and_its_main_text_read(tme: FakeTme, reader: Reader) -> None:
    tme.add_path("/news/holds", ARTICLE, content_type="text/html; charset=utf-8")
    url = f"http://news.example:{tme.port}/news/holds"
    page = await reader(_news_guard()).read(url)
    assert page.content_type == "text/html" and page.size_bytes == len(ARTICLE)
    assert isinstance(page.result, Extracted) and page.result.kind == DocumentKind.HTML
    assert "worst case of a call" in page.result.text
    assert "Log in" not in page.result.text and page.result.title == "Holds before spending"


async def test_a_link_to_a_pdf_is_read_as_a_pdf(tme: FakeTme, reader: Reader) -> None:
    body = (FIXTURES / "documents" / "crazyones_1page.pypdf.pdf").read_bytes()
    tme.add_path("/paper", body, content_type="application/octet-stream")
    page = await reader(_news_guard()).read(f"http://news.example:{tme.port}/paper")
    assert isinstance(page.result, Extracted) and page.result.kind == DocumentKind.PDF
    assert "crazy ones" in page.result.text


async def test_a_loopback_link_is_refused_and_nothing_is_fetched(
    tme: FakeTme, reader: Reader
) -> None:
    tme.add_path("/admin", "secret", content_type="text/plain")
    refusing = reader(AddressGuard())  # the production guard
    with pytest.raises(LinkRefused) as info:
        await refusing.read(f"http://127.0.0.1:{tme.port}/admin")
    assert info.value.address == "127.0.0.1"
    with pytest.raises(LinkRefused):
        await refusing.read(f"http://localhost:{tme.port}/admin")
    assert tme.requests("/admin") == []


@pytest.mark.parametrize(
    "url", ["http://10.0.0.8/", "http://169.254.169.254/latest/meta-data/", "http://[::1]:80/"]
)
async def test_private_and_metadata_addresses_are_refused(url: str, reader: Reader) -> None:
    with pytest.raises(LinkRefused):
        await reader(AddressGuard()).read(url)


async def test_a_redirect_to_a_private_address_is_refused(pool: ExtractionPool) -> None:
    """A public page that redirects to the cloud metadata address: the guard checks the
    redirect's target before following it."""
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(str(request.url))
        return httpx.Response(302, headers={"location": "http://169.254.169.254/latest/"})

    guard = AddressGuard(resolver=_resolver({"news.example": ["93.184.216.34"]}))
    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as http:
        with pytest.raises(LinkRefused):
            await LinkReader(FeedClient(http, guard), pool).read("https://news.example/a")
    assert seen == ["https://news.example/a"]


async def test_a_page_over_the_fetch_cap_is_too_large(tme: FakeTme, reader: Reader) -> None:
    tme.add_path("/big", "<p>" + "x" * 50_000 + "</p>", content_type="text/html")
    with pytest.raises(LinkTooLarge) as info:
        await reader(_news_guard(), max_bytes=10_000).read(f"http://news.example:{tme.port}/big")
    assert info.value.limit_bytes == 10_000


async def test_an_image_link_is_unsupported_and_a_missing_page_failed(
    tme: FakeTme, reader: Reader
) -> None:
    jpeg = (FIXTURES / "images" / "photo_kitten.go-telegram-bot-api.jpg").read_bytes()
    tme.add_path("/cat.jpg", jpeg, content_type="image/jpeg")
    news = reader(_news_guard())
    with pytest.raises(LinkUnsupported) as info:
        await news.read(f"http://news.example:{tme.port}/cat.jpg")
    assert info.value.content_type == "image/jpeg"
    with pytest.raises(LinkFailed) as failed:
        await news.read(f"http://news.example:{tme.port}/no/such/page")
    assert failed.value.reason == "status"


async def test_a_page_with_nothing_to_read_is_an_extraction_refusal(
    tme: FakeTme, reader: Reader
) -> None:
    blank = "<html><body><script>x()</script></body></html>"
    tme.add_path("/blank", blank, content_type="text/html")
    page = await reader(_news_guard()).read(f"http://news.example:{tme.port}/blank")
    assert isinstance(page.result, ExtractionFailed) and page.result.reason == Refusal.EMPTY
