"""One streamed call inside a governed attempt: opened, read to its end, a stop or a
cut, and what it is settled at when it did not complete.

The hold around it is the caller's (:mod:`llm.cascade.attempt`); this module only
turns the stream into a :class:`~llm.types.Completion` or a
:class:`~llm.errors.ProviderUnavailable`.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, replace
from decimal import Decimal

from budget.types import Usage
from llm.cascade.plan import AttemptPlan
from llm.cascade.received import OutputWatch, count_received, final_usage, received_output
from llm.cascade.types import CascadeConfig, TokenCounter
from llm.errors import ProviderError, ProviderUnavailable
from llm.stream import ChunkStream, StreamControl, StreamingProvider, StreamResult, pump
from llm.types import Completion

__all__ = ["StreamProgress", "cancelled_usage", "provider_model", "streamed_call"]

log = logging.getLogger("kopek.llm.cascade")  # one logger for every part of the cascade


def provider_model(provider: object) -> str | None:
    """A provider's default model (``None`` when it has none)."""
    model = getattr(provider, "model", None)
    return model if isinstance(model, str) else None


@dataclass(slots=True)
class StreamProgress:
    """How far a streamed call got, for settling it if it is cancelled (shutdown past
    its stop wait, a handler torn down): ``opened`` is the stream once its 200 came."""

    opened: ChunkStream | None = None


async def cancelled_usage(
    plan: AttemptPlan,
    control: StreamControl,
    progress: StreamProgress,
    count: TokenCounter,
    factor: Decimal,
) -> Usage:
    """What a cancelled streamed call is settled at (estimated), by the rule of a stop
    or a cut: the provider's report if it is final (:func:`~llm.cascade.received.final_usage`),
    else the input held plus the output received (counted × the safety factor, at least
    one token per chunk, at most ``max_tokens`` unless the text is certainly past it);
    before its 200, the input alone (the provider may have read the prompt)."""
    opened = progress.opened
    if opened is None:
        return Usage(input_tokens=plan.input_tokens)
    received = await count_received(count, control.text, factor)
    final = final_usage(opened.usage, bool(opened.finish_reason), received)
    if final is not None:
        return final
    output = received_output(received, control.chunks, plan.max_tokens)
    return Usage(input_tokens=plan.input_tokens, output_tokens=output)


async def streamed_call(
    provider: StreamingProvider,
    plan: AttemptPlan,
    control: StreamControl,
    *,
    config: CascadeConfig,
    count: TokenCounter,
    progress: StreamProgress | None = None,
) -> Completion:
    """One streamed call, read to its end, a stop or a cut.

    Args:
        provider: the key streamed from.
        plan: the attempt as held.
        control: the caller's stop switch and text sink.
        config: ``timeout_s`` (total), ``first_token_timeout_s``, ``idle_timeout_s``.
        count: the token counter for output received without a usage report.
        progress: filled as the call goes (see :func:`cancelled_usage`).

    Returns the completion (a stopped one, or one cut after text was shown, with
    ``usage`` = what to settle: the provider's report if it is final, else the input
    held plus the output received as counted, × the safety factor, at most
    ``max_tokens`` unless certainly past it; flagged ``estimated``). A stream whose text
    is certainly past ``max_tokens`` is closed then and its text returned cut, booked at
    Kopek's count of it (``estimated``, ``cut``): :mod:`llm.cascade.received`.

    Raises:
        ProviderError: the request failed before the stream began; or a cut before
            any text was shown (``ProviderUnavailable``: interrupted with the tokens
            received when any arrived, else not interrupted — the hold is released).
    """
    model = None if plan.model == provider_model(provider) else plan.model
    if control.stopped.is_set():  # stopped before anything was sent: nothing spent
        return _stopped_unsent(provider, plan, control)
    control.attempts += 1  # a provider call is under way from here
    opened = await _open(provider, plan, control, model)
    if isinstance(opened, Completion):
        return opened
    if progress is not None:
        progress.opened = opened
    loop = asyncio.get_running_loop()
    deadline = loop.time() + config.timeout_s
    watch = OutputWatch(plan.max_tokens, count, config.token_safety_factor)
    result = await pump(
        opened,
        control,
        first_token_s=config.first_token_timeout_s,
        idle_s=config.idle_timeout_s,
        deadline=deadline,
        limit=watch,
    )
    if result.ended == "overrun":
        return _overrun(provider, plan, opened, result, watch)
    if result.ended == "complete":
        return await _completed(provider, plan, opened, result, count, config)
    return await _ended_early(provider, plan, control, opened, result, count, config)


def _overrun(
    provider: StreamingProvider,
    plan: AttemptPlan,
    opened: ChunkStream,
    result: StreamResult,
    watch: OutputWatch,
) -> Completion:
    """A stream closed past ``max_tokens``: the text received, cut there, booked at
    Kopek's count of it (estimated; above ``max_tokens``, so judged an
    ``output_over_max_tokens`` anomaly)."""
    log.warning(
        "stream from %s closed: %d output tokens received (Kopek's count) with max_tokens %d",
        provider.name,
        watch.last.booked,
        plan.max_tokens,
    )
    return Completion(
        text=result.text,
        finish_reason="length",
        provider=provider.name,
        model=result.model,
        usage=Usage(input_tokens=plan.input_tokens, output_tokens=watch.last.booked),
        rate_limits=opened.rate_limits,
        cut=True,
        estimated=True,
    )


async def _completed(
    provider: StreamingProvider,
    plan: AttemptPlan,
    opened: ChunkStream,
    result: StreamResult,
    count: TokenCounter,
    config: CascadeConfig,
) -> Completion:
    """A stream read to its finish chunk: its usage as reported when final; a usage
    block below what was received is not (``usage_issue`` ``not_final``: the text
    received is counted, estimated); none, or an unreadable one, is the attempt's to
    judge (``usage_issue``: the ceiling)."""
    completion = Completion(
        text=result.text,
        finish_reason=result.finish_reason or "unknown",
        provider=provider.name,
        model=result.model,
        usage=result.usage or Usage(),
        rate_limits=opened.rate_limits,
        usage_issue=result.usage_issue if result.usage is None else "",
    )
    usage = result.usage
    factor = config.token_safety_factor
    if usage is None or usage.output_tokens * factor >= len(result.text.encode("utf-8")):
        return completion  # no report, or one at least as large as the text can be
    received = await count_received(count, result.text, factor)
    if final_usage(usage, True, received) is not None:
        return completion
    output = received_output(received, result.chunks, plan.max_tokens)
    counted = Usage(input_tokens=plan.input_tokens, output_tokens=output)
    return replace(completion, usage=counted, usage_issue="not_final", estimated=True)


async def _open(
    provider: StreamingProvider, plan: AttemptPlan, control: StreamControl, model: str | None
) -> ChunkStream | Completion:
    """The opened stream, or — stopped before its 200 came — a stopped completion whose
    usage is the input held (the provider may have read the prompt; estimated).

    Raises:
        ProviderError: the request failed before the stream began.
    """
    scope = control.until_stopped()  # opened in this task; a stop cancels the request
    try:
        async with scope:
            return await provider.stream(plan.messages, plan.max_tokens, model)
    except ProviderError:
        if not scope.stopped:
            raise
    # stopped before the 200 came: the request's connection is closed
    usage = Usage(input_tokens=plan.input_tokens)  # it may have read the prompt
    return replace(_stopped_unsent(provider, plan, control), usage=usage, estimated=True)


async def _ended_early(
    provider: StreamingProvider,
    plan: AttemptPlan,
    control: StreamControl,
    opened: ChunkStream,
    result: StreamResult,
    count: TokenCounter,
    config: CascadeConfig,
) -> Completion:
    """A stream stopped or cut: the completion settled at what was received (see
    :func:`streamed_call`).

    Raises:
        ProviderUnavailable: cut before any text was shown.
    """
    usage, estimated = await _received_usage(plan, result, count, config.token_safety_factor)
    if result.ended == "cut" and not control.shown:
        error = result.error or ProviderUnavailable(provider.name, "stream cut")
        # more than the opening role chunk, or a report: something was generated
        generated = result.chunks > 1 or result.usage is not None
        raise ProviderUnavailable(
            provider.name,
            error.detail,
            interrupted=generated,
            partial_usage=usage if generated else None,
            rate_limits=opened.rate_limits,
        )
    if result.ended == "cut":
        log.warning(
            "stream from %s cut after text was shown (%s); finished with a note",
            provider.name,
            result.error.detail if result.error is not None else "cut",
        )
    return Completion(
        text=result.text,
        finish_reason=result.finish_reason or result.ended,
        provider=provider.name,
        model=result.model,
        usage=usage,
        rate_limits=opened.rate_limits,
        stopped=control.reason or "user" if result.ended == "stopped" else "",
        stream_cut=result.ended == "cut",
        estimated=estimated,
    )


def _stopped_unsent(
    provider: StreamingProvider, plan: AttemptPlan, control: StreamControl
) -> Completion:
    return Completion(
        text="",
        finish_reason="stopped",
        provider=provider.name,
        model=plan.model,
        usage=Usage(),
        stopped=control.reason or "user",
    )


async def _received_usage(
    plan: AttemptPlan, result: StreamResult, count: TokenCounter, factor: Decimal
) -> tuple[Usage, bool]:
    """What an interrupted stream is settled at, and whether that is Kopek's
    estimate: the provider's report when it is final (its finish chunk came, its output
    not below what was received), else the input held plus the output received
    (counted × the safety factor, at least one token per chunk, at most ``max_tokens``
    unless the text is certainly past it)."""
    received = await count_received(count, result.text, factor)
    final = final_usage(result.usage, bool(result.finish_reason), received)
    if final is not None:
        return final, False
    output = received_output(received, result.chunks, plan.max_tokens)
    return Usage(input_tokens=plan.input_tokens, output_tokens=output), True
