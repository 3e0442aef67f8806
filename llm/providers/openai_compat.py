"""Client for OpenAI-compatible ``/chat/completions`` endpoints: Cerebras
(``https://api.cerebras.ai/v1``, inference-docs.cerebras.ai) and DeepSeek
(``https://api.deepseek.com``, api-docs.deepseek.com). The plain call is one POST over
``aiohttp`` (:mod:`llm.providers.plain_post`; ``docs/decisions/030-plain-post-over-aiohttp.md``),
the stream goes over ``httpx``.

The base URL is used as given and ``/chat/completions`` appended. DeepSeek may send
empty lines before the JSON body while a request waits for inference (its docs on
rate limits); the JSON decoder skips that whitespace, and the total deadline bounds it.

Streaming (:meth:`OpenAICompatProvider.stream`): ``stream: true`` with
``stream_options: {"include_usage": true}`` so the usage arrives in a final chunk;
server-sent events are read with ``httpx-sse`` (comment lines such as DeepSeek's
``: keep-alive`` are skipped), each at most :data:`llm.providers.sse.MAX_EVENT_BYTES`
(:func:`llm.providers.sse.sse_chunks`), the whole stream and any error body capped
(:mod:`llm.providers.body_cap`); ``data: [DONE]`` ends the stream.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Sequence

import aiohttp
import httpx

from budget.kernel.clock import Clock
from llm.errors import ProviderError, ProviderUnavailable
from llm.providers.base import (
    ProviderBase,
    decode_json,
    error_for_status,
    messages_payload,
    parse_completion_body,
    transport_error,
)
from llm.providers.body_cap import CLIENT_HEADERS, cap_body
from llm.providers.plain_post import PlainPost, aiohttp_transport_error
from llm.providers.ratelimits import parse_rate_limits
from llm.providers.sse import sse_chunks
from llm.providers.tools import tools_payload
from llm.stream import ChunkStream
from llm.types import Completion, Message, ToolSpec

__all__ = ["OpenAICompatProvider"]


class OpenAICompatProvider(ProviderBase):
    """One key of an OpenAI-compatible provider.

    Args:
        name: provider key name (``cerebras``, ``deepseek``).
        api_key: the key (sent as a bearer token; never logged or put in errors).
        base_url: API root, e.g. ``https://api.cerebras.ai/v1`` or ``https://api.deepseek.com``.
        model: default model id.
        paid: paid-tier account.
        context_window_tokens: the default model's context window, tokens.
        timeout_s: total deadline of one call, seconds (``asyncio.timeout`` around
            the whole exchange, so a slow trickle is cut too).
        clock: for HTTP-date ``Retry-After`` values.
        transport: an ``httpx`` transport for the streamed call, for tests (``None`` =
            network); the plain call goes over ``aiohttp`` (:mod:`llm.providers.plain_post`).
        tls: the TLS context for HTTPS (one per process, see
        :func:`llm.cascade.factory.build_cascade`;
            ``None``: a new default one, which loads the CA bundle again, ~30 ms).
    """

    __slots__ = ("_client", "_plain", "_url")

    def __init__(
        self,
        name: str,
        *,
        api_key: str,
        base_url: str,
        model: str,
        paid: bool,
        context_window_tokens: int,
        timeout_s: float,
        clock: Clock | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        super().__init__(
            name,
            model=model,
            paid=paid,
            context_window_tokens=context_window_tokens,
            timeout_s=timeout_s,
            clock=clock,
        )
        self._url = base_url.rstrip("/") + "/chat/completions"
        # the plain call over aiohttp (llm/providers/plain_post.py), the stream over httpx
        self._plain = PlainPost({"Authorization": f"Bearer {api_key}"}, tls)
        self._client = httpx.AsyncClient(
            headers={"Authorization": f"Bearer {api_key}", **CLIENT_HEADERS},
            event_hooks={"response": [cap_body]},  # streams and error bodies, capped
            timeout=httpx.Timeout(timeout_s),
            transport=transport,
            verify=True if tls is None else tls,
        )

    #: takes ``tools`` (function calling) in :meth:`complete`
    supports_tools = True

    async def complete(
        self,
        messages: Sequence[Message],
        max_tokens: int,
        model: str | None = None,
        tools: Sequence[ToolSpec] = (),
    ) -> Completion:
        """See :meth:`llm.providers.base.Provider.complete`; ``tools`` are offered to
        the model (``llm.providers.tools``)."""
        use_model = model or self.model
        payload: dict[str, object] = {
            "model": use_model,
            "messages": messages_payload(messages),
            "max_tokens": max_tokens,
            "stream": False,
        }
        if tools:
            payload["tools"] = tools_payload(tools)
        try:
            async with asyncio.timeout(self._timeout_s):
                response = await self._plain.post(self._url, payload)
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise aiohttp_transport_error(self.name, exc) from None
        limits = parse_rate_limits(response.headers, now=self._clock.now())
        if response.status != 200:
            raise error_for_status(self.name, response.status, response.text, limits)
        body = decode_json(self.name, response.content)
        return parse_completion_body(self.name, use_model, body, limits, paid=self.paid)

    async def stream(
        self, messages: Sequence[Message], max_tokens: int, model: str | None = None
    ) -> ChunkStream:
        """See :meth:`llm.stream.StreamingProvider.stream`."""
        use_model = model or self.model
        payload = {
            "model": use_model,
            "messages": messages_payload(messages),
            "max_tokens": max_tokens,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        request = self._client.build_request(
            "POST", self._url, json=payload, headers={"Accept": "text/event-stream"}
        )
        try:
            async with asyncio.timeout(self._timeout_s):
                response = await self._client.send(request, stream=True)
                limits = parse_rate_limits(response.headers, now=self._clock.now())
                if response.status_code != 200:
                    try:
                        await response.aread()
                    finally:
                        await response.aclose()
                    raise error_for_status(self.name, response.status_code, response.text, limits)
        except (httpx.HTTPError, TimeoutError) as exc:
            raise transport_error(self.name, exc) from None
        return ChunkStream(
            self.name,
            use_model,
            sse_chunks(self.name, response),
            response.aclose,
            lambda exc: _stream_error(self.name, exc),
            limits,
        )

    async def aclose(self) -> None:
        """Close the connection pools (the plain call's and the stream's)."""
        await self._plain.aclose()
        await self._client.aclose()


def _stream_error(provider: str, exc: Exception) -> ProviderError:
    """A failure after the 200: the provider may have billed what it generated."""
    if isinstance(exc, httpx.HTTPError | TimeoutError):
        return transport_error(provider, exc)
    return ProviderUnavailable(provider, f"stream failed ({type(exc).__name__})", interrupted=True)
