"""One bounded HTTP GET for channel pages and feeds: a total deadline and a size cap.

httpx's timeouts are per phase (connect, read, ...), so a server that trickles bytes
could hold a fetch open indefinitely; :func:`get_limited` bounds the whole exchange
with ``asyncio.timeout`` and stops reading after ``max_bytes``. Redirects are never
followed here: callers decide (a t.me redirect means "no public preview"; a feed
redirect must pass the address guard again).

Compression bombs: httpx would decode a whole received chunk before any size check (a
2.6 KB body with ``Content-Encoding: gzip, gzip`` inflates to ~3 GB). So the request
offers only ``gzip, deflate``, the raw bytes are read and decoded here with
``zlib.decompressobj(...).decompress(data, max_length)``, never producing more than
``max_bytes + 1`` decoded bytes in total, and a response with more than one coding layer
(or one we did not offer) is refused with :class:`~scheduler.errors.BadEncoding`.
Memory per fetch is therefore bounded by ``max_bytes`` (decoded) plus one raw chunk.
"""

from __future__ import annotations

import asyncio
import zlib
from dataclasses import dataclass

import httpx

from scheduler.errors import BadEncoding, FetchError, FetchTooLarge

__all__ = ["ACCEPT_ENCODING", "BoundedDecoder", "FetchedBody", "get_limited"]

#: The codings offered (and the only ones accepted, one layer at most).
ACCEPT_ENCODING = "gzip, deflate"


class BoundedDecoder:
    """Decodes one content-coding layer without ever producing more than a limit.

    Args:
        encoding: the ``Content-Encoding`` header as received (``""`` = none).
        source: channel name or feed URL, for errors.
        max_bytes: most decoded bytes accepted in total.

    Raises (from the constructor and :meth:`feed`):
        BadEncoding: more than one layer, an unknown coding, or corrupt data.
        FetchTooLarge: the decoded body would exceed ``max_bytes``.
    """

    __slots__ = ("_encoding", "_kind", "_max", "_raw_header", "_source", "_z", "size")

    def __init__(self, encoding: str, source: str, max_bytes: int) -> None:
        layers = [c.strip().lower() for c in encoding.split(",") if c.strip()]
        layers = [c for c in layers if c != "identity"]
        self._encoding = encoding
        self._source = source
        self._max = max_bytes
        self.size = 0
        if len(layers) > 1:
            raise BadEncoding(source, encoding, "more than one content-coding layer")
        self._kind = layers[0] if layers else ""
        if self._kind in ("gzip", "x-gzip"):
            self._z: zlib._Decompress | None = zlib.decompressobj(16 + zlib.MAX_WBITS)
        elif self._kind == "deflate":
            self._z = zlib.decompressobj()  # zlib-wrapped; raw deflate is retried below
        elif self._kind == "":
            self._z = None
        else:
            raise BadEncoding(source, encoding, "coding not offered")
        self._raw_header = True

    def _count(self, out: bytes) -> bytes:
        self.size += len(out)
        if self.size > self._max:
            raise FetchTooLarge(self._source, self._max)
        return out

    def feed(self, data: bytes) -> bytes:
        """Decode the next raw chunk; returns its decoded bytes (bounded)."""
        if self._z is None:
            return self._count(data)
        parts: list[bytes] = []
        pending = data
        while pending:
            room = self._max - self.size + 1  # one byte past the limit proves "too large"
            try:
                out = self._z.decompress(pending, room)
            except zlib.error as exc:
                if self._kind == "deflate" and self._raw_header and self.size == 0:
                    self._z = zlib.decompressobj(-zlib.MAX_WBITS)  # raw deflate (no header)
                    self._raw_header = False
                    continue
                raise BadEncoding(self._source, self._encoding, "corrupt data") from exc
            self._raw_header = False
            parts.append(self._count(out))
            if self._z.unconsumed_tail:
                pending = self._z.unconsumed_tail
            elif self._z.eof and self._z.unused_data and self._kind != "deflate":
                pending = self._z.unused_data  # a further gzip member (RFC 1952 allows it)
                self._z = zlib.decompressobj(16 + zlib.MAX_WBITS)
            else:
                pending = b""
        return b"".join(parts)

    def flush(self) -> bytes:
        """Whatever the decoder still holds (bounded like :meth:`feed`)."""
        if self._z is None:
            return b""
        return self._count(self._z.flush(self._max - self.size + 1))


@dataclass(frozen=True, slots=True)
class FetchedBody:
    """A response read within the limits.

    Attributes:
        status: HTTP status code.
        headers: response headers (lower-case names).
        body: the body bytes (empty for redirects).
        url: the requested URL.
    """

    status: int
    headers: dict[str, str]
    body: bytes
    url: str

    @property
    def location(self) -> str | None:
        """The ``Location`` header of a redirect, or ``None``."""
        return self.headers.get("location")


async def get_limited(
    client: httpx.AsyncClient,
    url: str,
    *,
    source: str,
    max_bytes: int,
    timeout_s: float,
    params: dict[str, str] | None = None,
) -> FetchedBody:
    """GET ``url`` without following redirects, within ``timeout_s`` seconds in total.

    Args:
        client: the shared client.
        url: absolute URL.
        source: channel name or feed URL, for error messages.
        max_bytes: largest body accepted, in bytes.
        timeout_s: deadline for the whole exchange (headers and body), in seconds.
        params: query parameters.

    Returns:
        The status, headers and body (the body is not read for 3xx responses).

    Raises:
        FetchTooLarge: the body (or its declared ``Content-Length``) exceeds ``max_bytes``,
            raw or decoded.
        BadEncoding: stacked, unknown or corrupt ``Content-Encoding``.
        FetchError: timeout, connection error or any other transport failure.
    """
    try:
        async with asyncio.timeout(timeout_s):
            request = client.build_request(
                "GET", url, params=params, headers={"Accept-Encoding": ACCEPT_ENCODING}
            )
            response = await client.send(request, stream=True, follow_redirects=False)
            try:
                headers = {k.lower(): v for k, v in response.headers.items()}
                if response.is_redirect:
                    return FetchedBody(response.status_code, headers, b"", str(request.url))
                declared = headers.get("content-length", "")
                if declared.isdigit() and int(declared) > max_bytes:
                    raise FetchTooLarge(source, max_bytes)
                decoder = BoundedDecoder(headers.get("content-encoding", ""), source, max_bytes)
                if response.is_stream_consumed:  # an in-memory transport read it already
                    if len(response.content) > max_bytes:
                        raise FetchTooLarge(source, max_bytes)
                    return FetchedBody(
                        response.status_code, headers, response.content, str(request.url)
                    )
                chunks: list[bytes] = []
                raw_size = 0
                async for chunk in response.aiter_raw():
                    raw_size += len(chunk)
                    if raw_size > max_bytes:
                        raise FetchTooLarge(source, max_bytes)
                    chunks.append(decoder.feed(chunk))
                chunks.append(decoder.flush())
                return FetchedBody(
                    response.status_code, headers, b"".join(chunks), str(request.url)
                )
            finally:
                await response.aclose()
    except TimeoutError as exc:
        raise FetchError(source, f"no complete answer within {timeout_s} s") from exc
    except httpx.HTTPError as exc:
        raise FetchError(source, type(exc).__name__) from exc
