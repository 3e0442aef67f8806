"""Mistral through the official ``mistralai`` SDK (``Mistral(server_url=...)``).

Retries are off (``retries=None`` on every call; the SDK would otherwise retry
429/5xx when configured). The base URL is the API root (``https://api.mistral.ai``);
the SDK appends ``/v1/chat/completions``. The SDK returns only the parsed body, so
the response (headers and raw JSON, which carries ``num_cached_tokens`` /
``prompt_tokens_details``) is captured by an ``httpx`` response hook on the client we
hand it. Its timeouts and connection errors surface as raw ``httpx`` exceptions, not
SDK errors; both are translated here. Every body it reads (answers, streams, error bodies)
is capped under the SDK (:mod:`llm.providers.body_cap`).

Streaming (:meth:`MistralProvider.stream`): the SDK's ``chat.stream_async`` sends the
request; its events (OpenAI-style ``data: {json}`` lines, ``data: [DONE]`` last) are read
from the response with :func:`llm.providers.sse.sse_chunks` rather than the SDK's own
decoder, which holds the event loop for seconds on a long event (it scans its buffer
byte by byte in Python; a 3 MB event took 1.1 s). The chunks are the raw JSON, as the
plain call reads it. Usage comes on the finish chunk; ``content`` may be a list of
parts (thinking models), of which only ``text`` parts are shown.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Sequence
from contextvars import ContextVar
from typing import Any, cast

import httpx
from mistralai import Mistral, models

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
from llm.providers.ratelimits import parse_rate_limits
from llm.providers.sse import sse_chunks
from llm.stream import ChunkStream
from llm.types import Completion, Message

__all__ = ["MistralProvider"]

_captured: ContextVar[list[httpx.Response] | None] = ContextVar("kopek_mistral_resp", default=None)


async def _capture(response: httpx.Response) -> None:
    sink = _captured.get()
    if sink is not None:
        sink.append(response)


class MistralProvider(ProviderBase):
    """One Mistral key.

    Args:
        name: provider key name (``mistral``).
        api_key: the key (never logged or put in errors).
        base_url: API root (``https://api.mistral.ai``).
        model: default model id.
        paid: paid-tier account.
        context_window_tokens: the default model's context window, tokens.
        timeout_s: total deadline of one call, seconds.
        clock: for HTTP-date ``Retry-After`` values.
        transport: an ``httpx`` transport for tests (``None`` = network).
        tls: the TLS context for HTTPS (one per process, see
        :func:`llm.cascade.factory.build_cascade`;
            ``None``: a new default one, which loads the CA bundle again, ~30 ms).
    """

    __slots__ = ("_http", "_sdk", "_sync")

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
        self._http = httpx.AsyncClient(
            timeout=httpx.Timeout(timeout_s),
            transport=transport,
            follow_redirects=True,
            headers=CLIENT_HEADERS,
            event_hooks={"response": [cap_body, _capture]},
            verify=True if tls is None else tls,
        )
        # the SDK makes a synchronous client too unless handed one (never used here:
        # every call is async); handed ours, it shares the TLS context
        self._sync = httpx.Client(follow_redirects=True, verify=True if tls is None else tls)
        self._sdk = Mistral(
            api_key=api_key,
            server_url=base_url.rstrip("/"),
            client=self._sync,
            async_client=self._http,
            timeout_ms=int(timeout_s * 1000),
        )

    async def complete(
        self, messages: Sequence[Message], max_tokens: int, model: str | None = None
    ) -> Completion:
        """See :meth:`llm.providers.base.Provider.complete`."""
        use_model = model or self.model
        sink: list[httpx.Response] = []
        token = _captured.set(sink)
        try:
            async with asyncio.timeout(self._timeout_s):
                await self._sdk.chat.complete_async(
                    model=use_model,
                    messages=cast(Any, messages_payload(messages)),
                    max_tokens=max_tokens,
                    stream=False,
                    retries=None,
                )
        except models.MistralError as exc:
            limits = parse_rate_limits(exc.headers, now=self._clock.now())
            if exc.status_code == 200 or isinstance(exc, models.ResponseValidationError):
                raise ProviderUnavailable(
                    self.name, "200 without a completion body", interrupted=True, status=200
                ) from None
            raise error_for_status(self.name, exc.status_code, exc.body, limits) from None
        except models.NoResponseError:
            raise ProviderUnavailable(self.name, "no response", interrupted=True) from None
        except (httpx.HTTPError, TimeoutError) as exc:
            raise transport_error(self.name, exc) from None
        except ValueError:
            raise ProviderUnavailable(
                self.name, "unreadable 200", interrupted=True, status=200
            ) from None
        finally:
            _captured.reset(token)
        if not sink:
            raise ProviderUnavailable(self.name, "response not captured", interrupted=True)
        response = sink[-1]
        limits = parse_rate_limits(response.headers, now=self._clock.now())
        body = decode_json(self.name, response.content)
        return parse_completion_body(self.name, use_model, body, limits, paid=self.paid)

    async def stream(
        self, messages: Sequence[Message], max_tokens: int, model: str | None = None
    ) -> ChunkStream:
        """See :meth:`llm.stream.StreamingProvider.stream`."""
        use_model = model or self.model
        sink: list[httpx.Response] = []
        token = _captured.set(sink)
        try:
            async with asyncio.timeout(self._timeout_s):
                events: Any = await self._sdk.chat.stream_async(
                    model=use_model,
                    messages=cast(Any, messages_payload(messages)),
                    max_tokens=max_tokens,
                    retries=None,
                )
        except models.MistralError as exc:
            limits = parse_rate_limits(exc.headers, now=self._clock.now())
            raise error_for_status(self.name, exc.status_code, exc.body, limits) from None
        except models.NoResponseError:
            raise ProviderUnavailable(self.name, "no response", interrupted=True) from None
        except (httpx.HTTPError, TimeoutError) as exc:
            raise transport_error(self.name, exc) from None
        finally:
            _captured.reset(token)
        headers = sink[-1].headers if sink else httpx.Headers()
        limits = parse_rate_limits(headers, now=self._clock.now())
        response: httpx.Response = events.response  # its SDK decoder is never started
        return ChunkStream(
            self.name,
            use_model,
            sse_chunks(self.name, response),
            response.aclose,
            lambda exc: _stream_error(self.name, exc),
            limits,
        )

    async def aclose(self) -> None:
        """Close the connection pools."""
        await self._http.aclose()
        self._sync.close()


def _stream_error(provider: str, exc: Exception) -> ProviderError:
    """A failure after the 200: the provider may have billed what it generated."""
    if isinstance(exc, httpx.HTTPError | TimeoutError):
        return transport_error(provider, exc)
    return ProviderUnavailable(provider, f"stream failed ({type(exc).__name__})", interrupted=True)
