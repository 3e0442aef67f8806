"""Streamed completions: one normalized iterator per provider, and the pump that reads
it under the first-token and idle-gap timeouts while a user may press Stop.

Shapes read (see ``tests/fixtures/llm/streams/``): every provider sends
OpenAI-style ``chat.completion.chunk`` objects; text is ``choices[0].delta.content``
(a string, or for Mistral's thinking models a list whose ``{"type": "text"}`` parts
are text — ``thinking`` parts are not shown); the finish reason comes on the last
chunk with choices. Usage arrives once, near the end:

* Groq: on the finish chunk under ``x_groq.usage`` (older API versions) and/or
  ``usage``, sometimes again on a trailing chunk with ``choices: []``;
* Mistral: ``usage`` on the finish chunk;
* DeepSeek: ``"usage": null`` on every chunk, the report on the finish chunk;
* Cerebras and the OpenAI reference shape (``stream_options.include_usage``): a
  final chunk with ``choices: []`` and ``usage``, then ``data: [DONE]``.

A stream that ends without a finish reason (connection closed, ``[DONE]`` missing
after a cut) is a *cut*. A chunk that carries an ``error`` object (Groq's
``event: error`` after the 200) is a cut too: the provider may have billed what it
generated.

Timeouts (seconds, on the event loop's clock): ``first_token_s`` from the request
until the first chunk; ``idle_s`` between chunks; the attempt's total deadline over
everything. SSE comment lines (DeepSeek's ``: keep-alive``) are not chunks. One chunk
(one server-sent event) is at most :data:`llm.providers.sse.MAX_EVENT_BYTES`: a bigger
one is a cut, found as its bytes arrive, before any decoder holds the loop on it
(:mod:`llm.providers.sse`).

Errors: what the providers raise is already in :mod:`llm.errors`
(:class:`~llm.errors.ProviderUnavailable` with ``interrupted=True`` for anything
after the 200). :func:`pump` never raises for a cut: it reports it in
:class:`StreamResult`, so the cascade can settle the tokens received.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, Literal, Protocol, runtime_checkable

from budget.types import Usage
from llm.errors import ProviderError, ProviderUnavailable
from llm.providers.base import read_usage
from llm.stop_scope import StopScope
from llm.types import Message, RateLimitInfo

__all__ = [
    "ChunkStream",
    "OutputLimit",
    "StreamControl",
    "StreamResult",
    "StreamingProvider",
    "chunk_text",
    "pump",
]

log = logging.getLogger("kopek.llm.stream")

Ended = Literal["complete", "stopped", "cut", "overrun"]


@runtime_checkable
class OutputLimit(Protocol):
    """What :func:`pump` asks after each text delta: is the text received already past
    the output the call was held for? (:class:`llm.cascade.received.OutputWatch`)"""

    async def passed(self, delta: str, text: str) -> bool:
        """True to close the stream now (``text``: everything received so far)."""
        ...


class _Overrun(Exception):
    """Internal: the output limit said the text is past it."""


def _sub(mapping: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = mapping.get(key)
    return value if isinstance(value, Mapping) else {}


def chunk_text(chunk: Mapping[str, Any]) -> str:
    """The visible text of one chunk (``""`` for role, reasoning, usage-only chunks)."""
    choices = chunk.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], Mapping):
        return ""
    content = _sub(choices[0], "delta").get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # Mistral: [{"type": "text", "text": ...}, {"type": "thinking"}]
        return "".join(
            part["text"]
            for part in content
            if isinstance(part, Mapping)
            and part.get("type") == "text"
            and isinstance(part.get("text"), str)
        )
    return ""


class ChunkStream:
    """One streamed call after its 200: iterate for text deltas (``""`` for a chunk
    without visible text), then read ``usage``/``usage_issue``/``finish_reason``.

    Args:
        provider: provider key name.
        model: the model asked for (replaced by the chunks' ``model`` when they say).
        chunks: the decoded JSON chunks, in order, ending at ``[DONE]`` or EOF.
        close: closes the HTTP response (the provider sees its connection closed).
        translate: maps an exception raised by ``chunks`` to the ``llm`` error tree.
        rate_limits: headers of the 200.

    Attributes:
        usage: the provider's report (``None`` until one arrives).
        usage_issue: ``""``, ``"missing"``, ``"invalid"`` or ``"inconsistent"`` (see
            :func:`llm.providers.base.read_usage`); ``"missing"`` until a report.
        finish_reason: ``""`` until the finish chunk.
    """

    __slots__ = (
        "_chunks",
        "_close",
        "_closed",
        "_translate",
        "finish_reason",
        "model",
        "provider",
        "rate_limits",
        "usage",
        "usage_issue",
    )

    def __init__(
        self,
        provider: str,
        model: str,
        chunks: AsyncIterator[Mapping[str, Any]],
        close: Callable[[], Awaitable[None]],
        translate: Callable[[Exception], ProviderError],
        rate_limits: RateLimitInfo,
    ) -> None:
        self.provider = provider
        self.model = model
        self._chunks = chunks
        self._close = close
        self._closed = False
        self._translate = translate
        self.rate_limits = rate_limits
        self.usage: Usage | None = None
        self.usage_issue = "missing"
        self.finish_reason = ""

    def __repr__(self) -> str:
        return f"ChunkStream({self.provider!r}, finish={self.finish_reason!r})"

    def __aiter__(self) -> ChunkStream:
        return self

    async def __anext__(self) -> str:
        try:
            chunk = await self._chunks.__anext__()
        except StopAsyncIteration:
            if not self.finish_reason:
                raise ProviderUnavailable(
                    self.provider, "stream ended without a finish reason", interrupted=True
                ) from None
            raise
        except ProviderError:
            raise
        except Exception as exc:  # noqa: BLE001 - an SDK's or httpx's failure, translated here
            raise self._translate(exc) from None
        if not isinstance(chunk, Mapping):
            raise ProviderUnavailable(
                self.provider, "stream chunk is not an object", interrupted=True
            )
        if chunk.get("error") is not None and not chunk.get("choices"):
            raise ProviderUnavailable(self.provider, "error event in the stream", interrupted=True)
        if isinstance(chunk.get("usage"), Mapping) or _sub(_sub(chunk, "x_groq"), "usage"):
            reading = read_usage(chunk)
            if reading.usage is not None or self.usage is None:
                self.usage, self.usage_issue = reading.usage, reading.issue
        choices = chunk.get("choices")
        if isinstance(choices, list) and choices and isinstance(choices[0], Mapping):
            finish = choices[0].get("finish_reason")
            if isinstance(finish, str) and finish:
                self.finish_reason = finish
        model = chunk.get("model")
        if isinstance(model, str) and model:
            self.model = model
        return chunk_text(chunk)

    async def aclose(self) -> None:
        """Close the connection (idempotent; errors while closing are logged)."""
        if self._closed:
            return
        self._closed = True
        try:
            await self._close()
        except Exception:  # closing a broken connection must not hide the real outcome
            log.debug("closing the %s stream failed", self.provider, exc_info=True)
        close = getattr(self._chunks, "aclose", None)  # a generator left before its end
        if close is not None:
            with contextlib.suppress(Exception):
                await close()


@runtime_checkable
class StreamingProvider(Protocol):
    """A provider key that can stream (every real client does; test doubles may not)."""

    name: str

    async def stream(
        self, messages: Sequence[Message], max_tokens: int, model: str | None = None
    ) -> ChunkStream:
        """Send a streamed request and return once its 200 arrived.

        Raises:
            ProviderError: the request failed before the stream began (translated as
                for :meth:`llm.providers.base.Provider.complete`).
        """
        ...


class StreamControl:
    """What the bot and the cascade share about one streamed answer.

    Args:
        on_text: called (synchronously, on the loop) with the whole text so far each
            time it grew; it must not block (the bot's sink only schedules a draft).
        loop_time: the clock for the figures below (default: the running loop's).

    Attributes:
        reason: why it was stopped (``"user"``, ``"kill"``), ``None`` while running.
        shown: set by the bot once some text was visible to the user; a cut after
            that finishes the answer with a note instead of asking another provider.
        text: the text received so far (of the current attempt).
        chunks: chunks received so far (of the current attempt, with or without text).
        first_token_at: loop time of the first chunk of the attempt that answered.
        attempts: provider calls started for this answer (0 while it waits for a call
            slot or a hold: a stop then cuts no connection, it cancels the wait).
        reading: True while a provider stream is being read (:func:`pump`); a display
            whose turn comes when it is False shows nothing: the whole answer already
            arrived and goes out in one piece at once (or the next attempt's text will
            come), so a draft then would be one more Bot API call for nothing.
    """

    __slots__ = (
        "_loop_time",
        "_scope",
        "attempts",
        "chunks",
        "first_token_at",
        "on_text",
        "reading",
        "reason",
        "shown",
        "stopped",
        "text",
    )

    def __init__(
        self,
        on_text: Callable[[str], None] | None = None,
        *,
        loop_time: Callable[[], float] | None = None,
    ) -> None:
        self.on_text = on_text
        self.stopped = asyncio.Event()
        self.reason: str | None = None
        self.shown = False
        self.text = ""
        self.chunks = 0
        self.first_token_at: float | None = None
        self.attempts = 0
        self.reading = False
        self._loop_time = loop_time
        self._scope: asyncio.Timeout | None = None  # the block a stop cancels

    def __repr__(self) -> str:
        return f"StreamControl(reason={self.reason!r}, chars={len(self.text)}, shown={self.shown})"

    def now(self) -> float:
        """The control's clock, seconds."""
        if self._loop_time is not None:
            return self._loop_time()
        return asyncio.get_running_loop().time()

    def stop(self, reason: str = "user") -> bool:
        """Ask the provider stream to stop (the connection is closed within one chunk
        read). Returns False if it was already stopped."""
        if self.stopped.is_set():
            return False
        self.reason = reason
        self.stopped.set()
        scope, self._scope = self._scope, None
        if scope is not None:  # the block waiting on the provider ends at once
            scope.reschedule(asyncio.get_running_loop().time())
        return True

    def until_stopped(self) -> StopScope:
        """``async with control.until_stopped() as scope:`` runs the block in the caller's
        task until it ends or :meth:`stop` is called, which cancels it there (no task of
        its own, no waiter on :attr:`stopped`); ``scope.stopped`` says which."""
        return StopScope(lambda: self._scope, partial(setattr, self, "_scope"))


@dataclass(frozen=True, slots=True)
class StreamResult:
    """How one streamed attempt ended.

    Attributes:
        text: every text delta received, joined.
        ended: ``complete`` (finish reason seen), ``stopped`` (Stop, ``/kill hard``),
            ``cut`` (connection drop, idle gap, first-token timeout, total deadline,
            error event) or ``overrun`` (closed by the bot: the text was past the output
            limit).
        error: the failure of a cut (``interrupted``), else ``None``.
        chunks: chunks received (with or without text).
        usage: the provider's last report, if it sent one before the end (not
            necessarily final: :func:`llm.cascade.received.final_usage`).
        usage_issue: as :attr:`ChunkStream.usage_issue`.
        finish_reason: the provider's, ``""`` when none came.
        model: the model that answered.
    """

    text: str
    ended: Ended
    error: ProviderUnavailable | None
    chunks: int
    usage: Usage | None
    usage_issue: str
    finish_reason: str
    model: str


async def _read(
    stream: ChunkStream,
    control: StreamControl,
    parts: list[str],
    counter: list[int],
    *,
    first_token_s: float,
    idle_s: float,
    deadline: float,
    limit: OutputLimit | None,
) -> None:
    """Read deltas into ``parts`` until the end; raise a cut, or :class:`_Overrun` once
    ``limit`` says the text is past it.

    The first-token, idle and total bounds are one watchdog timer that re-arms itself
    only when it fires (at most once per ``idle_s``), not a timeout entered per chunk:
    a chunk costs a clock read (a streamed answer is hundreds of chunks)."""
    loop = asyncio.get_running_loop()
    last = [loop.time()]  # loop time of the last chunk (of the start, before the first)

    def due() -> float:
        return min(deadline, last[0] + (first_token_s if counter[0] == 0 else idle_s))

    try:
        async with asyncio.timeout(None) as timer:

            def watch() -> None:
                at = due()
                if loop.time() >= at:
                    timer.reschedule(loop.time())  # expires now: the read is cut
                else:
                    watchdog[0] = loop.call_at(at, watch)

            def rearm() -> None:  # the first chunk: from the first-token bound to idle's
                watchdog[0].cancel()
                watchdog[0] = loop.call_at(due(), watch)

            watchdog = [loop.call_at(due(), watch)]
            try:
                await _read_chunks(stream, control, parts, counter, (last, loop, rearm), limit)
            finally:
                watchdog[0].cancel()
    except TimeoutError:
        if due() >= deadline:
            what = "total deadline exceeded while streaming"
        elif counter[0] == 0:
            what = f"no first token within {first_token_s:g} s"
        else:
            what = f"no chunk for {idle_s:g} s"
        raise ProviderUnavailable(stream.provider, what, interrupted=True) from None


async def _read_chunks(
    stream: ChunkStream,
    control: StreamControl,
    parts: list[str],
    counter: list[int],
    watch: tuple[list[float], asyncio.AbstractEventLoop, Callable[[], None]],
    limit: OutputLimit | None,
) -> None:
    """The chunks of :func:`_read`, each noted in ``last`` (its loop time; the first
    re-arms the watchdog)."""
    last, loop, rearm = watch
    while True:
        try:
            delta = await stream.__anext__()
        except StopAsyncIteration:
            return
        last[0] = loop.time()
        if counter[0] == 0:
            control.first_token_at = control.now()
            counter[0] = 1
            rearm()
        else:
            counter[0] += 1
        control.chunks = counter[0]
        if delta:
            parts.append(delta)
            control.text = "".join(parts)
            if control.on_text is not None:
                try:
                    control.on_text(control.text)
                except Exception:  # the display must never break the answer
                    log.exception("stream display callback failed")
            if limit is not None and await limit.passed(delta, control.text):
                raise _Overrun


async def pump(
    stream: ChunkStream,
    control: StreamControl,
    *,
    first_token_s: float,
    idle_s: float,
    deadline: float,
    limit: OutputLimit | None = None,
) -> StreamResult:
    """Read ``stream`` to its end, a cut, a stop or its output limit, then close it.

    Args:
        stream: an open stream (its 200 arrived).
        control: receives the text as it grows; its ``stopped`` event ends the read
            at once (the connection is closed, so the provider stops generating).
        first_token_s: seconds allowed until the first chunk.
        idle_s: seconds allowed between two chunks.
        deadline: the attempt's total deadline, in loop time.
        limit: asked after each text delta; once it says the text is past it, the
            stream is closed (the provider stops generating) and ``overrun`` reported.

    Returns:
        The result; a cut is reported, not raised.

    Raises:
        asyncio.CancelledError: when the caller is cancelled (the stream is closed first).
    """
    control.text = ""
    control.chunks = 0
    control.reading = True
    parts: list[str] = []
    counter = [0]
    error: ProviderUnavailable | None = None
    ended: Ended = "complete"
    scope = control.until_stopped()  # read in this task; a stop cancels the read
    try:
        if control.stopped.is_set():  # before the read began
            ended = "stopped"
        else:
            async with scope:
                try:
                    await _read(
                        stream,
                        control,
                        parts,
                        counter,
                        first_token_s=first_token_s,
                        idle_s=idle_s,
                        deadline=deadline,
                        limit=limit,
                    )
                except _Overrun:
                    ended = "overrun"
                except ProviderUnavailable as exc:
                    error, ended = exc, "cut"
                except ProviderError as exc:
                    error = ProviderUnavailable(stream.provider, exc.detail, interrupted=True)
                    ended = "cut"
            if scope.stopped:
                error, ended = None, "stopped"
    finally:
        control.reading = False
        await stream.aclose()
    return StreamResult(
        text="".join(parts),
        ended=ended,
        error=error,
        chunks=counter[0],
        usage=stream.usage,
        usage_issue=stream.usage_issue,
        finish_reason=stream.finish_reason,
        model=stream.model,
    )
