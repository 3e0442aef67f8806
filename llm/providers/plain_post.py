"""JSON ``POST`` over ``aiohttp``: the transport of the plain chat-completion call and
of the streamed one (why: ``docs/decisions/030-plain-post-over-aiohttp.md``,
``docs/decisions/131-streams-over-aiohttp.md``).

Why not the SDK's or ``httpx``'s client: against a loopback server answering at once, a
Groq SDK raw POST (``groq`` → ``httpx`` → ``httpcore``, which checks every pooled
connection through ``anyio`` on each request) cost ~1.8 ms of CPU and ~5 ms of wall
time per request; the same request through ``aiohttp`` (already loaded: aiogram's
client) ~0.3 ms and ~0.8 ms (``python`` microbenchmark, client and server in one
process). A streamed call (:meth:`PlainPost.open_stream`) is the same POST whose body
is read as it arrives (:func:`llm.providers.sse.aiohttp_chunks`): in a burst of streamed
answers the Groq SDK's streaming path (``httpx``, its transforms and models) was ~40 %
of the bot's samples under py-spy.

Behaviour kept from the ``httpx`` clients: the proxy named by the environment
(``HTTPS_PROXY``/``HTTP_PROXY``, else ``ALL_PROXY``; ``NO_PROXY``; read once per URL with
:func:`urllib.request.getproxies` — aiohttp's own ``trust_env`` reads it, and
``.netrc``, in the executor's thread on every request), no redirects followed, the
process's TLS context, and the failure split of
:func:`llm.providers.base.transport_error` — a failure before the request could reach
the provider (no connection) is not *interrupted* (the hold is released); anything
later is (the provider may have generated and billed tokens). The caller bounds the
whole exchange with its total deadline.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit
from urllib.request import getproxies, proxy_bypass

import aiohttp

from llm.errors import ProviderUnavailable

__all__ = [
    "MAX_RESPONSE_BYTES",
    "BodyOverCap",
    "PlainPost",
    "PlainResponse",
    "aiohttp_transport_error",
    "env_proxy",
    "read_capped",
]

#: The largest answer body read (bytes): a whole completion of the largest ``max_tokens``
#: any model here takes (32,768 tokens ≈ 128 KiB of text, JSON-escaped at most 6x) with
#: room to spare; a provider (or a proxy in between) sending more is failing. Read in
#: chunks and counted, so a bigger body costs no more memory than this.
MAX_RESPONSE_BYTES = 8 * 1024 * 1024


class BodyOverCap(aiohttp.ClientPayloadError):
    """A body longer than its cap; the message says the sizes (no secret)."""


async def read_capped(response: aiohttp.ClientResponse, limit: int = MAX_RESPONSE_BYTES) -> bytes:
    """The whole body of ``response``, at most ``limit`` bytes.

    Raises:
        BodyOverCap: the body is longer (the connection is closed).
    """
    length = response.content_length
    if length is not None and length > limit:
        response.close()
        raise BodyOverCap(f"response body of {length} bytes over {limit}")
    parts: list[bytes] = []
    size = 0
    async for chunk in response.content.iter_chunked(64 * 1024):
        size += len(chunk)
        if size > limit:
            response.close()
            raise BodyOverCap(f"response body over {limit} bytes")
        parts.append(chunk)
    return b"".join(parts)


class PlainResponse:
    """A whole response: ``status``, ``headers`` (case-insensitive), ``content`` bytes."""

    __slots__ = ("content", "headers", "status")

    def __init__(self, status: int, headers: Mapping[str, str], content: bytes) -> None:
        self.status = status
        self.headers = headers
        self.content = content

    @property
    def text(self) -> str:
        """The body as text (UTF-8, undecodable bytes replaced)."""
        return self.content.decode("utf-8", "replace")


class PlainPost:
    """A lazily opened ``aiohttp`` session for one provider key.

    Args:
        headers: sent with every request (the key's ``Authorization`` among them).
        tls: the TLS context for HTTPS (``None``: aiohttp's default verification).

    The session is opened by the first :meth:`post`, inside the running loop, and
    closed by :meth:`aclose`.
    """

    __slots__ = ("_headers", "_proxies", "_session", "_tls")

    def __init__(self, headers: Mapping[str, str], tls: ssl.SSLContext | None = None) -> None:
        self._headers = dict(headers)
        self._tls = tls
        self._session: aiohttp.ClientSession | None = None
        self._proxies: dict[str, str | None] = {}

    def __repr__(self) -> str:
        return f"PlainPost(open={self._session is not None and not self._session.closed})"

    async def post(self, url: str, payload: Mapping[str, Any]) -> PlainResponse:
        """POST ``payload`` as JSON to ``url`` and read the whole answer (at most
        :data:`MAX_RESPONSE_BYTES`).

        Raises:
            aiohttp.ClientError: the exchange failed, or the answer was longer
                (translate with :func:`aiohttp_transport_error`).
        """
        async with self._open().post(
            url, json=payload, allow_redirects=False, proxy=self._proxy(url)
        ) as response:
            content = await read_capped(response)
            return PlainResponse(response.status, response.headers, content)

    async def open_stream(self, url: str, payload: Mapping[str, Any]) -> aiohttp.ClientResponse:
        """POST ``payload`` as JSON to ``url`` and return once the answer's head arrived;
        its body (server-sent events) is read by the caller, who must ``release()`` or
        ``close()`` the response (closing it tells the provider to stop generating).

        Raises:
            aiohttp.ClientError: the exchange failed before the head arrived (translate
                with :func:`aiohttp_transport_error`).
        """
        return await self._open().post(
            url,
            json=payload,
            allow_redirects=False,
            proxy=self._proxy(url),
            # identity only: aiohttp would inflate a whole compressed piece before any
            # count (llm/providers/body_cap.py)
            headers={"Accept": "text/event-stream", "Accept-Encoding": "identity"},
        )

    def _open(self) -> aiohttp.ClientSession:
        """The session, opened on first use (inside the running loop)."""
        session = self._session
        if session is None or session.closed:
            session = self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(ssl=self._tls if self._tls is not None else True),
                headers=self._headers,
                timeout=aiohttp.ClientTimeout(total=None),
            )
        return session

    def _proxy(self, url: str) -> str | None:
        """The environment's proxy for ``url``, read once per URL."""
        if url not in self._proxies:
            self._proxies[url] = env_proxy(url)
        return self._proxies[url]

    async def post_form(
        self, url: str, fields: Mapping[str, str], file: tuple[str, str, str, bytes]
    ) -> PlainResponse:
        """POST a ``multipart/form-data`` body: ``fields`` as text parts, then one file
        part ``(field name, file name, content type, bytes)``; read the whole answer.

        Raises:
            aiohttp.ClientError: as :meth:`post`.
        """
        form = aiohttp.FormData()
        for name, value in fields.items():
            form.add_field(name, value)
        field_name, file_name, content_type, data = file
        form.add_field(field_name, data, filename=file_name, content_type=content_type)
        async with self._open().post(
            url, data=form, allow_redirects=False, proxy=self._proxy(url)
        ) as response:
            content = await read_capped(response)
            return PlainResponse(response.status, response.headers, content)

    async def aclose(self) -> None:
        """Close the session's connections (idempotent)."""
        if self._session is not None:
            await self._session.close()
            self._session = None


def env_proxy(url: str) -> str | None:
    """The proxy the environment names for ``url`` (``None``: none, or ``NO_PROXY``
    exempts its host): ``<SCHEME>_PROXY``, else ``ALL_PROXY`` — as httpx reads them, so
    the plain call and the streamed one take the same way out."""
    parts = urlsplit(url)
    if parts.hostname is None or proxy_bypass(parts.hostname):
        return None
    proxies = getproxies()
    return proxies.get(parts.scheme) or proxies.get("all")


def aiohttp_transport_error(provider: str, exc: BaseException) -> ProviderUnavailable:
    """Translate an ``aiohttp`` failure (or the total deadline, ``TimeoutError``) into
    :class:`ProviderUnavailable`: not interrupted when no connection was made
    (``ClientConnectorError``: refused, DNS, TLS handshake, proxy), interrupted
    otherwise."""
    if isinstance(exc, TimeoutError):
        return ProviderUnavailable(provider, "total deadline exceeded", interrupted=True)
    if isinstance(exc, BodyOverCap):  # the provider may have generated (and billed) it
        return ProviderUnavailable(provider, str(exc), interrupted=True)
    pre_token = isinstance(exc, aiohttp.ClientConnectorError)
    return ProviderUnavailable(provider, type(exc).__name__, interrupted=not pre_token)
