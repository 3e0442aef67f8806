"""The free-first cascade: one request goes down the provider ladder, every attempt
governed by the ledger.

Order is the constructor's: free tiers first (Groq key 1, Groq key 2, Mistral,
Cerebras), the paid anchor (DeepSeek) last. For one request::

    begin_request(op, fingerprint)                     once (op caps, loop check)
    for each provider key, at most once:
        skip without a request if: disabled (auth), breaker open, paced out,
            paid and not allow_paid, prompt larger than its context window
        wait for a global call slot (chat before digest)      — holds no money
        reserve(op, req, provider, model, input_tokens, max_tokens)
            paid anchor refused (limit/busy) → degradation ladder:
            (0) request.cheaper_messages (1) the anchor's cheap model
            (2) max_tokens shrunk to ledger.remaining_musd (≥ DEGRADED_MIN_OUTPUT_TOKENS)
            (3) re-raise the refusal
        call the provider (its own total deadline)
        success          → settle(usage); return (see "usage" below)
        blank text       → settle(usage); EmptyCompletion (billed, not an answer)
        429 / quota      → release; breaker open for the provider's Retry-After
                           (clamped to [1 s, COOLDOWN_MAX_SECONDS]) or COOLDOWN_SECONDS; next
        unavailable      → release (or settle estimated if interrupted); failure count; next
        auth failed, 402 → release; key disabled until enable(); admins notified once; next
        context too long → release; only a larger context window may try next
        other rejection  → release; raise (our request is wrong)
    nothing answered → AllProvidersFailed (every failure and skip attached)

Holds: the estimate held is the token counter's count × the model's calibration
(reported ÷ counted input, persisted by the ledger); the ledger admits it only when
its provable bound (:func:`budget.tokens.input_bound`: UTF-8 bytes + a template
allowance) fits, so a provider counting more than we did never overshoots a limit.

Usage: a report that is not a set of non-negative integers counts as missing →
settled at the bound ceiling, flagged estimated. More than 10× the ceiling's tokens
is implausible → booked at the ceiling, flagged, the key cooled, admins told. More
output than ``max_tokens`` → billed as reported, the key cooled, admins told once.
An answer longer than ``max_tokens`` × :data:`MAX_CHARS_PER_TOKEN` characters is cut.

Fallback happens on :class:`~llm.errors.ProviderRateLimited`,
:class:`~llm.errors.QuotaExhausted` and :class:`~llm.errors.ProviderUnavailable`
(``FALLBACK_ON``). Budget refusals propagate unchanged as
:class:`budget.errors.HoldRefused`. The paid anchor is tried even while its breaker
is open: when it is reached it is the last resort.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import inspect
import logging
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import date
from zoneinfo import ZoneInfo

from prometheus_client import CollectorRegistry
from prometheus_client import Counter as PromCounter
from prometheus_client import Histogram as PromHistogram

from budget.clock import Clock
from budget.errors import BudgetError, HoldRefused
from budget.protocol import HoldTicket, LedgerPort, OperationTicket
from budget.tokens import count_off_loop, input_bound
from budget.types import RefusalReason, Usage
from llm.breaker import CircuitBreaker, CircuitState
from llm.errors import (
    AllProvidersFailed,
    AuthFailed,
    BalanceExhausted,
    ContextTooLong,
    EmptyCompletion,
    ProviderError,
    ProviderRateLimited,
    ProviderRejected,
    ProviderUnavailable,
    QuotaExhausted,
)
from llm.pacing import Pacer
from llm.providers.base import Provider
from llm.slots import PrioritySlots
from llm.stream import StreamControl, StreamingProvider, StreamResult, pump
from llm.types import Capacity, Completion, LLMRequest, Message

__all__ = [
    "FALLBACK_ON",
    "IMPLAUSIBLE_FACTOR",
    "MAX_CHARS_PER_TOKEN",
    "Cascade",
    "CascadeConfig",
    "CascadeEvent",
    "CascadeStats",
    "ProviderStatus",
    "TokenCounter",
    "fingerprint",
]

log = logging.getLogger("kopek.llm.cascade")

#: Errors on which the cascade moves on to the next provider.
FALLBACK_ON: tuple[type[ProviderError], ...] = (
    ProviderRateLimited,
    QuotaExhausted,
    ProviderUnavailable,
)

#: Characters one output token can plausibly produce; a longer answer is cut.
MAX_CHARS_PER_TOKEN = 8
#: Reported tokens above this multiple of the hold's tokens are implausible.
IMPLAUSIBLE_FACTOR = 10
#: Calibration: samples before the estimate follows reported usage, the moving
#: average's weight of a new sample (1/8), and the head-room on the ratio (+10 %).
CALIBRATION_MIN_SAMPLES = 3
_CAL_WEIGHT = 8
_CAL_HEADROOM_PPM = 1_100_000
#: A free key parked this long or longer is worth telling admins about, seconds.
PARK_NOTICE_S = 3600.0

#: Refusal reasons the degradation ladder tries to work around.
_LADDER_REASONS = frozenset({RefusalReason.LIMIT, RefusalReason.BUSY})

TokenCounter = Callable[[Sequence[Message]], int]
EventSink = Callable[["CascadeEvent"], Awaitable[None] | None]


def fingerprint(messages: Sequence[Message]) -> str:
    """sha256 hex of the prompt (role and content of every message)."""
    digest = hashlib.sha256()
    for message in messages:
        digest.update(message.role.encode())
        digest.update(b"\x00")
        digest.update(message.content.encode())
        digest.update(b"\x01")
    return digest.hexdigest()


@dataclass(frozen=True, slots=True)
class CascadeConfig:
    """Knobs of the cascade (the composition root fills them from Settings).

    Attributes:
        timeout_s: PROVIDER_TIMEOUT_SECONDS. Each client enforces it; the cascade adds
            ``timeout_grace_s`` on top as a backstop for a client that does not.
        cooldown_s: COOLDOWN_SECONDS, open time after a 429 that names no wait, or
            after repeated failures.
        cooldown_max_s: COOLDOWN_MAX_SECONDS, the longest provider-named wait obeyed.
        breaker_failure_threshold: failures within the window that open a breaker.
        breaker_failure_window_s: that window, seconds.
        global_max_inflight_calls: GLOBAL_MAX_INFLIGHT_CALLS.
        degraded_min_output_tokens: DEGRADED_MIN_OUTPUT_TOKENS, the smallest max_tokens
            the ladder may shrink to.
        cheap_models: cheaper model per provider key (ladder step 1).
        day_tz: IANA zone in which "calls today" is counted (BUDGET_TZ).
        pacing_window_s: reset assumed when a provider gives no reset header, seconds.
        timeout_grace_s: see ``timeout_s``.
        first_token_timeout_s: PROVIDER_FIRST_TOKEN_TIMEOUT_SECONDS, a streamed call's
            wait for its first chunk.
        idle_timeout_s: PROVIDER_IDLE_TIMEOUT_SECONDS, the longest gap between chunks.
    """

    timeout_s: float = 60.0
    cooldown_s: float = 600.0
    cooldown_max_s: float = 3600.0
    breaker_failure_threshold: int = 3
    breaker_failure_window_s: float = 60.0
    global_max_inflight_calls: int = 8
    degraded_min_output_tokens: int = 128
    cheap_models: Mapping[str, str] = field(default_factory=dict)
    day_tz: str = "UTC"
    pacing_window_s: float = 60.0
    timeout_grace_s: float = 5.0
    first_token_timeout_s: float = 20.0
    idle_timeout_s: float = 20.0


@dataclass(frozen=True, slots=True)
class CascadeEvent:
    """Something admins may want to hear about.

    Attributes:
        kind: ``key_disabled`` (auth failure; once per disable), ``key_disabled_balance``
            (402 / balance error; once per disable), ``key_enabled``,
            ``cooldown_opened``, ``key_parked`` (a free key cooled longer than 1 h),
            ``usage_anomaly`` (output above max_tokens or implausible usage; once per
            key and kind), ``paid_anchor_call``, ``degraded``, ``degraded_refused``.
        provider: provider key name.
        detail: operator-facing text (never a key).
    """

    kind: str
    provider: str
    detail: str = ""


@dataclass(frozen=True, slots=True)
class ProviderStatus:
    """One provider key, for /providers and /budget.

    Attributes:
        name: key name.
        model: default model.
        paid: paid tier.
        present: a key is configured.
        enabled: not disabled by an auth failure.
        state: circuit state (``closed``/``open``/``half_open``).
        cooldown_remaining_s: seconds until it may be tried again.
        last_rate_limits: the rate-limit headers last seen.
        calls_today: attempts sent today (``day_tz``).
        remaining_tokens: pacing's view of its token window (``None`` = unknown).
    """

    name: str
    model: str
    paid: bool
    present: bool
    enabled: bool
    state: str
    cooldown_remaining_s: float
    last_rate_limits: dict[str, str]
    calls_today: int
    remaining_tokens: int | None


@dataclass(frozen=True, slots=True)
class CascadeStats:
    """Counters since start.

    Attributes:
        calls: attempts sent, per provider key.
        fallbacks: per provider key, per reason (``rate_limited``, ``quota``,
            ``unavailable``, ``auth``, ``context``), attempts that moved on.
        skips: per provider key, per reason, providers passed over without a request.
        cooldowns_opened: breaker openings (and extensions) per provider key.
        paid_anchor_calls: attempts sent to the paid anchor — to be kept at zero.
        degraded_steps: ladder steps applied, per step.
        estimate_error_tokens: per attempt, reported input tokens − counted input tokens.
    """

    calls: dict[str, int]
    fallbacks: dict[str, dict[str, int]]
    skips: dict[str, dict[str, int]]
    cooldowns_opened: dict[str, int]
    paid_anchor_calls: int
    degraded_steps: dict[str, int]
    estimate_error_tokens: tuple[int, ...]


class _Metrics:
    __slots__ = (
        "anomalies",
        "calls",
        "cooldowns",
        "degraded",
        "empty",
        "estimate",
        "fallbacks",
        "paid",
        "skips",
    )

    def __init__(self, registry: CollectorRegistry) -> None:
        self.calls = PromCounter(
            "kopek_llm_calls", "Provider attempts sent", ["provider"], registry=registry
        )
        self.fallbacks = PromCounter(
            "kopek_llm_fallbacks",
            "Attempts that failed over to the next provider",
            ["provider", "reason"],
            registry=registry,
        )
        self.skips = PromCounter(
            "kopek_llm_skips",
            "Providers passed over without a request",
            ["provider", "reason"],
            registry=registry,
        )
        self.cooldowns = PromCounter(
            "kopek_llm_cooldowns", "Circuit breaker openings", ["provider"], registry=registry
        )
        self.paid = PromCounter(
            "kopek_llm_paid_anchor_calls", "Attempts sent to the paid anchor", registry=registry
        )
        self.degraded = PromCounter(
            "kopek_llm_degraded_steps", "Degradation-ladder steps", ["step"], registry=registry
        )
        self.anomalies = PromCounter(
            "kopek_llm_usage_anomalies",
            "Usage reports not taken at face value (missing, invalid, implausible,"
            " output_over_max_tokens)",
            ["provider", "kind"],
            registry=registry,
        )
        self.empty = PromCounter(
            "kopek_llm_empty_completions",
            "Billed completions with no usable text",
            ["provider"],
            registry=registry,
        )
        self.estimate = PromHistogram(
            "kopek_llm_input_estimate_error_tokens",
            "Reported minus counted input tokens per attempt",
            buckets=(-1000, -200, -50, -10, 0, 10, 50, 200, 1000),
            registry=registry,
        )


@dataclass(slots=True)
class _Attempt:
    messages: tuple[Message, ...]
    model: str
    max_tokens: int
    input_tokens: int  # the estimate held (calibrated, never above the bound)
    degraded: list[str]
    input_bound: int = 0  # provable bound (budget.tokens.input_bound)
    counted: int = 0  # the token counter's own count (before calibration)


class Cascade:
    """Provider keys in order behind one ``complete`` call.

    Args:
        providers: keys in cascade order, free first, the paid anchor last.
        ledger: the ledger every attempt reserves from.
        clock: time source (monotonic for breakers/pacing, wall-clock for "today").
        config: knobs.
        token_counter: ``messages → tokens`` upper-bound estimate (``budget.tokens``).
        on_event: admin notification sink (sync or async); its failures are logged,
            never raised into a user's request.
        registry: Prometheus registry for the metrics (a private one when ``None``;
            never the global default).
        absent: names of provider keys that are not configured (for :meth:`provider_status`).

    Raises:
        ValueError: no providers, or two with the same name.
    """

    def __init__(
        self,
        providers: Sequence[Provider],
        ledger: LedgerPort,
        clock: Clock,
        config: CascadeConfig,
        token_counter: TokenCounter,
        *,
        on_event: EventSink | None = None,
        registry: CollectorRegistry | None = None,
        absent: Sequence[str] = (),
    ) -> None:
        if not providers:
            raise ValueError("a cascade needs at least one provider")
        names = [p.name for p in providers]
        if len(set(names)) != len(names):
            raise ValueError(f"duplicate provider names: {names}")
        self._providers: tuple[Provider, ...] = tuple(providers)
        self._ledger = ledger
        self._clock = clock
        self._config = config
        self._count = token_counter
        self._on_event = on_event
        self._absent = tuple(n for n in absent if n not in names)
        self._tz = ZoneInfo(config.day_tz)
        self.breaker = CircuitBreaker(
            clock,
            cooldown_s=config.cooldown_s,
            failure_threshold=config.breaker_failure_threshold,
            failure_window_s=config.breaker_failure_window_s,
            cooldown_max_s=config.cooldown_max_s,
        )
        self.pacer = Pacer(clock, default_window_s=config.pacing_window_s)
        self.slots = PrioritySlots(config.global_max_inflight_calls)
        self._disabled: set[str] = set()
        self._metrics = _Metrics(registry if registry is not None else CollectorRegistry())
        self._calls: Counter[str] = Counter()
        self._calls_today: Counter[str] = Counter()
        self._today: date | None = None
        self._fallbacks: dict[str, Counter[str]] = {}
        self._skips: dict[str, Counter[str]] = {}
        self._cooldowns: Counter[str] = Counter()
        self._paid_calls = 0
        self._degraded: Counter[str] = Counter()
        self._estimate_errors: list[int] = []
        self._tasks: set[asyncio.Future[None]] = set()
        self._calibration: dict[tuple[str, str], tuple[int, int]] | None = None
        self._anomalies_told: set[tuple[str, str]] = set()
        self._anomalies: Counter[str] = Counter()

    # ------------------------------------------------------------------ public

    @property
    def providers(self) -> tuple[Provider, ...]:
        """The provider keys in cascade order."""
        return self._providers

    @property
    def anchor(self) -> Provider | None:
        """The paid anchor (the last provider, when paid)."""
        last = self._providers[-1]
        return last if last.paid else None

    async def complete(
        self, op: OperationTicket, request: LLMRequest, *, stream: StreamControl | None = None
    ) -> Completion:
        """Serve one request down the cascade.

        Args:
            op: the admitted operation charged for every attempt.
            request: the prompt, ``max_tokens`` (> 0), ``allow_paid``, priority.
            stream: stream the answer: each attempt at a provider that can stream
                passes its text to ``stream.on_text`` as it grows, and
                ``stream.stop()`` ends it at once. A stopped answer, or one cut after
                ``stream.shown``, is returned as it stands (``stopped``/``stream_cut``)
                and settled on the tokens received; a cut before anything was shown
                falls through to the next provider.

        Returns:
            The first answer, with ``cost_musd`` (settled by the ledger), ``paid``,
            ``degraded`` (ladder steps) and ``fallbacks`` (providers passed over).

        Raises:
            HoldRefused: the ledger refused (request caps, kill, limits — after the
                degradation ladder for the paid anchor). Never wrapped.
            ProviderRejected: the request itself was rejected (no fallback), or
                :class:`ContextTooLong` when no larger context window was left.
            AllProvidersFailed: every key was skipped or unavailable.
            ValueError: ``max_tokens`` ≤ 0.
        """
        if request.max_tokens <= 0:
            raise ValueError("max_tokens must be positive: it is what bounds the ceiling")
        request_id = await self._ledger.begin_request(
            op, request.fingerprint or fingerprint(request.messages)
        )
        input_tokens = request.input_tokens
        if input_tokens is None:
            input_tokens = await count_off_loop(self._count, request.messages)
        failures: list[ProviderError] = []
        skipped: list[tuple[str, str]] = []
        passed: list[str] = []
        context_floor = 0
        context_error: ContextTooLong | None = None
        budget_refusal: HoldRefused | None = None
        for provider in self._providers:
            is_anchor = provider is self.anchor
            reason = self._skip_reason(provider, request, input_tokens, context_floor, is_anchor)
            if reason is not None:
                skipped.append((provider.name, reason))
                passed.append(f"{provider.name}:{reason}")
                self._count_skip(provider.name, reason)
                continue
            try:
                return await self._attempt(
                    op, request_id, provider, request, input_tokens, is_anchor, passed, stream
                )
            except _Skip as skip:
                skipped.append((provider.name, skip.reason))
                passed.append(f"{provider.name}:{skip.reason}")
                self._count_skip(provider.name, skip.reason)
                if skip.refusal is not None:
                    budget_refusal = skip.refusal
                continue
            except ProviderError as exc:
                failures.append(exc)
                why = await self._after_failure(provider, exc)
                if isinstance(exc, ContextTooLong):
                    context_floor = max(context_floor, provider.context_window_tokens)
                    context_error = exc
                elif isinstance(exc, ProviderRejected):
                    raise
                passed.append(f"{provider.name}:{why}")
                continue
        if context_error is not None and all(isinstance(e, ContextTooLong) for e in failures):
            raise context_error
        if budget_refusal is not None and not failures:
            raise budget_refusal
        raise AllProvidersFailed(failures, skipped)

    def enable(self, name: str) -> bool:
        """Re-enable a key disabled after an auth failure (/providers enable NAME).

        Returns:
            True if it was disabled; False if unknown or already enabled.
        """
        if name not in self._disabled:
            return False
        self._disabled.discard(name)
        self._emit_nowait(CascadeEvent("key_enabled", name))
        return True

    def is_enabled(self, name: str) -> bool:
        """False while ``name`` is disabled after an auth failure."""
        return name not in self._disabled

    def provider_status(self) -> list[ProviderStatus]:
        """Every provider key (configured ones in cascade order, then absent ones)."""
        self._roll_day()
        rows = [
            ProviderStatus(
                name=p.name,
                model=p.model,
                paid=p.paid,
                present=True,
                enabled=p.name not in self._disabled,
                state=self.breaker.state(p.name).value,
                cooldown_remaining_s=self.breaker.cooldown_remaining_s(p.name),
                last_rate_limits=self.pacer.last_headers(p.name),
                calls_today=self._calls_today[p.name],
                remaining_tokens=self.pacer.remaining_tokens(p.name),
            )
            for p in self._providers
        ]
        rows.extend(
            ProviderStatus(
                name=name,
                model="",
                paid=False,
                present=False,
                enabled=False,
                state=CircuitState.CLOSED.value,
                cooldown_remaining_s=0.0,
                last_rate_limits={},
                calls_today=0,
                remaining_tokens=None,
            )
            for name in self._absent
        )
        return rows

    def capacity(self) -> list[Capacity]:
        """What each key has left, for the digest runner's pacing.

        ``reset_at`` is the monotonic time when the key's cooldown or token window
        ends, whichever is later (``None`` = nothing pending).
        """
        out: list[Capacity] = []
        for p in self._providers:
            open_until = self.breaker.open_until(p.name)
            if open_until is not None and open_until <= self._clock.monotonic():
                open_until = None
            pace_reset = self.pacer.reset_at(p.name)
            resets = [t for t in (open_until, pace_reset) if t is not None]
            out.append(
                Capacity(
                    provider=p.name,
                    available=p.name not in self._disabled and self.breaker.available(p.name),
                    remaining_tokens=self.pacer.remaining_tokens(p.name),
                    reset_at=max(resets) if resets else None,
                    paid=p.paid,
                )
            )
        return out

    def stats(self) -> CascadeStats:
        """A snapshot of the counters."""
        return CascadeStats(
            calls=dict(self._calls),
            fallbacks={k: dict(v) for k, v in self._fallbacks.items()},
            skips={k: dict(v) for k, v in self._skips.items()},
            cooldowns_opened=dict(self._cooldowns),
            paid_anchor_calls=self._paid_calls,
            degraded_steps=dict(self._degraded),
            estimate_error_tokens=tuple(self._estimate_errors),
        )

    async def aclose(self) -> None:
        """Close every client's connections."""
        for p in self._providers:
            await p.aclose()

    def __repr__(self) -> str:
        order = ", ".join(p.name for p in self._providers)
        return f"Cascade([{order}], slots={self.slots!r})"

    # ----------------------------------------------------------------- attempt

    def _skip_reason(
        self,
        provider: Provider,
        request: LLMRequest,
        input_tokens: int,
        context_floor: int,
        is_anchor: bool,
    ) -> str | None:
        if provider.name in self._disabled:
            return "disabled"
        if provider.paid and not request.allow_paid:
            return "paid_not_allowed"
        if provider.context_window_tokens <= context_floor:
            return "context"
        if input_tokens >= provider.context_window_tokens:
            return "context"
        if not is_anchor and not self.breaker.available(provider.name):
            return "open"
        if not provider.paid and self.pacer.would_exceed(
            provider.name, input_tokens + request.max_tokens, request.free_share
        ):
            return "paced"
        return None

    async def _attempt(
        self,
        op: OperationTicket,
        request_id: str,
        provider: Provider,
        request: LLMRequest,
        input_tokens: int,
        is_anchor: bool,
        passed: list[str],
        stream: StreamControl | None = None,
    ) -> Completion:
        plan = _Attempt(request.messages, provider.model, request.max_tokens, 0, [])
        await self._size(plan, provider.name, input_tokens)
        async with self.slots.slot(request.priority):
            try:
                hold = await self._reserve(op, request_id, provider, plan)
            except HoldRefused as refused:
                if refused.refusal.reason not in _LADDER_REASONS or not provider.paid:
                    raise
                if not is_anchor:
                    raise _Skip("budget", refused) from None
                hold = await self._degrade(op, request_id, provider, request, plan, refused)
            trial = self.breaker.try_acquire(provider.name)
            if not trial and not is_anchor:
                await self._release(hold)
                raise _Skip("open")
            if not provider.paid:
                self.pacer.consume(provider.name, plan.input_tokens + plan.max_tokens)
            self._record_call(provider, is_anchor)
            try:
                async with asyncio.timeout(self._config.timeout_s + self._config.timeout_grace_s):
                    if stream is not None and isinstance(provider, StreamingProvider):
                        completion = await self._streamed(provider, plan, stream)
                    else:
                        completion = await provider.complete(
                            plan.messages,
                            plan.max_tokens,
                            None if plan.model == provider.model else plan.model,
                        )
            except ProviderError as exc:
                if exc.billed_usage is not None:
                    await self._settle_billed(hold, exc.billed_usage)
                elif isinstance(exc, ProviderUnavailable) and exc.interrupted:
                    await self._settle_interrupted(hold, plan, exc.partial_usage)
                else:
                    await self._release(hold)
                if exc.rate_limits is not None and not provider.paid:
                    self.pacer.observe(provider.name, exc.rate_limits)
                raise
            except TimeoutError:
                await self._settle_interrupted(hold, plan, None)
                raise ProviderUnavailable(
                    provider.name, "total deadline exceeded (cascade backstop)", interrupted=True
                ) from None
            except BaseException:
                # cancellation (shutdown, user gone) or a client bug: the call may have
                # been billed, so the interrupted-call rule applies
                self.breaker.cancel(provider.name)
                await self._settle_interrupted(hold, plan, None)
                raise
            if completion.stopped or completion.stream_cut:
                usage, anomaly = completion.usage, ""  # settled on what was received
            else:
                completion, usage, anomaly = self._judge(plan, completion)
            try:
                cost = await self._ledger.settle(
                    hold.hold_id, usage, estimated=anomaly in _AT_CEILING or completion.estimated
                )
            except BudgetError:
                # the answer exists and was paid for; the hold stays booked at its
                # ceiling until the sweeper expires it, so report that upper bound
                log.exception("settle of hold %s failed", hold.hold_id)
                cost = hold.ceiling_musd
        if completion.stream_cut:
            self.breaker.record_failure(provider.name)
        else:
            self.breaker.record_success(provider.name)
        self.pacer.observe(provider.name, completion.rate_limits)
        if anomaly:
            await self._usage_anomaly(provider, plan, completion, anomaly)
        elif completion.estimated:
            pass  # Kopek's own count: nothing to calibrate against
        else:
            error = completion.usage.input_tokens - plan.input_tokens
            self._estimate_errors.append(error)
            self._metrics.estimate.observe(error)
            await self._calibrate(provider.name, plan, completion.usage.input_tokens)
        if not completion.stopped and not _usable(completion.text):
            self._metrics.empty.labels(provider=provider.name).inc()
            log.warning(
                "empty completion from %s (finish_reason=%s), %d µUSD booked",
                provider.name,
                completion.finish_reason,
                cost,
            )
            raise EmptyCompletion(provider.name, completion.finish_reason, cost)
        return replace(
            completion,
            cost_musd=cost,
            paid=provider.paid,
            degraded=tuple(plan.degraded),
            fallbacks=tuple(passed),
            hold_id=hold.hold_id,
            max_tokens=plan.max_tokens,
        )

    async def _streamed(
        self, provider: StreamingProvider, plan: _Attempt, control: StreamControl
    ) -> Completion:
        """One streamed call, read to its end, a stop or a cut.

        Returns the completion (a stopped one, or one cut after text was shown, with
        ``usage`` = what to settle: the provider's report if it came, else the input
        held plus the output received as counted, × the safety factor, never above
        ``max_tokens``; flagged ``estimated``).

        Raises:
            ProviderError: the request failed before the stream began; or a cut before
                any text was shown (``ProviderUnavailable``: interrupted with the tokens
                received when any arrived, else not interrupted — the hold is released).
        """
        model = None if plan.model == provider_model(provider) else plan.model
        if control.stopped.is_set():  # stopped before anything was sent: nothing spent
            return self._stopped_unsent(provider, plan, control)
        opening = asyncio.ensure_future(provider.stream(plan.messages, plan.max_tokens, model))
        stopper = asyncio.ensure_future(control.stopped.wait())
        try:
            await asyncio.wait({opening, stopper}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopper.cancel()
            if not opening.done():
                opening.cancel()  # the request's connection is closed
                with contextlib.suppress(asyncio.CancelledError, ProviderError):
                    await opening
        if opening.cancelled():
            usage = Usage(input_tokens=plan.input_tokens)  # it may have read the prompt
            return replace(
                self._stopped_unsent(provider, plan, control), usage=usage, estimated=True
            )
        opened = opening.result()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._config.timeout_s
        result = await pump(
            opened,
            control,
            first_token_s=self._config.first_token_timeout_s,
            idle_s=self._config.idle_timeout_s,
            deadline=deadline,
        )
        if result.ended == "complete":
            return Completion(
                text=result.text,
                finish_reason=result.finish_reason or "unknown",
                provider=provider.name,
                model=result.model,
                usage=result.usage or Usage(),
                rate_limits=opened.rate_limits,
                usage_issue=result.usage_issue if result.usage is None else "",
            )
        usage, estimated = await self._received_usage(plan, result)
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
        self, provider: StreamingProvider, plan: _Attempt, control: StreamControl
    ) -> Completion:
        return Completion(
            text="",
            finish_reason="stopped",
            provider=provider.name,
            model=plan.model,
            usage=Usage(),
            stopped=control.reason or "user",
        )

    async def _received_usage(self, plan: _Attempt, result: StreamResult) -> tuple[Usage, bool]:
        """What an interrupted stream is settled at, and whether that is Kopek's
        estimate: the provider's report when it came, else the input held plus the
        output received (counted × the safety factor, at least one token per chunk),
        never above ``max_tokens``."""
        if result.usage is not None:
            return result.usage, False
        counted = (
            await count_off_loop(self._count, [Message("assistant", result.text)])
            if result.text
            else 0
        )
        output = min(plan.max_tokens, max(counted, result.chunks))
        return Usage(input_tokens=plan.input_tokens, output_tokens=output), True

    # ------------------------------------------------------- estimate and usage

    async def _size(self, plan: _Attempt, provider: str, counted: int | None = None) -> None:
        """Fill ``plan``'s counted tokens, provable bound and calibrated estimate."""
        if counted is None:
            counted = await count_off_loop(self._count, plan.messages)
        plan.counted = counted
        plan.input_bound = input_bound(plan.messages)
        plan.input_tokens = min(
            await self._estimate(provider, plan.model, plan.counted), plan.input_bound
        )

    async def _calibrations(self) -> dict[tuple[str, str], tuple[int, int]]:
        if self._calibration is None:
            try:
                self._calibration = dict(await self._ledger.calibration())
            except BudgetError:
                log.warning("estimate calibration could not be read; using raw counts")
                return {}
        return self._calibration

    async def _estimate(self, provider: str, model: str, counted: int) -> int:
        """``counted`` × the model's reported ÷ counted ratio (+10 %), once calibrated."""
        ratio, samples = (await self._calibrations()).get((provider, model), (0, 0))
        if samples < CALIBRATION_MIN_SAMPLES or ratio <= 0:
            return counted
        return max(1, -(-counted * ratio * _CAL_HEADROOM_PPM // 10**12))

    async def _calibrate(self, provider: str, plan: _Attempt, reported: int) -> None:
        """Fold one reported input count into the model's ratio (persisted)."""
        if plan.counted <= 0 or reported <= 0:
            return
        table = await self._calibrations()
        sample = reported * 1_000_000 // plan.counted
        ratio, samples = table.get((provider, plan.model), (0, 0))
        ratio = sample if samples == 0 else (ratio * (_CAL_WEIGHT - 1) + sample) // _CAL_WEIGHT
        table[(provider, plan.model)] = (ratio, samples + 1)
        try:
            await self._ledger.record_calibration(provider, plan.model, ratio, samples + 1)
        except BudgetError:
            log.warning("estimate calibration of %s/%s not persisted", provider, plan.model)

    def _judge(self, plan: _Attempt, completion: Completion) -> tuple[Completion, Usage, str]:
        """What to settle for a 200 answer, and which anomaly (``""`` = none).

        Missing or unreadable usage, and usage above :data:`IMPLAUSIBLE_FACTOR` × the
        hold's tokens, are settled at the hold's ceiling (estimated); output above
        ``max_tokens`` is settled as billed. An over-long text is cut.
        """
        text = completion.text
        limit = plan.max_tokens * MAX_CHARS_PER_TOKEN
        if len(text) > limit:
            completion = replace(completion, text=text[:limit], cut=True)
        ceiling = Usage(input_tokens=plan.input_tokens, output_tokens=plan.max_tokens)
        usage = completion.usage
        if completion.usage_issue:
            return completion, ceiling, completion.usage_issue
        if usage.input_tokens + usage.output_tokens > IMPLAUSIBLE_FACTOR * (
            plan.input_bound + plan.max_tokens
        ):
            return completion, ceiling, "implausible"
        if usage.output_tokens > plan.max_tokens:
            return completion, usage, "output_over_max_tokens"
        return completion, usage, ""

    async def _usage_anomaly(
        self, provider: Provider, plan: _Attempt, completion: Completion, kind: str
    ) -> None:
        name = provider.name
        self._anomalies[kind] += 1
        self._metrics.anomalies.labels(provider=name, kind=kind).inc()
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
        if kind not in _COOL_ON:
            return
        before = self.breaker.open_until(name)
        until = self.breaker.record_rate_limited(name, None, reason="usage_anomaly")
        if until != before:
            await self._cooldown_opened(name, "usage_anomaly", until, provider.paid)
        if (name, kind) not in self._anomalies_told:
            self._anomalies_told.add((name, kind))
            if kind == "implausible":
                detail = (
                    f"reported {u.input_tokens}+{u.output_tokens} tokens for a hold of "
                    f"{plan.input_tokens}+{plan.max_tokens}; booked at the ceiling"
                )
            else:
                detail = (
                    f"billed {u.output_tokens} output tokens with max_tokens "
                    f"{plan.max_tokens}; booked as billed"
                )
            await self._emit(CascadeEvent("usage_anomaly", name, detail))

    async def _reserve(
        self, op: OperationTicket, request_id: str, provider: Provider, plan: _Attempt
    ) -> HoldTicket:
        return await self._ledger.reserve(
            op,
            request_id,
            provider=provider.name,
            model=plan.model,
            input_tokens=plan.input_tokens,
            max_tokens=plan.max_tokens,
            input_bound_tokens=plan.input_bound,
        )

    async def _degrade(
        self,
        op: OperationTicket,
        request_id: str,
        provider: Provider,
        request: LLMRequest,
        plan: _Attempt,
        refused: HoldRefused,
    ) -> HoldTicket:
        """Ladder for the paid anchor's refused hold; mutates ``plan`` step by step."""
        last = refused
        tried: list[str] = []

        async def step(name: str) -> HoldTicket | None:
            nonlocal last
            tried.append(name)
            self._degraded[name] += 1
            self._metrics.degraded.labels(step=name).inc()
            try:
                hold = await self._reserve(op, request_id, provider, plan)
            except HoldRefused as again:
                if again.refusal.reason not in _LADDER_REASONS:
                    raise
                last = again
                return None
            plan.degraded = list(tried)
            return hold

        if request.cheaper_messages is not None and request.cheaper_messages != plan.messages:
            plan.messages = request.cheaper_messages
            await self._size(plan, provider.name)
            if (hold := await step("cheaper_messages")) is not None:
                return await self._degraded_event(provider, hold, tried)
        cheap = self._config.cheap_models.get(provider.name)
        if cheap and cheap != plan.model:
            plan.model = cheap
            if (hold := await step("cheap_model")) is not None:
                return await self._degraded_event(provider, hold, tried)
        remaining = await self._ledger.remaining_musd(op, provider.name)
        if remaining is not None:
            # sized on the provable bound: the shrunk hold can never overshoot
            fit = self._ledger.prices.max_tokens_within(
                provider.name, plan.model, plan.input_bound, remaining, self._clock.now()
            )
            if self._config.degraded_min_output_tokens <= fit < plan.max_tokens:
                plan.max_tokens = fit
                if (hold := await step("shrunk_max_tokens")) is not None:
                    return await self._degraded_event(provider, hold, tried)
        self._degraded["refused"] += 1
        self._metrics.degraded.labels(step="refused").inc()
        await self._emit(
            CascadeEvent("degraded_refused", provider.name, " → ".join([*tried, "refused"]))
        )
        raise last

    async def _degraded_event(
        self, provider: Provider, hold: HoldTicket, tried: list[str]
    ) -> HoldTicket:
        await self._emit(CascadeEvent("degraded", provider.name, " → ".join(tried)))
        return hold

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
        self, hold: HoldTicket, plan: _Attempt, reported: Usage | None
    ) -> None:
        """The ledger's rule for interrupted calls: the provider's reported usage if
        any, else (no output counted for a non-streaming call) the ceiling."""
        usage = reported or Usage(input_tokens=plan.input_tokens, output_tokens=plan.max_tokens)
        try:
            await self._ledger.settle(hold.hold_id, usage, estimated=True)
        except BudgetError:
            log.exception("estimated settle of hold %s failed", hold.hold_id)

    async def _after_failure(self, provider: Provider, exc: ProviderError) -> str:
        """Update breaker/keys/counters after a failed attempt; returns the reason."""
        name = provider.name
        if isinstance(exc, BalanceExhausted):
            reason = "balance"
            self.breaker.cancel(name)
            if name not in self._disabled:
                self._disabled.add(name)
                await self._emit(CascadeEvent("key_disabled_balance", name, exc.detail))
        elif isinstance(exc, ProviderRateLimited | QuotaExhausted):
            reason = "rate_limited" if isinstance(exc, ProviderRateLimited) else "quota"
            before = self.breaker.open_until(name)
            until = self.breaker.record_rate_limited(name, _provider_wait(exc), reason=reason)
            if until != before:
                await self._cooldown_opened(name, reason, until, provider.paid)
        elif isinstance(exc, ProviderUnavailable):
            reason = "unavailable"
            if self.breaker.record_failure(name):
                until = self.breaker.open_until(name) or self._clock.monotonic()
                await self._cooldown_opened(name, "failures", until, provider.paid)
        elif isinstance(exc, AuthFailed):
            reason = "auth"
            self.breaker.cancel(name)
            if name not in self._disabled:
                self._disabled.add(name)
                await self._emit(CascadeEvent("key_disabled", name, exc.detail))
        elif isinstance(exc, ContextTooLong):
            reason = "context"
            self.breaker.record_success(name)
        else:
            reason = "rejected"
            self.breaker.record_success(name)
        if not isinstance(exc, ProviderRejected) or isinstance(exc, ContextTooLong):
            self._fallbacks.setdefault(name, Counter())[reason] += 1
            self._metrics.fallbacks.labels(provider=name, reason=reason).inc()
        log.info("provider %s failed: %s", name, exc)
        return reason

    async def _cooldown_opened(self, name: str, reason: str, until: float, paid: bool) -> None:
        self._cooldowns[name] += 1
        self._metrics.cooldowns.labels(provider=name).inc()
        remaining = max(0.0, until - self._clock.monotonic())
        await self._emit(CascadeEvent("cooldown_opened", name, f"{reason}, {remaining:.0f} s"))
        if not paid and remaining >= PARK_NOTICE_S:
            await self._emit(CascadeEvent("key_parked", name, f"{reason}, {remaining:.0f} s"))

    # ---------------------------------------------------------------- counters

    def _roll_day(self) -> None:
        today = self._clock.now().astimezone(self._tz).date()
        if today != self._today:
            self._today = today
            self._calls_today.clear()

    def _record_call(self, provider: Provider, is_anchor: bool) -> None:
        self._roll_day()
        self._calls[provider.name] += 1
        self._calls_today[provider.name] += 1
        self._metrics.calls.labels(provider=provider.name).inc()
        if is_anchor:
            self._paid_calls += 1
            self._metrics.paid.inc()
            self._emit_nowait(CascadeEvent("paid_anchor_call", provider.name))

    def _count_skip(self, name: str, reason: str) -> None:
        self._skips.setdefault(name, Counter())[reason] += 1
        self._metrics.skips.labels(provider=name, reason=reason).inc()

    async def _emit(self, event: CascadeEvent) -> None:
        if self._on_event is None:
            return
        try:
            result = self._on_event(event)
            if inspect.isawaitable(result):
                await result
        except Exception:
            log.exception("on_event handler failed for %s", event)

    def _emit_nowait(self, event: CascadeEvent) -> None:
        if self._on_event is None:
            return
        try:
            result = self._on_event(event)
        except Exception:
            log.exception("on_event handler failed for %s", event)
            return
        if inspect.isawaitable(result):
            try:
                task = asyncio.ensure_future(result)
            except RuntimeError:  # no running loop: nothing can deliver it
                log.warning("event %s dropped: no running event loop", event)
                return
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)


#: Anomalies settled at the hold's ceiling (flagged estimated) instead of as reported.
_AT_CEILING = frozenset({"missing", "invalid", "implausible"})
#: Anomalies that cool the key down and are told to admins (once per key and kind).
_COOL_ON = frozenset({"implausible", "output_over_max_tokens"})
#: Characters that show nothing (zero-width space/joiners, word joiner, BOM).
_INVISIBLE = dict.fromkeys(map(ord, "\u200b\u200c\u200d\u2060\ufeff\u00ad"))


def provider_model(provider: object) -> str | None:
    """A provider's default model (``None`` when it has none)."""
    model = getattr(provider, "model", None)
    return model if isinstance(model, str) else None


def _usable(text: str) -> bool:
    """True when ``text`` has something besides white space and invisible characters."""
    return bool(text.translate(_INVISIBLE).strip())


def _provider_wait(exc: ProviderRateLimited | QuotaExhausted) -> float | None:
    """The wait the provider named: Retry-After, else the reset of an exhausted
    window (``x-ratelimit-reset-*`` with nothing remaining); ``None`` = not said."""
    if exc.retry_after_s is not None:
        return exc.retry_after_s
    rl = exc.rate_limits
    if rl is None:
        return None
    resets = [
        reset
        for remaining, reset in (
            (rl.remaining_requests, rl.reset_requests_s),
            (rl.remaining_tokens, rl.reset_tokens_s),
        )
        if remaining == 0 and reset is not None
    ]
    return max(resets) if resets else None


class _Skip(Exception):
    """Internal: pass over this provider without a request (not an attempt)."""

    def __init__(self, reason: str, refusal: HoldRefused | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.refusal = refusal
