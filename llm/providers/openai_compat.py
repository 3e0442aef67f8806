"""Client for OpenAI-compatible ``/chat/completions`` endpoints: Cerebras
(``https://api.cerebras.ai/v1``, inference-docs.cerebras.ai) and DeepSeek
(``https://api.deepseek.com``, api-docs.deepseek.com). The plain call is one POST over
``aiohttp`` (:mod:`llm.providers.plain_post`; ``docs/decisions/030-plain-post-over-aiohttp.md``),
and so is the stream (``docs/decisions/131-streams-over-aiohttp.md``).

The base URL is used as given and ``/chat/completions`` appended. DeepSeek may send
empty lines before the JSON body while a request waits for inference (its docs on
rate limits); the JSON decoder skips that whitespace, and the total deadline bounds it.

Streaming (:meth:`OpenAICompatProvider.stream`): ``stream: true`` with
``stream_options: {"include_usage": true}`` so the usage arrives in a final chunk;
server-sent events are read as they arrive (comment lines such as DeepSeek's
``: keep-alive`` are skipped), each at most :data:`llm.providers.sse.MAX_EVENT_BYTES`
(:func:`llm.providers.sse.aiohttp_chunks`), the whole stream and any error body capped
(:data:`llm.providers.body_cap.MAX_STREAM_BYTES`,
:data:`llm.providers.plain_post.MAX_RESPONSE_BYTES`); ``data: [DONE]`` ends the stream.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Sequence

import aiohttp
import httpx

from budget.kernel.clock import Clock
from llm.providers.base import (
    ProviderBase,
    decode_json,
    error_for_status,
    messages_payload,
    parse_completion_body,
)
from llm.providers.plain_post import PlainPost, aiohttp_transport_error
from llm.providers.ratelimits import parse_rate_limits
from llm.providers.sse import open_plain_stream
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
        transport: unused (both calls go over ``aiohttp``, :mod:`llm.providers.plain_post`);
            the factory passes every client the same arguments.
        tls: the TLS context for HTTPS (one per process, see
        :func:`llm.cascade.factory.build_cascade`;
            ``None``: a new default one, which loads the CA bundle again, ~30 ms).
    """

    __slots__ = ("_plain", "_url")

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
        # the plain call and the stream over aiohttp (llm/providers/plain_post.py)
        self._plain = PlainPost({"Authorization": f"Bearer {api_key}"}, tls)
        del transport  # no httpx client left: kept in the signature all clients share

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
        return await open_plain_stream(
            self.name,
            self._plain,
            self._url,
            payload,
            model=use_model,
            timeout_s=self._timeout_s,
            clock=self._clock,
        )

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._plain.aclose()
