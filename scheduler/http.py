"""One bounded HTTP GET for channel pages and feeds: a total deadline and a size cap.

httpx's timeouts are per phase (connect, read, ...), so a server that trickles bytes
could hold a fetch open indefinitely; :func:`get_limited` bounds the whole exchange
with ``asyncio.timeout`` and stops reading after ``max_bytes``. Redirects are never
followed here: callers decide (a t.me redirect means "no public preview"; a feed
redirect must pass the address guard again).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import httpx

from scheduler.errors import FetchError, FetchTooLarge

__all__ = ["FetchedBody", "get_limited"]


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
        FetchTooLarge: the body (or its declared ``Content-Length``) exceeds ``max_bytes``.
        FetchError: timeout, connection error or any other transport failure.
    """
    try:
        async with asyncio.timeout(timeout_s):
            request = client.build_request("GET", url, params=params)
            response = await client.send(request, stream=True, follow_redirects=False)
            try:
                headers = {k.lower(): v for k, v in response.headers.items()}
                if response.is_redirect:
                    return FetchedBody(response.status_code, headers, b"", str(request.url))
                declared = headers.get("content-length", "")
                if declared.isdigit() and int(declared) > max_bytes:
                    raise FetchTooLarge(source, max_bytes)
                chunks: list[bytes] = []
                size = 0
                async for chunk in response.aiter_bytes():
                    size += len(chunk)
                    if size > max_bytes:
                        raise FetchTooLarge(source, max_bytes)
                    chunks.append(chunk)
                return FetchedBody(
                    response.status_code, headers, b"".join(chunks), str(request.url)
                )
            finally:
                await response.aclose()
    except TimeoutError as exc:
        raise FetchError(source, f"no complete answer within {timeout_s} s") from exc
    except httpx.HTTPError as exc:
        raise FetchError(source, type(exc).__name__) from exc
