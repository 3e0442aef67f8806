"""A streamed answer's server-sent events, read without holding the event loop.

One 3 MB SSE event blocked the loop 0.7 s: every other user's reply waited behind it.
Measured on the providers' three readers (3 MB event, longest step of the loop): the
Mistral SDK's ``stream_events_async`` 1.1 s (it scans its whole buffer again, byte by
byte in Python, for every piece of the event that arrives: quadratic), ``httpx-sse``
(Cerebras, DeepSeek) 18 ms, the Groq SDK's decoder 22 ms. So:

* :func:`aiohttp_chunks` reads a stream the providers' plain transport opened
  (:meth:`llm.providers.plain_post.PlainPost.open_stream`: Groq, Cerebras, DeepSeek;
  ``docs/decisions/131-streams-over-aiohttp.md``), line by line with ``bytes`` methods (in C),
  each event bounded as below; aiohttp has no SSE reader of its own, and the bound
  has to be counted on the bytes anyway;
* :func:`sse_chunks` reads an ``httpx`` stream with ``httpx-sse`` (linear: ``str``
  methods in C), for Mistral (its SDK's client), whose events are the same
  ``data: {json}`` lines ending with ``data: [DONE]``;
* :func:`bound_events` caps every event at :data:`MAX_EVENT_BYTES` at the byte level,
  before any reader sees it (also under the Groq SDK's decoder): an event that grows past
  it is a cut (:class:`~llm.errors.ProviderUnavailable`, ``interrupted``; the cascade
  settles what was received). A real chunk is a few tokens, well under a kilobyte; a
  whole answer in one chunk is at most ``CHAT_MAX_OUTPUT_TOKENS`` tokens, about 150 KB
  escaped at the ceiling's 8k tokens of non-Latin text. The bound also caps memory: a
  provider (or a proxy) that sends megabytes without a blank line cannot fill it.

Decoding one bounded event (``json.loads`` of 1 MiB, ~5 ms) stays on the loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from typing import Any

import aiohttp
import httpx
from httpx_sse import EventSource

from budget.kernel.clock import Clock
from llm.errors import ProviderError, ProviderUnavailable
from llm.providers import body_cap
from llm.providers.base import error_for_status
from llm.providers.plain_post import PlainPost, aiohttp_transport_error, read_capped
from llm.providers.ratelimits import parse_rate_limits
from llm.stream import ChunkStream

__all__ = [
    "MAX_EVENT_BYTES",
    "BoundedEvents",
    "aiohttp_chunks",
    "bound_events",
    "open_plain_stream",
    "sse_chunks",
]

#: Bytes one server-sent event may hold, its field names and line ends included.
MAX_EVENT_BYTES = 1 << 20
#: What ends an event: a blank line, in any of SSE's three line ends.
_BOUNDARIES = (b"\n\n", b"\r\r", b"\r\n\r\n")


class BoundedEvents(httpx.AsyncByteStream):
    """A response body that fails once an SSE event grows past ``max_event_bytes``.

    Args:
        provider: the provider key name (for the error).
        inner: the response's own byte stream.
        max_event_bytes: the bound (:data:`MAX_EVENT_BYTES`).

    Raises (while iterated):
        ProviderUnavailable: an event over the bound (``interrupted``).
    """

    def __init__(
        self, provider: str, inner: httpx.AsyncByteStream, max_event_bytes: int = MAX_EVENT_BYTES
    ) -> None:
        self._provider = provider
        self._inner = inner
        self._max = max_event_bytes
        self._open_bytes = 0  # bytes since the end of the last event
        self._tail = b""  # the last bytes seen, for a boundary split across pieces

    def __repr__(self) -> str:
        return f"BoundedEvents({self._provider!r}, open_bytes={self._open_bytes})"

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for piece in self._inner:
            self._see(piece)
            yield piece

    def _see(self, piece: bytes) -> None:
        window = self._tail + piece
        ends = [at + len(b) for b in _BOUNDARIES if (at := window.rfind(b)) >= 0]
        if ends:  # an event ended in this piece: count from its end
            self._open_bytes = len(window) - max(ends)
        else:
            self._open_bytes += len(piece)
        self._tail = window[-3:]
        if self._open_bytes > self._max:
            raise ProviderUnavailable(
                self._provider,
                f"a stream event over {self._max} bytes",
                interrupted=True,
            )

    async def aclose(self) -> None:
        await self._inner.aclose()


def bound_events(
    provider: str, response: httpx.Response, max_event_bytes: int = MAX_EVENT_BYTES
) -> httpx.Response:
    """Put :class:`BoundedEvents` under ``response``'s body, before anything reads it;
    returns ``response``."""
    inner = response.stream
    if not isinstance(inner, httpx.AsyncByteStream):
        raise TypeError("a streamed response of an async client is expected")
    response.stream = BoundedEvents(provider, inner, max_event_bytes)
    return response


async def sse_chunks(provider: str, response: httpx.Response) -> AsyncIterator[Mapping[str, Any]]:
    """The JSON chunks of a streamed answer up to ``data: [DONE]`` (or its end), each
    event bounded (:func:`bound_events`).

    Raises (while iterated):
        ProviderUnavailable: an event over the bound, or one that is not JSON
            (``interrupted``).
    """
    async for event in EventSource(bound_events(provider, response)).aiter_sse():
        if event.data.strip() == "[DONE]":
            return
        if not event.data:
            continue
        try:
            chunk = json.loads(event.data)
        except (ValueError, RecursionError):
            raise ProviderUnavailable(
                provider, "stream chunk is not JSON", interrupted=True
            ) from None
        yield chunk


def _json_event(provider: str, data: bytes) -> object:
    try:
        return json.loads(data)
    except (ValueError, RecursionError):
        raise ProviderUnavailable(provider, "stream chunk is not JSON", interrupted=True) from None


async def aiohttp_chunks(
    provider: str,
    response: aiohttp.ClientResponse,
    max_event_bytes: int = MAX_EVENT_BYTES,
    max_stream_bytes: int | None = None,
) -> AsyncIterator[Mapping[str, Any]]:
    """The JSON chunks of a streamed answer read from an ``aiohttp`` response, up to
    ``data: [DONE]`` (or the body's end).

    Server-sent events as the WHATWG spec reads them: lines end with LF, CRLF or CR; a
    ``data:`` field adds a line to the event (one leading space dropped), comment lines
    (``: keep-alive``) and other fields are skipped, a blank line ends the event (one
    without data is none). An ``event: error`` is yielded like any other (its data is
    the provider's error object: :class:`llm.stream.ChunkStream` turns it into a cut).
    The bytes of one event are counted as they arrive: past ``max_event_bytes`` the
    stream is cut before anything decodes it; a piece without a line end is kept as is
    (no quadratic joining of a trickle). The whole body is at most ``max_stream_bytes``
    (``None``: :data:`llm.providers.body_cap.MAX_STREAM_BYTES`, read at each call).

    Raises (while iterated):
        ProviderUnavailable: an event over the bound, the body over its cap, or an
            event that is not JSON (``interrupted``).
        aiohttp.ClientError: the connection failed (the caller translates it).
    """
    pending: list[bytes] = []  # the open line's pieces, without a line end yet
    data: list[bytes] = []  # the open event's data lines
    open_bytes = 0  # bytes of the open event so far (the pending pieces included)
    held_cr = False  # the last piece ended with CR: maybe the first half of a CRLF
    cap = body_cap.MAX_STREAM_BYTES if max_stream_bytes is None else max_stream_bytes
    # closed with this generator (an abandoned one is finalised in a task of its own)
    async with contextlib.aclosing(_pieces(response.content, provider, cap)) as pieces:
        async for piece in pieces:
            if held_cr:
                piece = b"\r" + piece
                held_cr = False
            if b"\r" in piece:
                if piece.endswith(b"\r"):
                    piece, held_cr = piece[:-1], True
                piece = piece.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
            if b"\n" not in piece:
                pending.append(piece)
                open_bytes += len(piece)
                if open_bytes > max_event_bytes:
                    raise _over(provider, max_event_bytes)
                continue
            start = sum(map(len, pending)) - open_bytes  # where the open event began (<= 0)
            if pending:
                pending.append(piece)
                piece = b"".join(pending)
                pending.clear()
            lines = piece.split(b"\n")
            tail = lines.pop()
            at = 0  # bytes of this piece up to the end of the current line
            for line in lines:
                at += len(line) + 1
                if line:
                    if line.startswith(b"data:"):
                        value = line[5:]
                        data.append(value[1:] if value.startswith(b" ") else value)
                    continue
                if at - start > max_event_bytes:  # an event ended: its size, line ends counted
                    raise _over(provider, max_event_bytes)
                start = at
                if not data:
                    continue
                body = data[0] if len(data) == 1 else b"\n".join(data)
                data.clear()
                if body.strip() == b"[DONE]":
                    return
                chunk = _json_event(provider, body)
                if not isinstance(chunk, Mapping):
                    raise ProviderUnavailable(
                        provider, "stream chunk is not an object", interrupted=True
                    )
                yield chunk
            if tail:
                pending.append(tail)
            open_bytes = len(piece) - start
            if open_bytes > max_event_bytes:
                raise _over(provider, max_event_bytes)


async def _pieces(
    content: aiohttp.StreamReader, provider: str, max_bytes: int
) -> AsyncGenerator[bytes, None]:
    """The body's bytes as they arrive (``StreamReader.iter_any``), at most ``max_bytes``
    in all (past them an interrupted :class:`~llm.errors.ProviderUnavailable`), and —
    when the connection fails — the bytes that had arrived before it, then the failure.

    aiohttp's reader raises a failure before it returns what is still buffered
    (``StreamReader.readany`` checks its exception first), so chunks that arrived in the
    same loop iteration as a dropped connection would be lost, and with them the text
    (and tokens) a cut stream is settled at. It has no public read of that buffer, so
    its private ``_buffer``/``_read_nowait`` are used (aiohttp is pinned in
    ``constraints.txt``; ``tests/llm/test_llm_stream.py`` covers a cut after text)."""
    received = 0
    while True:
        try:
            piece = await content.readany()
        except Exception:
            buffered = getattr(content, "_buffer", None)
            if buffered:
                left: bytes = content._read_nowait(-1)
                if left:
                    yield left
            raise
        if not piece:
            return
        received += len(piece)
        if received > max_bytes:
            raise ProviderUnavailable(
                provider, f"response body over {max_bytes} bytes", interrupted=True
            )
        yield piece


def _over(provider: str, max_event_bytes: int) -> ProviderUnavailable:
    return ProviderUnavailable(
        provider, f"a stream event over {max_event_bytes} bytes", interrupted=True
    )


async def open_plain_stream(
    provider: str,
    plain: PlainPost,
    url: str,
    payload: Mapping[str, Any],
    *,
    model: str,
    timeout_s: float,
    clock: Clock,
) -> ChunkStream:
    """Send a streamed request over the plain transport and return its
    :class:`~llm.stream.ChunkStream` once the 200 arrived.

    Args:
        provider: the key's name (errors, the stream).
        plain: the key's transport.
        url: the ``chat/completions`` URL.
        payload: the request (``"stream": true`` in it).
        model: the model asked for.
        timeout_s: the deadline of the request until its head arrived, seconds (the
            body is bounded by the stream's first-token, idle and total deadlines).
        clock: for HTTP-date ``Retry-After`` values.

    Raises:
        ProviderError: a status other than 200 translated (429, 5xx, 401...; its body
            over :data:`llm.providers.plain_post.MAX_RESPONSE_BYTES` is an interrupted
            failure), a transport failure, the deadline, or a content coding not
            offered.
    """
    try:
        async with asyncio.timeout(timeout_s):
            response = await plain.open_stream(url, payload)
            limits = parse_rate_limits(response.headers, now=clock.now())
            if response.status != 200:
                try:  # at most the plain call's cap, as every error body
                    text = (await read_capped(response)).decode(errors="replace")
                finally:
                    response.release()
                raise error_for_status(provider, response.status, text, limits)
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise aiohttp_transport_error(provider, exc) from None
    coding = response.headers.get("Content-Encoding", "").strip().lower()
    if coding not in ("", "identity"):  # not offered: aiohttp would inflate it unbounded
        response.close()
        raise ProviderUnavailable(
            provider, f"content coding {coding[:20]!r} not offered", interrupted=True
        )

    async def close() -> None:
        # at its end the connection goes back to the pool; before it (a stop, a cut)
        # it is closed, so the provider stops generating
        if response.content.at_eof():
            response.release()
        else:
            response.close()

    return ChunkStream(
        provider,
        model,
        aiohttp_chunks(provider, response),
        close,
        lambda exc: _stream_error(provider, exc),
        limits,
    )


def _stream_error(provider: str, exc: Exception) -> ProviderError:
    """A failure after the 200: the provider may have billed what it generated."""
    if isinstance(exc, aiohttp.ClientError | TimeoutError):
        return aiohttp_transport_error(provider, exc)
    return ProviderUnavailable(provider, f"stream failed ({type(exc).__name__})", interrupted=True)
