"""One governed attempt at one provider key: hold → call → settle, or release.

::

    size the plan (counted, bound, calibrated estimate)
    wait for a global call slot (chat before digest)          — holds no money
    reserve(op, req, provider, model, input_tokens, max_tokens)
        refused at a free key for a limit → SkipProvider("budget")
        refused at the paid anchor       → the degradation ladder (llm.cascade.degradation)
    the key's circuit refuses, or (shared) its paced window has no room now
        (not the anchor) → release; SkipProvider("open" / "paced")
    call (its own deadline + the cascade's grace; streamed when asked and possible)
        ProviderError    → settle what it billed / settle interrupted / release; raise
        deadline         → settle interrupted; ProviderUnavailable(interrupted)
        cancelled, bug   → settle interrupted; re-raise
    judge the usage (see below), settle; breaker, pacing and calibration learn from it
    blank text → EmptyCompletion (billed, not an answer)

Usage (``docs/money.md``, "What a provider sends";
docs/decisions/090-what-a-provider-reports.md): what a provider reports is what it
bills, so a well-formed report is booked as reported whenever the model can have done
it — at most its context window plus the ``max_tokens`` sent
(:func:`llm.model_caps.possible_tokens`). Then:

* more input than Kopek's provable bound (``input_over_bound``) or more output than
  ``max_tokens`` (``output_over_max_tokens``, a stream closed past it included): booked
  as reported (a stream's at Kopek's count of what it received), counted, admins told
  once per key and kind, the model's calibration fed the reported input, and the key
  cooled **only when it is paid** (a free key's cooldown would send users to the paid
  anchor);
* beyond what the model can do (``implausible``), missing, unreadable (``invalid``) or
  self-contradictory (``inconsistent``): no report to book — settled at the hold's
  ceiling, flagged estimated, counted (``implausible`` also told and, paid, cooled);
* a streamed usage block that is not final (``not_final``): the text received counted.

An answer over ``max_tokens`` × :data:`~llm.cascade.types.MAX_CHARS_PER_TOKEN` chars is cut.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace

from budget.errors import BudgetError, HoldRefused
from budget.protocol import HoldTicket, LedgerPort, OperationTicket, RequestTicket
from budget.types import CalibrationSample, Usage
from llm.cascade.degradation import LADDER_REASONS, DegradationLadder
from llm.cascade.plan import AttemptPlan, Sizer, reserve
from llm.cascade.streamed import StreamProgress, cancelled_usage, streamed_call
from llm.cascade.telemetry import Telemetry
from llm.cascade.types import (
    MAX_CHARS_PER_TOKEN,
    CascadeConfig,
    CascadeEvent,
    TokenCounter,
)
from llm.errors import EmptyCompletion, ProviderError, ProviderUnavailable
from llm.keys.admission import KeyAdmission
from llm.keys.slots import CallSlots
from llm.model_caps import possible_tokens
from llm.providers.base import Provider
from llm.providers.tools import ToolCallingProvider
from llm.providers.vision_provider import media_tokens_of
from llm.stream import StreamControl, StreamingProvider
from llm.types import Completion, LLMRequest

__all__ = ["GovernedAttempt", "SkipProvider"]

log = logging.getLogger("kopek.llm.cascade")  # one logger for every part of the cascade

#: Anomalies settled at the hold's ceiling (flagged estimated) instead of as reported.
_AT_CEILING = frozenset({"missing", "invalid", "inconsistent", "implausible"})
#: Anomalies told to admins (once per key and kind) that cool a paid key down.
_TOLD = frozenset({"implausible", "input_over_bound", "output_over_max_tokens"})
#: Characters that show nothing (zero-width space/joiners, word joiner, BOM).
_INVISIBLE = dict.fromkeys(map(ord, "\u200b\u200c\u200d\u2060\ufeff\u00ad"))


class SkipProvider(Exception):
    """Pass over this provider without a request (not an attempt; the cascade's own
    signal, never raised out of it).

    Attributes:
        reason: ``budget`` (a free key's hold refused), ``open`` (the circuit refused:
            cooling, or its trial taken) or ``paced`` (a shared paced window had no room).
        refusal: the ledger's refusal, for ``budget``.
    """

    def __init__(self, reason: str, refusal: HoldRefused | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.refusal = refusal


class GovernedAttempt:
    """Runs one attempt under the ledger, the breaker, pacing and the call slots.

    Args:
        ledger: holds, settles and releases.
        config: ``timeout_s`` + ``timeout_grace_s`` (the backstop deadline) and the
            streaming timeouts.
        count: the token counter.
        keys: per-key circuits and free keys' token windows (the cascade's; in this
            process, or shared by the deployment's processes).
        slots: global call slots (the cascade's).
        sizer: plan sizing and calibration.
        ladder: the paid anchor's degradation ladder.
        telemetry: counters and admin events.
    """

    __slots__ = (
        "_anomalies_told",
        "_config",
        "_count",
        "_keys",
        "_ladder",
        "_ledger",
        "_sizer",
        "_slots",
        "_telemetry",
    )

    def __init__(
        self,
        *,
        ledger: LedgerPort,
        config: CascadeConfig,
        count: TokenCounter,
        keys: KeyAdmission,
        slots: CallSlots,
        sizer: Sizer,
        ladder: DegradationLadder,
        telemetry: Telemetry,
    ) -> None:
        self._ledger = ledger
        self._config = config
        self._count = count
        self._keys = keys
        self._slots = slots
        self._sizer = sizer
        self._ladder = ladder
        self._telemetry = telemetry
        self._anomalies_told: set[tuple[str, str]] = set()

    def __repr__(self) -> str:
        return f"GovernedAttempt(slots={self._slots!r})"

    async def run(
        self,
        op: OperationTicket,
        request_id: str | RequestTicket,
        provider: Provider,
        request: LLMRequest,
        input_tokens: int,
        is_anchor: bool,
        passed: list[str],
        stream: StreamControl | None = None,
    ) -> Completion:
        """The attempt's answer, settled.

        Args:
            op: the operation charged.
            request_id: this request: counted by the first hold it is passed to
                (a :class:`~budget.protocol.RequestTicket`), or by ``begin_request``.
            provider: the key tried.
            request: the request.
            input_tokens: the token counter's count of ``request.messages``.
            is_anchor: ``provider`` is the paid anchor (tried even while open).
            passed: providers passed over so far (``name:reason``), for ``fallbacks``.
            stream: stream the answer when ``provider`` can.

        Raises:
            SkipProvider: passed over without a request.
            HoldRefused: the ledger refused (after the ladder, for the anchor).
            ProviderError: the attempt failed (hold settled or released).
            EmptyCompletion: answered with no usable text (settled as billed).
        """
        model = request.model or provider.model
        if request.small and request.model is None:  # the router's choice: the key's small model
            model = self._config.cheap_models.get(provider.name) or provider.model
        plan = AttemptPlan(
            request.messages, model, request.max_tokens, 0, [], origin=request.origin
        )
        if request.tools and isinstance(provider, ToolCallingProvider):
            plan.tools, stream = request.tools, None  # a step with tools is one piece
        await self._sizer.size(plan, provider.name, input_tokens)
        plan.add_media(media_tokens_of(provider, plan.messages))
        async with self._slots.slot(request.priority):
            hold = await self._hold(op, request_id, provider, request, plan, is_anchor)
            await self._open_key(provider, plan, hold, is_anchor)
            self._telemetry.record_call(provider.name, is_anchor)
            completion = await self._call(provider, plan, hold, stream)
            completion, usage, anomaly = _judge(plan, completion, _possible(provider, plan))
            sample = await self._sample(provider, plan, completion, anomaly)
            # the last answer (not one asking for tools) ends it in its settle (decision 132)
            answered = not completion.tool_calls and (
                completion.stopped or _usable(completion.text)
            )
            ends = op if request.ends_operation and answered else None
            cost, ended = await self._settle_answer(
                hold, usage, anomaly in _AT_CEILING or completion.estimated, ends, sample
            )
        await self._keys.succeeded(provider.name, completion.rate_limits, cut=completion.stream_cut)
        await self._learn(provider, plan, completion, anomaly, cost)
        return replace(
            completion,
            cost_musd=cost,
            paid=provider.paid,
            degraded=tuple(plan.degraded),
            fallbacks=tuple(passed),
            hold_id=hold.hold_id,
            max_tokens=plan.max_tokens,
            operation_ended=ended,
        )

    async def _hold(
        self,
        op: OperationTicket,
        request_id: str | RequestTicket,
        provider: Provider,
        request: LLMRequest,
        plan: AttemptPlan,
        is_anchor: bool,
    ) -> HoldTicket:
        """Hold ``plan`` at ``provider``; a paid key refused for a limit is passed over,
        the paid anchor goes down the degradation ladder.

        Raises:
            SkipProvider: ``budget`` (a paid key that is not the anchor).
            HoldRefused: the ledger refused (after the ladder, for the anchor).
        """
        try:
            return await reserve(self._ledger, op, request_id, provider, plan)
        except HoldRefused as refused:
            if refused.refusal.reason not in LADDER_REASONS or not provider.paid:
                raise
            if not is_anchor:
                raise SkipProvider("budget", refused) from None
            return await self._ladder.degrade(op, request_id, provider, request, plan, refused)

    async def _open_key(
        self, provider: Provider, plan: AttemptPlan, hold: HoldTicket, is_anchor: bool
    ) -> None:
        """Ask the key's circuit and paced window; the hold is released when the key
        refuses (not the anchor, which is tried even while open) or the ask fails.

        Raises:
            SkipProvider: ``open`` or ``paced``.
        """
        tokens = None if provider.paid else plan.input_tokens + plan.max_tokens
        try:
            verdict = await self._keys.begin(provider.name, tokens)
        except BaseException:
            await self._release(hold)
            raise
        if verdict and not is_anchor:
            await self._release(hold)
            raise SkipProvider(verdict)

    async def _call(
        self,
        provider: Provider,
        plan: AttemptPlan,
        hold: HoldTicket,
        stream: StreamControl | None,
    ) -> Completion:
        """The provider call under the backstop deadline (streamed when asked and
        possible); a failure settles what it billed, settles interrupted, or releases.

        Raises:
            ProviderError: the call failed (``ProviderUnavailable`` interrupted past the
                deadline).
        """
        progress: StreamProgress | None = None
        try:
            async with asyncio.timeout(self._config.timeout_s + self._config.timeout_grace_s):
                if stream is not None and isinstance(provider, StreamingProvider):
                    progress = StreamProgress()
                    return await streamed_call(
                        provider,
                        plan,
                        stream,
                        config=self._config,
                        count=self._count,
                        progress=progress,
                    )
                model = None if plan.model == provider.model else plan.model
                if plan.tools and isinstance(provider, ToolCallingProvider):
                    return await provider.complete(
                        plan.messages, plan.max_tokens, model, tools=plan.tools
                    )
                return await provider.complete(plan.messages, plan.max_tokens, model)
        except ProviderError as exc:
            if exc.billed_usage is not None:
                await self._settle_billed(hold, exc.billed_usage)
            elif isinstance(exc, ProviderUnavailable) and exc.interrupted:
                await self._settle_interrupted(hold, plan, exc.partial_usage)
            else:
                await self._release(hold)
            if exc.rate_limits is not None and not provider.paid:
                await self._keys.observe(provider.name, exc.rate_limits)
            raise
        except TimeoutError:
            await self._settle_interrupted(hold, plan, None)
            raise ProviderUnavailable(
                provider.name, "total deadline exceeded (cascade backstop)", interrupted=True
            ) from None
        except BaseException:
            # cancellation (shutdown, user gone) or a client bug: the call may have
            # been billed, so the interrupted-call rule applies — a stream's by what
            # it received (as a stop), a one-piece call's at the ceiling
            await self._keys.cancel(provider.name)
            received = None
            if progress is not None and stream is not None:
                received = await cancelled_usage(
                    plan, stream, progress, self._count, self._config.token_safety_factor
                )
            await self._settle_interrupted(hold, plan, received)
            raise

    async def _settle_answer(
        self,
        hold: HoldTicket,
        usage: Usage,
        estimated: bool,
        ends: OperationTicket | None,
        sample: CalibrationSample | None,
    ) -> tuple[int, bool]:
        """Settle an answer (ending ``ends`` and persisting ``sample`` in the same
        ledger step); the µUSD booked and whether ``ends`` was ended (its ceiling and
        ``False`` when the settle failed: the answer exists and was paid for, and the
        hold stays booked at its ceiling until the sweeper expires it, so that upper
        bound is reported)."""
        try:
            cost = await self._ledger.settle(
                hold.hold_id, usage, estimated=estimated, ends=ends, calibration=sample
            )
        except BudgetError:
            log.exception("settle of hold %s failed", hold.hold_id)
            return hold.ceiling_musd, False
        return cost, ends is not None

    async def _sample(
        self, provider: Provider, plan: AttemptPlan, completion: Completion, anomaly: str
    ) -> CalibrationSample | None:
        """The estimate calibration learnt from the provider's own report of the input
        (above the bound too: that raises the estimate); ``None`` for a usage settled
        at the ceiling or estimated."""
        if completion.estimated or anomaly in _AT_CEILING:
            return None
        self._telemetry.count_estimate_error(completion.usage.input_tokens - plan.input_tokens)
        return await self._sizer.calibrate(provider.name, plan, completion.usage.input_tokens)

    async def _learn(
        self, provider: Provider, plan: AttemptPlan, completion: Completion, anomaly: str, cost: int
    ) -> None:
        """Tell the usage anomaly (the calibration was settled with the answer).

        Raises:
            EmptyCompletion: the answer has no usable text (it is billed: ``cost``).
        """
        if anomaly:
            await self._usage_anomaly(provider, plan, completion, anomaly)
        if not completion.stopped and not completion.tool_calls and not _usable(completion.text):
            self._telemetry.count_empty(provider.name)
            log.warning(
                "empty completion from %s (finish_reason=%s), %d µUSD booked",
                provider.name,
                completion.finish_reason,
                cost,
            )
            raise EmptyCompletion(provider.name, completion.finish_reason, cost)

    async def _usage_anomaly(
        self, provider: Provider, plan: AttemptPlan, completion: Completion, kind: str
    ) -> None:
        name = provider.name
        self._telemetry.count_anomaly(name, kind)
        u = completion.usage
        log.warning(
            "usage anomaly at %s/%s: %s (reported input=%d output=%d; held input=%d"
            " max_tokens=%d)%s",
            name,
            plan.model,
            kind,
            u.input_tokens,
            u.output_tokens,
            plan.input_tokens,
            plan.max_tokens,
            "; settled at the ceiling, estimated" if kind in _AT_CEILING else "",
        )
        if kind not in _TOLD:
            return
        if provider.paid:  # a free key's cooldown would send its users to the paid anchor
            until = await self._keys.rate_limited(name, None, reason="usage_anomaly")
            if until is not None:
                await self._telemetry.cooldown_opened(name, "usage_anomaly", until, True)
        if (name, kind) not in self._anomalies_told:
            self._anomalies_told.add((name, kind))
            detail = _anomaly_detail(kind, plan, completion)
            detail += (
                "; the key is cooling down"
                if provider.paid
                else "; a free key is not cooled (its users would go to the paid anchor)"
            )
            await self._telemetry.emit(CascadeEvent("usage_anomaly", name, detail))

    async def _release(self, hold: HoldTicket) -> None:
        try:
            await self._ledger.release(hold.hold_id)
        except BudgetError:
            log.exception("release of hold %s failed; the sweeper will expire it", hold.hold_id)

    async def _settle_billed(self, hold: HoldTicket, usage: Usage) -> None:
        """A failure that still reports usage (an error object in a 200 with usage):
        settle what the provider says it billed."""
        try:
            await self._ledger.settle(hold.hold_id, usage)
        except BudgetError:
            log.exception("settle of hold %s failed; the sweeper will book it", hold.hold_id)

    async def _settle_interrupted(
        self, hold: HoldTicket, plan: AttemptPlan, reported: Usage | None
    ) -> None:
        """The ledger's rule for interrupted calls: the provider's reported usage (or,
        for a stream, what it received) if any, else the ceiling (estimated)."""
        usage = reported or Usage(input_tokens=plan.input_tokens, output_tokens=plan.max_tokens)
        try:
            await self._ledger.settle(hold.hold_id, usage, estimated=True)
        except BudgetError:
            log.exception("estimated settle of hold %s failed", hold.hold_id)


def _possible(provider: Provider, plan: AttemptPlan) -> int:
    """The most tokens the attempt's model can bill for it (context window + max_tokens;
    never below Kopek's own bound)."""
    window = max(provider.context_window_tokens, plan.input_bound)
    return possible_tokens(provider.name, plan.model, window, plan.max_tokens)


def _anomaly_detail(kind: str, plan: AttemptPlan, completion: Completion) -> str:
    """What admins are told about a usage anomaly (before what became of the key)."""
    u = completion.usage
    if kind == "implausible":
        return (
            f"reported {u.input_tokens}+{u.output_tokens} tokens, more than model "
            f"{plan.model} can do (its context window + max_tokens {plan.max_tokens}); "
            "booked at the ceiling, estimated"
        )
    if kind == "input_over_bound":
        return (
            f"reported {u.input_tokens} input tokens for a prompt Kopek bounds at "
            f"{plan.input_bound} (held {plan.input_tokens}); booked as reported, the "
            "model's calibration raised"
        )
    if completion.estimated:
        return (
            f"streamed past max_tokens {plan.max_tokens}: {u.output_tokens} output tokens "
            "received (Kopek's count), the stream closed; booked as received"
        )
    return (
        f"billed {u.output_tokens} output tokens with max_tokens {plan.max_tokens}; "
        "booked as billed"
    )


def _judge(
    plan: AttemptPlan, completion: Completion, possible: int
) -> tuple[Completion, Usage, str]:
    """What to settle for an answer, and which anomaly (``""`` = none).

    Missing, unreadable or self-contradictory usage, and usage above ``possible`` tokens
    (what the model can bill at most), are settled at the hold's ceiling (estimated);
    output above ``max_tokens`` and input above the provable bound are settled as
    reported; a streamed report that was not final, at the text received (counted).
    An over-long text is cut.
    """
    text = completion.text
    limit = plan.max_tokens * MAX_CHARS_PER_TOKEN
    if len(text) > limit:
        completion = replace(completion, text=text[:limit], cut=True)
    ceiling = Usage(input_tokens=plan.input_tokens, output_tokens=plan.max_tokens)
    usage = completion.usage
    if completion.usage_issue in _AT_CEILING:
        return completion, ceiling, completion.usage_issue
    if usage.input_tokens + usage.output_tokens > possible:
        return completion, ceiling, "implausible"
    if completion.usage_issue:  # not_final: the text received, counted
        return completion, usage, completion.usage_issue
    if usage.output_tokens > plan.max_tokens:
        return completion, usage, "output_over_max_tokens"
    if usage.input_tokens > plan.input_bound:
        return completion, usage, "input_over_bound"
    return completion, usage, ""


def _usable(text: str) -> bool:
    """True when ``text`` has something besides white space and invisible characters."""
    return bool(text.translate(_INVISIBLE).strip())
