"""Server-sent events (``llm/providers/sse.py``): the bound on one event, counted from the
end of the last event whatever the pieces the bytes arrive in, and the aiohttp reader's
lines, fields and failures."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, cast

import aiohttp
import httpx
import pytest

from llm.errors import ProviderUnavailable
from llm.providers.sse import BoundedEvents, aiohttp_chunks, sse_chunks


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


class _Content:
    """What :func:`aiohttp_chunks` reads of an aiohttp response: ``readany`` pieces, then
    ``b""`` (the end) or ``fail`` raised with the last pieces still buffered."""

    def __init__(self, *pieces: bytes, fail: Exception | None = None, buffered: int = 0) -> None:
        self._pieces = list(pieces)
        self._fail = fail
        self._buffer = self._pieces[len(self._pieces) - buffered :] if buffered else []
        if buffered:
            self._pieces = self._pieces[: len(self._pieces) - buffered]

    async def readany(self) -> bytes:
        if self._pieces:
            return self._pieces.pop(0)
        if self._fail is not None:
            raise self._fail
        return b""

    def _read_nowait(self, n: int) -> bytes:
        assert n == -1
        out, self._buffer = b"".join(self._buffer), []
        return out


class _Response:
    def __init__(self, content: _Content) -> None:
        self.content = content


async def _chunks(*pieces: bytes, **kw: Any) -> list[Any]:
    response = cast(aiohttp.ClientResponse, _Response(_Content(*pieces, **kw)))
    return [chunk async for chunk in aiohttp_chunks("groq", response, max_event_bytes=100)]


@pytest.mark.parametrize("end", [b"\n", b"\r\n", b"\r"])
async def test_aiohttp_events_whatever_the_line_ends_and_pieces(end: bytes) -> None:
    """Every line end SSE allows, the body cut into 3-byte pieces (a CRLF split across
    two pieces included); comments and other fields are skipped; [DONE] ends it."""
    lines = [b": keep-alive", b"", b'data: {"a": 1}', b"id: 7", b"", b'data:{"b": 2}', b""]
    body = end.join([*lines, b"data: [DONE]", b"", b'data: {"c": 3}', b"", b""])
    pieces = [body[i : i + 3] for i in range(0, len(body), 3)]
    assert await _chunks(*pieces) == [{"a": 1}, {"b": 2}]


async def test_aiohttp_an_error_event_is_yielded_for_the_stream_to_cut() -> None:
    body = b'data: {"a": 1}\n\nevent: error\ndata: {"error": {"message": "x"}}\n\n'
    assert await _chunks(body) == [{"a": 1}, {"error": {"message": "x"}}]


async def test_aiohttp_an_event_over_the_bound_is_a_cut_even_as_a_trickle() -> None:
    """A line that never ends, one byte a piece: cut at the bound (nothing joined each time)."""
    pieces = [b"data: {}\n\n"] + [b"x"] * 200
    with pytest.raises(ProviderUnavailable, match="a stream event over 100 bytes") as cut:
        await _chunks(*pieces)
    assert cut.value.interrupted
    event = b'data: {"k": "' + b"x" * 83 + b'"}\n\n'  # exactly the bound, line ends counted
    assert len(event) == 100
    assert await _chunks(event, event) == [{"k": "x" * 83}] * 2
    with pytest.raises(ProviderUnavailable, match="over 100 bytes"):
        await _chunks(event[:-2] + b" \n\n")


async def test_aiohttp_a_chunk_that_is_not_json_is_a_cut() -> None:
    with pytest.raises(ProviderUnavailable, match="not JSON"):
        await _chunks(b"data: {nope\n\n")


async def test_aiohttp_what_arrived_before_a_dropped_connection_is_read_first() -> None:
    """aiohttp raises a failure before returning its buffer: the buffered events still
    come out, then the failure (a cut is settled at the text received)."""
    drop = aiohttp.ClientPayloadError("connection lost")
    response = cast(
        aiohttp.ClientResponse,
        _Response(_Content(b'data: {"a": 1}\n\n', b'data: {"b": 2}\n\n', fail=drop, buffered=1)),
    )
    seen = []
    with pytest.raises(aiohttp.ClientPayloadError):
        async for chunk in aiohttp_chunks("groq", response):
            seen.append(chunk)
    assert seen == [{"a": 1}, {"b": 2}]
