"""A streamed answer's server-sent events, read without holding the event loop.

One 3 MB SSE event blocked the loop 0.7 s: every other user's reply waited behind it.
Measured on the providers' three readers (3 MB event, longest step of the loop): the
Mistral SDK's ``stream_events_async`` 1.1 s (it scans its whole buffer again, byte by
byte in Python, for every piece of the event that arrives: quadratic), ``httpx-sse``
(Cerebras, DeepSeek) 18 ms, the Groq SDK's decoder 22 ms. So:

* :func:`sse_chunks` reads a stream with ``httpx-sse`` (linear: ``str`` methods in C),
  for the OpenAI-compatible providers and for Mistral, whose events are the same
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

import json
from collections.abc import AsyncIterator, Mapping
from typing import Any

import httpx
from httpx_sse import EventSource

from llm.errors import ProviderUnavailable

__all__ = ["MAX_EVENT_BYTES", "BoundedEvents", "bound_events", "sse_chunks"]

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
