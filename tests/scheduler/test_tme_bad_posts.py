"""A t.me post dated year 1, or with a 23-digit id, is skipped and counted."""

from __future__ import annotations

import httpx

from scheduler.sources.tme import TmeClient, parse_channel_page


def _post(post_id: str, when: str, text: str) -> str:
    return (
        f'<div class="tgme_widget_message" data-post="chan/{post_id}">'
        f'<div class="tgme_widget_message_text">{text}</div>'
        f'<a class="tgme_widget_message_date" href="https://t.me/chan/{post_id}">'
        f'<time datetime="{when}"></time></a></div>'
    )


PAGE = (
    '<html><head><meta property="og:title" content="Chan"></head><body>'
    '<section class="tgme_channel_history">'
    + _post("10", "0001-01-01T00:00:00+00:00", "year one")
    + _post("11", "0001-01-01T00:00:00+03:00", "year one east of UTC")
    + _post("12345678901234567890123", "2026-03-01T08:00:00+00:00", "huge id")
    + _post("13", "9999-12-31T23:59:59-05:00", "past the end of time")
    + _post("14", "2026-03-01T09:00:00+00:00", "a good one")
    + "</section></body></html>"
)


def test_out_of_range_dates_and_ids_are_skipped_and_counted() -> None:
    """Year 1 (twice), a 23-digit id and year 9999: four skipped and counted, the good
    post kept."""
    page = parse_channel_page(PAGE, "chan")
    assert [p.post_id for p in page.posts] == [14]
    assert page.unparseable == 4


async def test_fetch_since_counts_them_and_goes_on() -> None:
    """Through the client (parsed off the loop): the fetch succeeds with the good post."""
    transport = httpx.MockTransport(lambda r: httpx.Response(200, text=PAGE))
    client = TmeClient(httpx.AsyncClient(transport=transport), base_url="https://t.me")
    fetched = await client.fetch_since("chan", None)
    assert [p.text for p in fetched.posts] == ["a good one"]
    assert fetched.unparseable == 4
