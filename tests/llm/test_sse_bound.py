"""The bound on one server-sent event (``llm/providers/sse.py``): counted from the end of
the last event, whatever the pieces the bytes arrive in."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from llm.errors import ProviderUnavailable
from llm.providers.sse import BoundedEvents, sse_chunks


class _Pieces(httpx.AsyncByteStream):
    def __init__(self, *pieces: bytes) -> None:
        self.pieces = pieces
        self.closed = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for piece in self.pieces:
            yield piece

    async def aclose(self) -> None:
        self.closed = True


async def _read(stream: httpx.AsyncByteStream) -> bytes:
    return b"".join([piece async for piece in stream])


@pytest.mark.parametrize("end", [b"\n\n", b"\r\r", b"\r\n\r\n"])
async def test_events_up_to_the_bound_pass_whatever_their_line_ends(end: bytes) -> None:
    """Three events of exactly the bound (their line ends counted), in pieces that split
    the blank lines between them."""
    event = b"data: " + b"x" * (100 - 6 - len(end)) + end
    body = event * 3
    pieces = [body[i : i + 7] for i in range(0, len(body), 7)]
    assert await _read(BoundedEvents("mistral", _Pieces(*pieces), max_event_bytes=100)) == body


async def test_one_byte_over_the_bound_is_a_cut_and_the_stream_closes() -> None:
    inner = _Pieces(b"data: {}\n\n", b"data: " + b"x" * 95, b"y")
    bounded = BoundedEvents("groq", inner, max_event_bytes=100)
    with pytest.raises(ProviderUnavailable, match="a stream event over 100 bytes") as cut:
        await _read(bounded)
    assert cut.value.interrupted
    await bounded.aclose()
    assert inner.closed


async def test_sse_chunks_reads_json_events_and_stops_at_done() -> None:
    body = b': keep-alive\n\ndata: {"a": 1}\n\ndata: {"b": 2}\n\ndata: [DONE]\n\ndata: {"c": 3}\n\n'
    response = httpx.Response(
        200, headers={"content-type": "text/event-stream"}, stream=_Pieces(body)
    )
    assert [chunk async for chunk in sse_chunks("deepseek", response)] == [{"a": 1}, {"b": 2}]
