"""Groq through the official ``groq`` SDK (``AsyncGroq``); the plain (non-streamed)
call is one POST with the SDK's URL and headers over ``aiohttp``
(:mod:`llm.providers.plain_post`; ``docs/decisions/030-plain-post-over-aiohttp.md``).

``max_retries=0``: the SDK's default of 2 hidden retries would spend quota behind
the cascade's back. The base URL is the API root without ``/openai/v1``
(``https://api.groq.com``); the SDK appends ``/openai/v1/chat/completions``.
Headers are read through ``with_raw_response``; usage is read from the raw JSON
(``usage``, or ``x_groq.usage``). The SDK returns a bare ``str`` for a 200 whose
content type is not JSON (an HTML error page): that is a provider failure.

Streaming (:meth:`GroqProvider.stream`): the same POST with ``"stream": true`` over the
same ``aiohttp`` transport, its server-sent events read as they arrive
(:func:`llm.providers.sse.open_plain_stream`; ``docs/decisions/131-streams-over-aiohttp.md``);
Groq reports usage unasked, on the finish chunk (``x_groq.usage`` and/or ``usage``); an
``event: error`` after the 200 is a cut (an interrupted
:class:`~llm.errors.ProviderUnavailable`). Each event is at most
:data:`llm.providers.sse.MAX_EVENT_BYTES`, the whole stream and any error body capped as
well (:data:`llm.providers.body_cap.MAX_STREAM_BYTES`, :data:`MAX_RESPONSE_BYTES
<llm.providers.plain_post.MAX_RESPONSE_BYTES>`). The SDK gives the URL and headers (its
key, its version headers) and is otherwise not called; its ``httpx`` client keeps
:mod:`llm.providers.body_cap`'s hook should it ever read a body.
"""

from __future__ import annotations

import asyncio
import json
import ssl
from collections.abc import Sequence

import aiohttp
import groq
import httpx

from budget.kernel.clock import Clock
from llm.errors import ProviderUnavailable
from llm.providers.base import (
    ProviderBase,
    decode_json,
    error_for_status,
    messages_payload,
    parse_completion_body,
)
from llm.providers.body_cap import CLIENT_HEADERS, cap_body
from llm.providers.plain_post import PlainPost, PlainResponse, aiohttp_transport_error
from llm.providers.ratelimits import parse_rate_limits
from llm.providers.sse import open_plain_stream
from llm.providers.tools import tools_payload
from llm.stream import ChunkStream
from llm.types import Completion, Message, ToolSpec

__all__ = ["GroqProvider"]

#: The SDK's path of ``chat.completions.create`` (under the base URL).
_COMPLETIONS_PATH = "/openai/v1/chat/completions"


class GroqProvider(ProviderBase):
    """One Groq key.

    Args:
        name: provider key name (``groq``, ``groq2``).
        api_key: the key (never logged or put in errors).
        base_url: API root without ``/openai/v1`` (``https://api.groq.com``).
        model: default model id.
        paid: paid-tier account.
        context_window_tokens: the default model's context window, tokens.
        timeout_s: total deadline of one call, seconds.
        clock: for HTTP-date ``Retry-After`` values.
        transport: an ``httpx`` transport for the SDK's client, which only gives the URL
            and headers (both calls go over ``aiohttp``, :mod:`llm.providers.plain_post`).
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
        http_client = httpx.AsyncClient(
            timeout=httpx.Timeout(timeout_s),
            transport=transport,
            verify=True if tls is None else tls,
            headers=CLIENT_HEADERS,
            event_hooks={"response": [cap_body]},  # streams and error bodies, capped
        )
        self._client = groq.AsyncGroq(
            api_key=api_key,
            base_url=base_url.rstrip("/"),
            max_retries=0,
            timeout=timeout_s,
            http_client=http_client,
        )
        # the plain call's own transport, with the SDK's headers (its key included)
        headers = {k: v for k, v in self._client.default_headers.items() if isinstance(v, str)}
        self._plain = PlainPost(headers, tls)
        self._url = base_url.rstrip("/") + _COMPLETIONS_PATH

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
        response = await self._post(messages, max_tokens, use_model, tools)
        content = response.content
        content_type = response.headers.get("content-type", "*").split(";")[0]
        if not content_type.endswith("json"):
            # what the SDK's parser does: a body that is JSON anyway is read as JSON
            try:
                json.loads(content)
            except (ValueError, RecursionError):  # nesting too deep: RecursionError
                raise ProviderUnavailable(
                    self.name, "200 with a non-JSON body", interrupted=True, status=200
                ) from None
        body = decode_json(self.name, content)
        limits = parse_rate_limits(response.headers, now=self._clock.now())
        return parse_completion_body(self.name, use_model, body, limits, paid=self.paid)

    async def _post(
        self,
        messages: Sequence[Message],
        max_tokens: int,
        model: str,
        tools: Sequence[ToolSpec] = (),
    ) -> PlainResponse:
        """One non-streamed ``chat/completions`` POST with the SDK's URL and headers,
        sent through :class:`~llm.providers.plain_post.PlainPost` (``aiohttp``: the SDK's
        ``httpx`` stack cost ~1.8 ms of CPU per call, ~6x aiohttp's;
        ``docs/decisions/030-plain-post-over-aiohttp.md``), returned whole. Kopek reads
        the raw JSON, so nothing of the SDK's request transform or answer models is
        needed; retries stay off.

        Raises:
            ProviderError: the status translated (429, 5xx, 401...), a transport
                failure or the deadline.
        """
        payload: dict[str, object] = {
            "messages": messages_payload(messages),
            "model": model,
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
        if response.status >= 400:  # as the SDK: a 3xx is read as an answer (and fails)
            limits = parse_rate_limits(response.headers, now=self._clock.now())
            raise error_for_status(self.name, response.status, response.text, limits)
        return response

    async def stream(
        self, messages: Sequence[Message], max_tokens: int, model: str | None = None
    ) -> ChunkStream:
        """See :meth:`llm.stream.StreamingProvider.stream`: the same POST as the plain
        call with ``"stream": true``, its events read as they arrive
        (:func:`llm.providers.sse.open_plain_stream`)."""
        use_model = model or self.model
        payload = {
            "messages": messages_payload(messages),
            "model": use_model,
            "max_tokens": max_tokens,
            "stream": True,
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
        """Close the SDK's and the plain call's connection pools."""
        await self._plain.aclose()
        await self._client.close()
