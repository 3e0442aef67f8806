"""One loopback HTTP server that plays Groq, Mistral, Cerebras and DeepSeek.

Mounted paths (base URLs as the clients expect them, see :attr:`FakeProviders.base_urls`):

==========  ==================================  ==============================
provider    base URL given to the client        path served
==========  ==================================  ==============================
groq        ``http://127.0.0.1:P``              ``/openai/v1/chat/completions``
mistral     ``http://127.0.0.1:P``              ``/v1/chat/completions``
cerebras    ``http://127.0.0.1:P/cerebras/v1``  ``/cerebras/v1/chat/completions``
deepseek    ``http://127.0.0.1:P/deepseek``     ``/deepseek/chat/completions``
==========  ==================================  ==============================

and the speech-to-text endpoints ``/openai/v1/audio/transcriptions`` (Groq) and
``/v1/audio/transcriptions`` (Mistral): multipart uploads, recorded in
:attr:`FakeProviders.transcriptions`, answered in each provider's shape
(:mod:`tests.support.provider_media`), scripted with the same queues (``{"status": 429,
"retry_after": "5"}``, ``{"text": "heard", "duration": 7.2}``, ``{"raw_body": ...}``,
``{"delay_s": …}``, ``{"gate": …}``); the target ``"groq:audio"`` (``"mistral:audio"``)
is looked at first, so a transcription can be scripted apart from chat requests
(``default("groq:audio", {"delay_s": 2})``). Chat requests may carry ``image_url`` content
parts: they are decoded and recorded (:attr:`FakeProviders.images`), billed as each
provider's documented image-token formula on their dimensions (``"image_tokens"``
overrides), and refused with a 400 by a model that is not a vision model, as real
text-only models refuse them.

Each provider answers with its own usage shape (Groq ``usage`` + ``x_groq``, Mistral
``num_cached_tokens``, Cerebras ``usage`` + ``time_info``, DeepSeek
``prompt_cache_hit_tokens``/``prompt_cache_miss_tokens``; shapes copied from the
pydantic-ai cassettes in ``tests/fixtures/llm/``) and its own rate-limit headers.

Scripting: a queue of steps per *target*; a request looks first at the queue of its
API key (so ``groq`` key 1 and key 2 can differ), then at its provider's. A step is
a dict (JSON over the control API)::

    {}                                        # default answer
    {"text": "hi", "prompt_tokens": 10, "completion_tokens": 2,
     "cached_tokens": 8, "reasoning_tokens": 0, "headers": {...}, "delay_s": 0.1}
    {"status": 429, "retry_after": "30"}      # 429 (omit retry_after: no header)
    {"status": 503} / {"status": 401} / {"status": 400, "body": {...}}
    {"garbage": true}                         # 200 text/html
    {"raw_body": {...}}                       # 200 with exactly this JSON (recorded bodies)
    {"trickle_s": 5}                          # 200, one newline every 50 ms, then the body
    {"cut": true}                             # 200, Content-Length larger than sent, close
    {"huge_body": 12_000_000}                 # a body of that many bytes, chunked
    {"huge_body": …, "interval_s": 0.01}      # the same, 64 KiB every 10 ms
    {"status": 503, "huge_body": 12_000_000}  # an error body of that many bytes
    {"gzip": true}                            # 200, the completion gzip-coded
    {"error_in_200": 502}                     # 200 {"error": {"code": 502, ...}}, no choices
    {"error_in_200": 429, "usage": {...}}     # the same, with a usage object
    {"text": "", "finish_reason": "length"}   # an empty completion (all reasoning)
    {"usage": {"prompt_tokens": -1, ...}}     # this exact usage object (perturbations)
    {"gate": "g1", "text": "late"}            # answers once open_gate("g1") was called

Streamed requests (``"stream": true``) are answered with server-sent events in each
provider's own chunk shapes (``tests/fixtures/llm/streams/``): Groq puts usage in
``x_groq.usage`` on the finish chunk, Mistral in ``usage`` on the finish chunk, DeepSeek
sends ``"usage": null`` on every chunk and the report on the finish chunk, Cerebras
follows the OpenAI ``include_usage`` shape (a last chunk with ``choices: []``); all end
with ``data: [DONE]``. Extra step keys for streams::

    {"chunks": ["a", "b"]}        # the text deltas (default: the text cut in 4-char pieces)
    {"first_token_s": 0.3, "interval_s": 0.033}   # pace
    {"cut_after": 5}              # close the connection after 5 text chunks (no finish)
    {"gap_after": 3, "gap_s": 2}  # an idle gap after 3 text chunks
    {"error_event_after": 2}      # Groq's ``event: error`` after 2 text chunks
    {"no_usage": true}            # no usage report at all
    {"early_usage": {...}}        # this usage block on the first (role) chunk, before any
                                  # text: what some gateways send (0 output tokens)
    {"raw_sse": "data: ...\n\n"} # exactly this body (recorded streams)

Each streamed response is logged in :meth:`FakeProviders.streams` (:class:`StreamLog`):
text chunks sent and when (loop time) the client closed the connection early.

``default(target, step)`` makes a step sticky: it answers whenever the target's queue
is empty (e.g. a provider that bills 1,000 output tokens whatever max_tokens was).

With an empty queue the default answer echoes the last user message with usage
counted as ceil(chars / 4) + 4 per message. Token-bucket mode (``set_bucket``) gives a
target N tokens per minute, refilled continuously on the injected clock; a request
that does not fit gets a 429 with ``retry-after`` and the provider's headers.

In-process: ``async with FakeProviders() as fake: ...``. As a process:
``python -m tests.support.providers --port N`` prints one JSON line with the base URLs
and serves the control API: ``POST /_control/script`` ``{"target", "steps"}``,
``POST /_control/bucket`` ``{"target", "tokens_per_minute"}``, ``POST /_control/default``
``{"target", "step"}``, ``POST /_control/reset``,
``GET /_control/requests``, ``GET /_control/stats``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gzip
import itertools
import json
import math
import signal
from collections import deque
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from aiohttp import BodyPartReader, web

from budget.kernel.clock import Clock, SystemClock
from tests.support.provider_media import (
    VISION_MODEL_IDS,
    RecordedImage,
    RecordedTranscription,
    image_parts,
    image_prompt_tokens,
    text_of,
    transcription_answer,
)

__all__ = [
    "PROVIDERS",
    "Bucket",
    "FakeProviders",
    "RecordedImage",
    "RecordedRequest",
    "RecordedTranscription",
    "StreamLog",
]

PROVIDERS = ("groq", "mistral", "cerebras", "deepseek")

_ERROR_BODIES: dict[str, dict[int, Any]] = {
    # shapes from tests/fixtures/llm/ (real bodies quoted in public issues)
    "groq": {
        429: {
            "error": {
                "message": "Rate limit reached for model `llama-3.3-70b-versatile` in "
                "organization `org_fake` service tier `on_demand` on tokens per minute (TPM): "
                "Limit 12000, Used 11972, Requested 4351. Please try again in 5.289s.",
                "type": "tokens",
                "code": "rate_limit_exceeded",
            }
        },
        401: {"error": {"message": "Invalid API Key", "type": "invalid_request_error"}},
        # an OpenAI-compatible transcription endpoint's 413, quoted in
        # WEIFENG2333/VideoCaptioner#724 (the issue does not name the provider)
        413: {
            "error": {
                "message": "Request Entity Too Large",
                "type": "invalid_request_error",
                "code": "request_too_large",
            }
        },
    },
    "mistral": {
        429: {
            "object": "error",
            "message": "Rate limit exceeded",
            "type": "rate_limited",
            "param": None,
            "code": "1300",
        },
        401: {"message": "Unauthorized", "request_id": "fake"},
    },
    "cerebras": {
        429: {
            "message": "Tokens per minute limit exceeded - too many tokens processed.",
            "type": "too_many_requests_error",
            "param": "quota",
            "code": "token_quota_exceeded",
        },
        401: {"message": "Wrong API Key", "type": "invalid_request_error"},
    },
    "deepseek": {
        429: {"error": {"message": "Rate Limit Reached", "type": "rate_limit_error"}},
        401: {"error": {"message": "Authentication Fails", "type": "authentication_error"}},
    },
}


@dataclass(frozen=True, slots=True)
class RecordedRequest:
    """One request seen by the fake.

    Attributes:
        provider: which API was called.
        key: the bearer key sent.
        body: the decoded JSON body.
        at: the injected clock's monotonic time on arrival, seconds.
    """

    provider: str
    key: str
    body: dict[str, Any]
    at: float

    def as_json(self) -> dict[str, Any]:
        """JSON-ready form for the control API."""
        return {"provider": self.provider, "key": self.key, "body": self.body, "at": self.at}


@dataclass(slots=True)
class StreamLog:
    """One streamed response as the fake served it.

    Attributes:
        provider: which API.
        chunks_sent: text chunks written.
        text_sent: their text, joined.
        closed_at: loop time at which the client's close was noticed (``None``: the
            fake ended the stream itself).
        finished: the finish chunk and ``[DONE]`` were sent.
        last_chunk_at: loop time of the last chunk written.
    """

    provider: str
    chunks_sent: int = 0
    text_sent: str = ""
    closed_at: float | None = None
    finished: bool = False
    last_chunk_at: float | None = None


@dataclass(slots=True)
class Bucket:
    """Token bucket: ``tokens_per_minute`` capacity, refilled continuously."""

    tokens_per_minute: int
    tokens: float
    updated: float
    requests_per_day: int = 14_400
    requests_left: int = 14_400

    def refill(self, now: float) -> None:
        """Add what flowed in since the last update."""
        rate = self.tokens_per_minute / 60.0
        self.tokens = min(float(self.tokens_per_minute), self.tokens + (now - self.updated) * rate)
        self.updated = now

    def seconds_until(self, tokens: int) -> float:
        """Seconds until ``tokens`` fit (0 if they fit now)."""
        missing = tokens - self.tokens
        if missing <= 0:
            return 0.0
        return missing / (self.tokens_per_minute / 60.0)

    def seconds_to_full(self) -> float:
        """Seconds until the bucket is full again."""
        return self.seconds_until(self.tokens_per_minute)


def _count_tokens(text: str) -> int:
    return math.ceil(len(text) / 4)


def _pieces(text: str, size: int = 4) -> list[str]:
    """The default stream deltas: ``text`` in ``size``-character pieces."""
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def _go_duration(seconds: float) -> str:
    """Groq-style reset value: ``7.66s`` or ``2m59.56s``."""
    seconds = max(0.0, seconds)
    minutes, rest = divmod(seconds, 60.0)
    if minutes >= 1:
        return f"{int(minutes)}m{rest:.2f}s"
    return f"{rest:.3f}s"


@dataclass(slots=True)
class _State:
    scripts: dict[str, deque[dict[str, Any]]] = field(default_factory=dict)
    defaults: dict[str, dict[str, Any]] = field(default_factory=dict)
    buckets: dict[str, Bucket] = field(default_factory=dict)
    requests: list[RecordedRequest] = field(default_factory=list)
    streams: list[StreamLog] = field(default_factory=list)
    in_flight: int = 0
    max_concurrent: int = 0
    gates: dict[str, asyncio.Event] = field(default_factory=dict)
    transcriptions: list[RecordedTranscription] = field(default_factory=list)
    images: list[RecordedImage] = field(default_factory=list)


class FakeProviders:
    """The fake server.

    Args:
        clock: time for token buckets and request records (``SystemClock`` by default;
            a ``ManualClock`` makes bucket refills follow the test's virtual time).
        host: bind address; loopback only.
        port: 0 = a free port.
    """

    def __init__(self, *, clock: Clock | None = None, host: str = "127.0.0.1", port: int = 0):
        if host not in ("127.0.0.1", "::1", "localhost"):
            raise ValueError("the fake providers bind loopback only")
        self._clock: Clock = clock or SystemClock()
        self._host = host
        self._port = port
        self._state = _State()
        self._ids = itertools.count(1)
        self._runner: web.AppRunner | None = None
        self.app = self._build_app()

    # ------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Bind and serve."""
        self._runner = web.AppRunner(
            self.app,
            access_log=None,
            handle_signals=False,
            handler_cancellation=True,
            shutdown_timeout=1.0,
        )
        await self._runner.setup()
        site = web.TCPSite(self._runner, self._host, self._port)
        await site.start()
        server = site._server
        assert server is not None
        sockets = getattr(server, "sockets", None)
        assert sockets
        self._port = sockets[0].getsockname()[1]

    async def stop(self) -> None:
        """Stop serving."""
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> FakeProviders:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    @property
    def port(self) -> int:
        """The bound port."""
        return self._port

    @property
    def root(self) -> str:
        """``http://127.0.0.1:PORT``."""
        return f"http://{self._host}:{self._port}"

    @property
    def base_urls(self) -> dict[str, str]:
        """Base URL per provider, as each client/setting expects it."""
        return {
            "groq": self.root,
            "mistral": self.root,
            "cerebras": f"{self.root}/cerebras/v1",
            "deepseek": f"{self.root}/deepseek",
        }

    # ------------------------------------------------------------ scripting

    def script(self, target: str, *steps: dict[str, Any]) -> None:
        """Queue ``steps`` for ``target`` (an API key or a provider name)."""
        self._state.scripts.setdefault(target, deque()).extend(steps)

    def default(self, target: str, step: dict[str, Any]) -> None:
        """Answer ``target`` (an API key or a provider name) with ``step`` whenever
        its queue is empty."""
        self._state.defaults[target] = dict(step)

    def set_bucket(self, target: str, tokens_per_minute: int) -> None:
        """Token-bucket mode for ``target`` (an API key or a provider name)."""
        now = self._clock.monotonic()
        self._state.buckets[target] = Bucket(tokens_per_minute, float(tokens_per_minute), now)

    def _gate(self, name: str) -> asyncio.Event:
        return self._state.gates.setdefault(name, asyncio.Event())

    def open_gate(self, name: str) -> None:
        """Let every request held by a ``{"gate": name}`` step (now or later) answer: a
        test decides when a slow call ends instead of sleeping past a fixed delay."""
        self._gate(name).set()

    def reset(self) -> None:
        """Forget scripts, buckets, records and the concurrency peak."""
        self._state = _State()

    @property
    def requests(self) -> list[RecordedRequest]:
        """Every chat request received, in order."""
        return list(self._state.requests)

    def requests_for(
        self, provider: str | None = None, key: str | None = None
    ) -> list[RecordedRequest]:
        """Requests filtered by provider and/or key."""
        return [
            r
            for r in self._state.requests
            if (provider is None or r.provider == provider) and (key is None or r.key == key)
        ]

    @property
    def transcriptions(self) -> list[RecordedTranscription]:
        """Every transcription request received, in order."""
        return list(self._state.transcriptions)

    @property
    def images(self) -> list[RecordedImage]:
        """Every image part of every chat request received, in order."""
        return list(self._state.images)

    @property
    def streams(self) -> list[StreamLog]:
        """Streamed responses served, in order."""
        return list(self._state.streams)

    @property
    def max_concurrent(self) -> int:
        """Most chat requests in progress at once."""
        return self._state.max_concurrent

    # ------------------------------------------------------------ HTTP

    def _build_app(self) -> web.Application:
        # the providers take uploads of 25 MB (Groq's documented audio limit) and more:
        # aiohttp's default 1 MiB cap answered 413 for any real recording
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/openai/v1/chat/completions", self._handler("groq"))
        app.router.add_post("/v1/chat/completions", self._handler("mistral"))
        app.router.add_post("/cerebras/v1/chat/completions", self._handler("cerebras"))
        app.router.add_post("/deepseek/chat/completions", self._handler("deepseek"))
        app.router.add_post("/openai/v1/audio/transcriptions", self._audio_handler("groq"))
        app.router.add_post("/v1/audio/transcriptions", self._audio_handler("mistral"))
        app.router.add_post("/_control/script", self._ctl_script)
        app.router.add_post("/_control/bucket", self._ctl_bucket)
        app.router.add_post("/_control/default", self._ctl_default)
        app.router.add_post("/_control/reset", self._ctl_reset)
        app.router.add_get("/_control/requests", self._ctl_requests)
        app.router.add_get("/_control/stats", self._ctl_stats)
        return app

    async def _ctl_script(self, request: web.Request) -> web.Response:
        data = await request.json()
        self.script(str(data["target"]), *list(data.get("steps", [])))
        return web.json_response({"ok": True})

    async def _ctl_default(self, request: web.Request) -> web.Response:
        data = await request.json()
        self.default(str(data["target"]), dict(data.get("step", {})))
        return web.json_response({"ok": True})

    async def _ctl_bucket(self, request: web.Request) -> web.Response:
        data = await request.json()
        self.set_bucket(str(data["target"]), int(data["tokens_per_minute"]))
        return web.json_response({"ok": True})

    async def _ctl_reset(self, request: web.Request) -> web.Response:
        self.reset()
        return web.json_response({"ok": True})

    async def _ctl_requests(self, request: web.Request) -> web.Response:
        return web.json_response([r.as_json() for r in self._state.requests])

    async def _ctl_stats(self, request: web.Request) -> web.Response:
        s = self._state
        return web.json_response(
            {"count": len(s.requests), "in_flight": s.in_flight, "max_concurrent": s.max_concurrent}
        )

    def _handler(self, provider: str) -> Any:
        async def handle(request: web.Request) -> web.StreamResponse:
            state = self._state
            state.in_flight += 1
            state.max_concurrent = max(state.max_concurrent, state.in_flight)
            try:
                return await self._serve(provider, request)
            finally:
                state.in_flight -= 1

        return handle

    def _audio_handler(self, provider: str) -> Any:
        async def handle(request: web.Request) -> web.StreamResponse:
            state = self._state
            state.in_flight += 1
            state.max_concurrent = max(state.max_concurrent, state.in_flight)
            try:
                return await self._serve_audio(provider, request)
            finally:
                state.in_flight -= 1

        return handle

    async def _serve_audio(self, provider: str, request: web.Request) -> web.StreamResponse:
        key = request.headers.get("Authorization", "").removeprefix("Bearer ").strip()
        fields: dict[str, str] = {}
        file_name, content_type, data = "", "", b""
        async for part in await request.multipart():
            if not isinstance(part, BodyPartReader):
                continue
            if part.filename is not None:
                file_name = part.filename
                content_type = part.headers.get("Content-Type", "")
                data = bytes(await part.read())
            elif part.name:
                fields[part.name] = await part.text()
        self._state.transcriptions.append(
            RecordedTranscription(
                provider, key, fields, file_name, content_type, data, self._clock.monotonic()
            )
        )
        step = self._next_step(provider, key, f"{provider}:audio")
        if step.get("gate"):
            await self._gate(str(step["gate"])).wait()
        if step.get("delay_s"):
            await asyncio.sleep(float(step["delay_s"]))
        status = int(step.get("status", 200))
        if status != 200:
            return self._error(provider, status, step)
        body, content_type = transcription_answer(provider, fields, data, step, next(self._ids))
        headers = dict(step.get("headers", {}))
        if isinstance(body, str):
            return web.Response(text=body, headers=headers, content_type=content_type.split(";")[0])
        return web.json_response(body, headers=headers)

    def _next_step(self, provider: str, key: str, first: str = "") -> dict[str, Any]:
        """The next scripted step: ``first`` (e.g. ``"groq:audio"``, the transcription
        endpoint's own target), then the key's, then the provider's; then their defaults."""
        targets = (first, key, provider) if first else (key, provider)
        for target in targets:
            queue = self._state.scripts.get(target)
            if queue:
                return queue.popleft()
        for target in targets:
            if target in self._state.defaults:
                return dict(self._state.defaults[target])
        return {}

    def _bucket(self, provider: str, key: str) -> Bucket | None:
        return self._state.buckets.get(key) or self._state.buckets.get(provider)

    async def _serve(self, provider: str, request: web.Request) -> web.StreamResponse:
        auth = request.headers.get("Authorization", "")
        key = auth.removeprefix("Bearer ").strip()
        try:
            body = await request.json()
        except ValueError:
            body = {}
        if not isinstance(body, dict):
            body = {}
        self._state.requests.append(RecordedRequest(provider, key, body, self._clock.monotonic()))
        images = image_parts(provider, body)
        self._state.images.extend(images)
        step = self._next_step(provider, key)
        if images and str(body.get("model", "")) not in VISION_MODEL_IDS:
            message = f"model `{body.get('model')}` does not support image input"
            no_vision = {"error": {"message": message, "type": "invalid_request_error"}}
            return self._error(provider, 400, {"body": no_vision})
        if step.get("gate"):
            await self._gate(str(step["gate"])).wait()
        if step.get("delay_s"):
            await asyncio.sleep(float(step["delay_s"]))
        status = int(step.get("status", 200))
        if "huge_body" in step:
            every = float(step.get("interval_s", 0))
            return await self._huge(request, status, int(step["huge_body"]), every)
        if status != 200:
            return self._error(provider, status, step)
        if step.get("gzip"):
            completion, _ = self._completion(provider, body, step)
            packed = gzip.compress(json.dumps(completion).encode())
            return web.Response(
                body=packed,
                content_type="application/json",
                headers={"Content-Encoding": "gzip"},
            )
        if step.get("garbage"):
            return web.Response(
                status=200,
                text="<html><body><h1>502 Bad Gateway</h1></body></html>",
                content_type="text/html",
            )
        if "raw_sse" in step:
            return await self._sse(request, provider, [str(step["raw_sse"]).encode()], step)
        if "raw_body" in step:
            return web.json_response(step["raw_body"], headers=dict(step.get("headers", {})))
        if "error_in_200" in step:
            code = step["error_in_200"]
            error_body: dict[str, Any] = {
                "error": {"code": code, "message": str(step.get("message", f"fake {code}"))}
            }
            if "usage" in step:
                error_body["usage"] = step["usage"]
            return web.json_response(error_body, headers=dict(step.get("headers", {})))
        completion, usage_tokens = self._completion(provider, body, step)
        headers = dict(step.get("headers", {}))
        bucket = self._bucket(provider, key)
        if bucket is not None and not step:
            now = self._clock.monotonic()
            bucket.refill(now)
            if usage_tokens > bucket.tokens or bucket.requests_left <= 0:
                wait = bucket.seconds_until(usage_tokens)
                return self._error(
                    provider,
                    429,
                    {"retry_after": f"{max(1, math.ceil(wait))}"},
                    extra_headers=self._limit_headers(provider, bucket),
                )
            bucket.tokens -= usage_tokens
            bucket.requests_left -= 1
            headers = {**self._limit_headers(provider, bucket), **headers}
        elif not step.get("headers"):
            headers = self._limit_headers(provider, None)
        if body.get("stream"):
            return await self._stream(request, provider, completion, headers, step)
        raw = json.dumps(completion).encode()
        if step.get("cut"):
            return await self._cut(request, raw, headers)
        if step.get("trickle_s"):
            return await self._trickle(request, raw, headers, float(step["trickle_s"]))
        return web.Response(status=200, body=raw, content_type="application/json", headers=headers)

    async def _stream(
        self,
        request: web.Request,
        provider: str,
        completion: dict[str, Any],
        headers: dict[str, str],
        step: dict[str, Any],
    ) -> web.StreamResponse:
        text = str(completion["choices"][0]["message"]["content"])
        pieces = [str(c) for c in step["chunks"]] if "chunks" in step else _pieces(text)
        usage = completion.get("usage")
        base = {
            "id": completion["id"],
            "object": "chat.completion.chunk",
            "created": completion["created"],
            "model": completion["model"],
        }
        finish = str(completion["choices"][0]["finish_reason"])
        events: list[bytes | tuple[str, float] | str] = []

        def chunk(delta: dict[str, Any], reason: str | None, **extra: Any) -> bytes:
            choice: dict[str, Any] = {"index": 0, "delta": delta, "finish_reason": reason}
            if provider in ("groq", "deepseek"):
                choice["logprobs"] = None
            out = {**base, "choices": [choice], **extra}
            if provider == "deepseek" and "usage" not in extra:
                out["usage"] = None
            return b"data: " + json.dumps(out).encode() + b"\n\n"

        if "early_usage" in step:  # a gateway's usage block on the first chunk, not final
            events.append(
                chunk({"role": "assistant", "content": ""}, None, usage=step["early_usage"])
            )
        else:
            events.append(chunk({"role": "assistant", "content": ""}, None))
        for i, piece in enumerate(pieces):
            if step.get("cut_after") is not None and i >= int(step["cut_after"]):
                events.append("cut")
                break
            if step.get("error_event_after") is not None and i >= int(step["error_event_after"]):
                err = {"error": {"message": "fake mid-stream failure", "type": "server_error"}}
                events.append(b"event: error\ndata: " + json.dumps(err).encode() + b"\n\n")
                events.append("cut")
                break
            if step.get("gap_after") is not None and i == int(step["gap_after"]):
                events.append(("gap", float(step.get("gap_s", 30))))
            events.append(("text", 0.0))
            events.append(chunk({"content": piece}, None))
        else:
            sent_tokens = max(1, _count_tokens("".join(pieces)))
            if isinstance(usage, dict) and not {"completion_tokens", "usage"} & set(step):
                usage = {**usage, "completion_tokens": sent_tokens}
                if "prompt_tokens" in usage:
                    usage["total_tokens"] = int(usage["prompt_tokens"]) + sent_tokens
            if step.get("no_usage") or not isinstance(usage, dict):
                events.append(chunk({}, finish))
            elif provider == "groq":
                x_groq = {"id": f"req_fake{completion['id']}", "usage": usage}
                events.append(chunk({}, finish, x_groq=x_groq))
            elif provider == "cerebras":
                events.append(chunk({}, finish))
                last = {**base, "choices": [], "usage": usage}
                events.append(b"data: " + json.dumps(last).encode() + b"\n\n")
            else:
                events.append(chunk({"content": ""}, finish, usage=usage))
            events.append(b"data: [DONE]\n\n")
            events.append("done")
        return await self._sse(request, provider, events, step, headers, pieces)

    async def _sse(
        self,
        request: web.Request,
        provider: str,
        events: list[bytes | tuple[str, float] | str],
        step: dict[str, Any],
        headers: dict[str, str] | None = None,
        pieces: list[str] | None = None,
    ) -> web.StreamResponse:
        log = StreamLog(provider)
        self._state.streams.append(log)
        response = web.StreamResponse(status=200, headers=headers or {})
        response.content_type = "text/event-stream"
        response.enable_chunked_encoding()
        await response.prepare(request)
        loop = asyncio.get_running_loop()
        first = float(step.get("first_token_s", 0))
        interval = float(step.get("interval_s", 0))
        transport = request.transport
        texts = iter(pieces or [])

        async def wait(seconds: float) -> bool:
            """Sleep, watching the connection; False once the client closed it."""
            end = loop.time() + seconds
            while True:
                if transport is None or transport.is_closing():
                    return False
                left = end - loop.time()
                if left <= 0:
                    return True
                await asyncio.sleep(min(left, 0.01))

        try:
            if first and not await wait(first):
                raise ConnectionResetError
            for event in events:
                if event == "cut":
                    if transport is not None:
                        transport.close()
                    return response
                if event == "done":
                    log.finished = True
                    continue
                if isinstance(event, tuple):
                    if event[0] == "gap" and not await wait(event[1]):
                        raise ConnectionResetError
                    if event[0] == "text":
                        if log.chunks_sent and interval and not await wait(interval):
                            raise ConnectionResetError
                        log.chunks_sent += 1
                        log.text_sent += next(texts, "")
                    continue
                if transport is None or transport.is_closing():
                    raise ConnectionResetError
                if isinstance(event, bytes):
                    await response.write(event)
                log.last_chunk_at = loop.time()
            if "raw_sse" in step:
                log.finished = True
            await response.write_eof()
        except ConnectionError:
            log.closed_at = loop.time()
        except asyncio.CancelledError:
            log.closed_at = loop.time()
            raise
        return response

    async def _huge(
        self, request: web.Request, status: int, size: int, every_s: float
    ) -> web.StreamResponse:
        """A JSON-looking body of ``size`` bytes, chunked (no length declared), 64 KiB
        each ``every_s`` seconds, written until the client stops reading."""
        response = web.StreamResponse(status=status)
        response.content_type = "application/json"
        response.enable_chunked_encoding()
        await response.prepare(request)
        block = b" " * 65536
        try:
            await response.write(b'{"error": {"message": "')
            for _ in range(size // len(block) + 1):
                await response.write(block)
                if every_s:
                    await asyncio.sleep(every_s)
            await response.write(b'"}}')
            await response.write_eof()
        except ConnectionError:
            pass  # the client stopped reading (its cap)
        return response

    async def _cut(
        self, request: web.Request, raw: bytes, headers: dict[str, str]
    ) -> web.StreamResponse:
        response = web.StreamResponse(status=200, headers=headers)
        response.content_type = "application/json"
        response.content_length = len(raw)
        await response.prepare(request)
        await response.write(raw[: len(raw) // 2])
        transport = request.transport
        if transport is not None:
            transport.close()
        return response

    async def _trickle(
        self, request: web.Request, raw: bytes, headers: dict[str, str], seconds: float
    ) -> web.StreamResponse:
        response = web.StreamResponse(status=200, headers=headers)
        response.content_type = "application/json"
        response.enable_chunked_encoding()
        await response.prepare(request)
        loop = asyncio.get_running_loop()
        end = loop.time() + seconds
        with contextlib.suppress(ConnectionError):
            while loop.time() < end:
                await response.write(b"\n")
                await asyncio.sleep(0.05)
            await response.write(raw)
            await response.write_eof()
        return response

    def _error(
        self,
        provider: str,
        status: int,
        step: dict[str, Any],
        extra_headers: dict[str, str] | None = None,
    ) -> web.Response:
        headers = dict(extra_headers or {})
        headers.update(step.get("headers", {}))
        if step.get("retry_after") is not None:
            headers["retry-after"] = str(step["retry_after"])
        body = step.get("body")
        if body is None:
            body = _ERROR_BODIES[provider].get(
                status, {"error": {"message": f"fake {status}", "type": "server_error"}}
            )
        return web.json_response(body, status=status, headers=headers)

    def _limit_headers(self, provider: str, bucket: Bucket | None) -> dict[str, str]:
        if bucket is None:
            limit, left, reset = 1_000_000, 1_000_000, 0.0
            req_limit, req_left = 14_400, 14_400
        else:
            limit, left = bucket.tokens_per_minute, int(bucket.tokens)
            reset = bucket.seconds_to_full()
            req_limit, req_left = bucket.requests_per_day, bucket.requests_left
        if provider == "groq":
            return {
                "x-ratelimit-limit-tokens": str(limit),
                "x-ratelimit-remaining-tokens": str(left),
                "x-ratelimit-reset-tokens": _go_duration(reset),
                "x-ratelimit-limit-requests": str(req_limit),
                "x-ratelimit-remaining-requests": str(req_left),
                "x-ratelimit-reset-requests": "2m59.56s",
            }
        if provider == "mistral":
            return {
                "x-ratelimit-limit-tokens-minute": str(limit),
                "x-ratelimit-remaining-tokens-minute": str(left),
                "x-ratelimit-limit-req-minute": "720",
                "x-ratelimit-remaining-req-minute": "719",
            }
        if provider == "cerebras":
            return {
                "x-ratelimit-limit-tokens-minute": str(limit),
                "x-ratelimit-remaining-tokens-minute": str(left),
                "x-ratelimit-reset-tokens-minute": repr(reset),
                "x-ratelimit-limit-requests-day": str(req_limit),
                "x-ratelimit-remaining-requests-day": str(req_left),
                "x-ratelimit-reset-requests-day": "33011.382867097855",
            }
        return {}

    def _completion(
        self, provider: str, body: dict[str, Any], step: dict[str, Any]
    ) -> tuple[dict[str, Any], int]:
        messages = body.get("messages") or []
        max_tokens = int(body.get("max_tokens") or 1024)
        last_user = next(
            (text_of(m.get("content", "")) for m in reversed(messages) if m.get("role") == "user"),
            "",
        )
        text = str(step.get("text", f"echo: {last_user[:200]}"))
        images = image_parts(provider, body)
        image_tokens = int(step.get("image_tokens", image_prompt_tokens(provider, images)))
        prompt = int(
            step.get(
                "prompt_tokens",
                sum(_count_tokens(text_of(m.get("content", ""))) + 4 for m in messages)
                + (image_tokens if images else 0),
            )
        )
        completion_tokens = int(
            step.get("completion_tokens", min(max_tokens, max(1, _count_tokens(text))))
        )
        cached = int(step.get("cached_tokens", 0))
        reasoning = int(step.get("reasoning_tokens", 0))
        model = str(body.get("model", "fake-model"))
        n = next(self._ids)
        created = 1_780_000_000 + n
        message: dict[str, Any] = {"role": "assistant", "content": text}
        choice = {
            "finish_reason": step.get("finish_reason", "stop"),
            "index": 0,
            "message": message,
        }
        total = prompt + completion_tokens
        out: dict[str, Any] = {
            "choices": [choice],
            "created": created,
            "id": f"chatcmpl-fake-{n}",
            "model": model,
            "object": "chat.completion",
        }
        if provider == "groq":
            usage: dict[str, Any] = {
                "queue_time": 0.01,
                "prompt_tokens": prompt,
                "prompt_time": 0.002,
                "completion_tokens": completion_tokens,
                "completion_time": 0.03,
                "total_tokens": total,
                "total_time": 0.032,
            }
            if cached:
                usage["prompt_tokens_details"] = {"cached_tokens": cached}
            if reasoning:
                usage["completion_tokens_details"] = {"reasoning_tokens": reasoning}
            out.update(usage=usage, usage_breakdown=None, x_groq={"id": f"req_fake{n}"})
            choice["logprobs"] = None
        elif provider == "mistral":
            usage = {
                "prompt_tokens": prompt,
                "completion_tokens": completion_tokens,
                "total_tokens": total,
            }
            if cached:
                usage["num_cached_tokens"] = cached
            message["tool_calls"] = None
            out["usage"] = usage
        elif provider == "cerebras":
            usage = {
                "prompt_tokens": prompt,
                "completion_tokens": completion_tokens,
                "total_tokens": total,
                "prompt_tokens_details": {"cached_tokens": cached},
            }
            if reasoning:
                usage["completion_tokens_details"] = {
                    "accepted_prediction_tokens": 0,
                    "reasoning_tokens": reasoning,
                    "rejected_prediction_tokens": 0,
                }
            out.update(
                usage=usage,
                system_fingerprint="fp_fake",
                time_info={
                    "queue_time": 0.04,
                    "prompt_time": 0.003,
                    "completion_time": 0.004,
                    "total_time": 0.05,
                    "created": float(created),
                },
            )
        else:
            usage = {
                "prompt_tokens": prompt,
                "completion_tokens": completion_tokens,
                "total_tokens": total,
                "prompt_cache_hit_tokens": cached,
                "prompt_cache_miss_tokens": prompt - cached,
                "prompt_tokens_details": {"cached_tokens": cached},
            }
            if reasoning:
                usage["completion_tokens_details"] = {"reasoning_tokens": reasoning}
            choice["logprobs"] = None
            out.update(usage=usage, system_fingerprint="fp_fake")
        if "usage" in step:
            out["usage"] = step["usage"]
        return out, total


async def _serve_forever(port: int) -> None:
    fake = FakeProviders(port=port)
    await fake.start()
    print(json.dumps({"port": fake.port, "base_urls": fake.base_urls}), flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        await fake.stop()


def main(argv: list[str] | None = None) -> None:
    """``python -m tests.support.providers --port N`` (0 = any free port)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args(argv)
    asyncio.run(_serve_forever(args.port))


if __name__ == "__main__":
    main()
