"""A size cap on every body the providers' ``httpx`` clients read: the Mistral SDK's
one-piece answers, every streamed answer, and every error body (which the SDKs read
whole before raising).

The plain call over ``aiohttp`` reads at most
:data:`llm.providers.plain_post.MAX_RESPONSE_BYTES` (8 MiB) in counted chunks; the
``httpx`` paths read through SDKs that call ``response.aread()`` themselves, so the cap
sits under them: :func:`cap_body` is a response event hook (run by ``httpx`` after the
headers, before any byte of the body is read) that puts :class:`CountedBody` under the
response's byte stream. Past its limit the body fails with :class:`BodyTooLarge`, an
``httpx.ReadError``: the SDKs let it through as a transport failure (the Groq SDK wraps
it in ``APIConnectionError``, its ``__cause__``), and
:func:`llm.providers.base.transport_error` translates it into an *interrupted*
:class:`~llm.errors.ProviderUnavailable` — the provider may have generated and billed, so
the ledger books the hold at its ceiling (a stream: what it received). Memory per body is
bounded by the limit.

Limits (bytes):

* a one-piece body (a 200 that is not a stream, any error body): :data:`MAX_RESPONSE_BYTES`,
  the plain call's;
* a streamed 200 (``text/event-stream``): :data:`MAX_STREAM_BYTES`, 512 bytes for each of
  the most output tokens any known model streams (131,072,
  :data:`llm.model_caps.MAX_OUTPUT_TOKENS`): a real chunk of one token is 200–400 bytes
  (Groq's, with its ``x_groq`` block, is the longest). Each event is bounded on its own
  as well (:data:`llm.providers.sse.MAX_EVENT_BYTES`).

Compression: the clients offer only ``identity`` (:data:`CLIENT_HEADERS`), since ``httpx``
would inflate a whole received chunk before any count (a few kilobytes of ``gzip`` are
gigabytes); a body with any other ``Content-Encoding`` is refused like one over the cap.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx

from llm.providers.plain_post import MAX_RESPONSE_BYTES

__all__ = [
    "CLIENT_HEADERS",
    "MAX_RESPONSE_BYTES",
    "MAX_STREAM_BYTES",
    "BodyTooLarge",
    "CountedBody",
    "body_limit",
    "cap_body",
]

#: Bytes a streamed answer may hold in all (see the module docstring).
MAX_STREAM_BYTES = 131_072 * 512
#: Headers every provider ``httpx`` client sends: no content coding but identity.
CLIENT_HEADERS = {"Accept-Encoding": "identity"}


class BodyTooLarge(httpx.ReadError):
    """A provider's body over its cap, or in a content coding not offered; the message
    says which (it names no secret: a size or a coding)."""


class CountedBody(httpx.AsyncByteStream):
    """A response body that fails once more than ``limit`` bytes have arrived.

    Args:
        inner: the response's own byte stream.
        limit: most bytes accepted.

    Raises (while iterated):
        BodyTooLarge: the body grew past ``limit``.
    """

    def __init__(self, inner: httpx.AsyncByteStream, limit: int) -> None:
        self._inner = inner
        self._limit = limit
        self.size = 0

    def __repr__(self) -> str:
        return f"CountedBody(size={self.size}, limit={self._limit})"

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for piece in self._inner:
            self.size += len(piece)
            if self.size > self._limit:
                raise BodyTooLarge(f"response body over {self._limit} bytes")
            yield piece

    async def aclose(self) -> None:
        await self._inner.aclose()


def body_limit(response: httpx.Response) -> int:
    """The cap of ``response``'s body, bytes: :data:`MAX_STREAM_BYTES` for a streamed 200,
    :data:`MAX_RESPONSE_BYTES` for anything else."""
    content_type = response.headers.get("content-type", "").split(";")[0].strip().lower()
    if response.status_code == 200 and content_type == "text/event-stream":
        return MAX_STREAM_BYTES
    return MAX_RESPONSE_BYTES


async def cap_body(response: httpx.Response) -> None:
    """The response hook: refuse a body declared over its cap or in a coding not
    offered, and count the rest as it arrives (:class:`CountedBody`).

    Raises:
        BodyTooLarge: declared too long, or content-coded (``httpx`` then closes the
            response).
    """
    coding = response.headers.get("content-encoding", "").strip().lower()
    if coding not in ("", "identity"):
        raise BodyTooLarge(f"content coding {coding[:20]!r} not offered", request=response.request)
    limit = body_limit(response)
    declared = response.headers.get("content-length", "").strip()
    if declared.isdigit() and int(declared) > limit:
        raise BodyTooLarge(
            f"response body of {declared} bytes over {limit}", request=response.request
        )
    inner = response.stream
    if isinstance(inner, httpx.AsyncByteStream):  # an async client's (always, here)
        response.stream = CountedBody(inner, limit)
