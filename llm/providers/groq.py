"""Groq through the official ``groq`` SDK (``AsyncGroq``); the plain (non-streamed)
call is one POST with the SDK's URL and headers over ``aiohttp``
(:mod:`llm.providers.plain_post`; ``docs/decisions/030-plain-post-over-aiohttp.md``).

``max_retries=0``: the SDK's default of 2 hidden retries would spend quota behind
the cascade's back. The base URL is the API root without ``/openai/v1``
(``https://api.groq.com``); the SDK appends ``/openai/v1/chat/completions``.
Headers are read through ``with_raw_response``; usage is read from the raw JSON
(``usage``, or ``x_groq.usage``). The SDK returns a bare ``str`` for a 200 whose
content type is not JSON (an HTML error page): that is a provider failure.

Streaming (:meth:`GroqProvider.stream`): the SDK's ``stream=True``; Groq reports usage
unasked, on the finish chunk (``x_groq.usage`` and/or ``usage``); an ``event: error``
after the 200 is raised by the SDK as ``APIError`` and translated to an interrupted
:class:`~llm.errors.ProviderUnavailable`. Each event is at most
:data:`llm.providers.sse.MAX_EVENT_BYTES` (:func:`llm.providers.sse.bound_events`, under
the SDK's decoder), the whole stream and any error body capped as well
(:mod:`llm.providers.body_cap`).
"""

from __future__ import annotations

import asyncio
import json
import ssl
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any, cast

import aiohttp
import groq
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
from llm.providers.plain_post import PlainPost, PlainResponse, aiohttp_transport_error
from llm.providers.ratelimits import parse_rate_limits
from llm.providers.sse import bound_events
from llm.providers.tools import tools_payload
from llm.stream import ChunkStream
from llm.types import Completion, Message, RateLimitInfo, ToolSpec

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
        transport: an ``httpx`` transport for the SDK's client (the streamed call), for
            tests (``None`` = network); the plain call goes over ``aiohttp``
            (:mod:`llm.providers.plain_post`).
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
        """See :meth:`llm.stream.StreamingProvider.stream`."""
        use_model = model or self.model
        sdk_stream: Any
        sdk_stream, _content, limits = await self._create(
            messages, max_tokens, use_model, stream=True
        )
        bound_events(self.name, sdk_stream.response)  # before the SDK reads a byte
        return ChunkStream(
            self.name,
            use_model,
            _chunks(sdk_stream),
            sdk_stream.close,
            lambda exc: _stream_error(self.name, exc),
            limits,
        )

    async def _create(
        self, messages: Sequence[Message], max_tokens: int, model: str, *, stream: bool
    ) -> tuple[object, bytes, RateLimitInfo]:
        """One ``chat.completions.create`` through the raw-response API, within the
        call's deadline, with the SDK's errors translated.

        Returns:
            (what the SDK parsed — a ``ChatCompletion``, a bare ``str`` for a non-JSON
            200, or the SDK's ``AsyncStream`` when ``stream``; the body's bytes, ``b""``
            for a stream, which is read later; the 200's rate-limit headers).

        Raises:
            ProviderError: the status translated (429, 5xx, 401...), a transport
                failure or the deadline, or an unreadable 200 (interrupted).
        """
        try:
            async with asyncio.timeout(self._timeout_s):
                raw = await self._client.chat.completions.with_raw_response.create(
                    model=model,
                    messages=cast(Any, messages_payload(messages)),
                    max_tokens=max_tokens,
                    stream=stream,
                )
                parsed: object = await raw.parse()
                content = b"" if stream else raw.http_response.content
        except groq.APIStatusError as exc:
            limits = parse_rate_limits(exc.response.headers, now=self._clock.now())
            raise error_for_status(self.name, exc.status_code, exc.response.text, limits) from None
        except (groq.APIConnectionError, httpx.HTTPError, TimeoutError) as exc:
            raise transport_error(self.name, exc) from None
        except (groq.APIResponseValidationError, ValueError) as exc:
            raise ProviderUnavailable(
                self.name, f"unreadable 200 ({type(exc).__name__})", interrupted=True, status=200
            ) from None
        return parsed, content, parse_rate_limits(raw.headers, now=self._clock.now())

    async def aclose(self) -> None:
        """Close the SDK's and the plain call's connection pools."""
        await self._plain.aclose()
        await self._client.close()


async def _chunks(sdk_stream: Any) -> AsyncIterator[Mapping[str, Any]]:
    """The SDK's chunk objects as plain JSON mappings (usage is read strictly later)."""
    async for chunk in sdk_stream:
        yield chunk.to_dict()


def _stream_error(provider: str, exc: Exception) -> ProviderError:
    """A failure after the 200 (the SDK's ``APIError`` for an error event, a dropped
    connection): the provider may have billed what it generated."""
    if isinstance(exc, groq.APIConnectionError | httpx.HTTPError | TimeoutError):
        return transport_error(provider, exc)
    return ProviderUnavailable(provider, f"stream failed ({type(exc).__name__})", interrupted=True)
