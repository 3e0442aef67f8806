"""The free-first cascade: one request goes down the provider ladder, every attempt
governed by the ledger. The cascade has the shape of pydantic-ai's ``FallbackModel``:
it is called like one provider (``complete``), falls back only on the errors named in
``fallback_on``, and raises one error holding every failure.

Order is the constructor's: free tiers first (Groq key 1, Groq key 2, Mistral,
Cerebras), the paid anchor (DeepSeek) last. For one request::

    RequestTicket(fingerprint)        counted by its first hold (op caps, loop check), in
                                      that hold's step; by begin_request when none was asked
    for each provider key, at most once:
        skip without a request if: disabled (auth), breaker open, paced out,
            paid and not allow_paid, not serving the request's chosen model, prompt larger
            than its context window, past the payer's fair share of a free key (then the
            paid anchor too: llm.keys.shares)
        one governed attempt (llm.cascade.attempt): slot, hold (the paid anchor's
            refused hold goes down the degradation ladder, llm.cascade.degradation), call
            (streamed by llm.cascade.streamed when asked), settle or release
        success          → return (see llm.cascade.attempt for how usage is judged)
        blank text       → EmptyCompletion (billed, not an answer)
        429 / quota      → breaker open for the provider's Retry-After
                           (clamped to [1 s, COOLDOWN_MAX_SECONDS]) or COOLDOWN_SECONDS; next
        unavailable      → failure count; next
        auth failed, 402 → key disabled until enable(); admins notified once; next
        context too long → only a larger context window may try next
        other rejection  → raise (our request is wrong)
    nothing answered → AllProvidersFailed (every failure and skip attached)

Holds: the estimate held is the token counter's count × the model's calibration
(reported ÷ counted input, persisted by the ledger; :mod:`llm.cascade.plan`); the
ledger admits it only when its provable bound (:func:`budget.pricing.tokens.input_bound`:
UTF-8 bytes + a template allowance) fits, so a provider counting more than we did
never overshoots a limit.

Fallback happens on the errors in ``fallback_on`` (default :data:`FALLBACK_ON`:
:class:`~llm.errors.ProviderRateLimited`, :class:`~llm.errors.QuotaExhausted` (and so
:class:`~llm.errors.BalanceExhausted`), :class:`~llm.errors.ProviderUnavailable`,
:class:`~llm.errors.AuthFailed`, and :class:`~llm.errors.ContextTooLong` — to a larger
context window only); any other :class:`~llm.errors.ProviderError` is raised. Budget
refusals propagate unchanged as :class:`budget.errors.HoldRefused`. The paid anchor is
tried even while its breaker is open: when it is reached it is the last resort.

Parts: :mod:`llm.cascade.types` (config, events, status, stats),
:mod:`llm.cascade.telemetry` (counters, metrics, events), :mod:`llm.cascade.plan`
(hold sizing and calibration), :mod:`llm.cascade.attempt` (hold → call → settle),
:mod:`llm.cascade.streamed`, :mod:`llm.cascade.degradation`.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from prometheus_client import CollectorRegistry

from budget.errors import HoldRefused
from budget.kernel.clock import Clock
from budget.pricing.tokens import count_off_loop
from budget.protocol import LedgerPort, OperationTicket, RequestTicket
from llm.cascade.attempt import GovernedAttempt, SkipProvider
from llm.cascade.degradation import DegradationLadder
from llm.cascade.plan import Sizer, models_of
from llm.cascade.telemetry import Telemetry
from llm.cascade.types import (
    MAX_CHARS_PER_TOKEN,
    CascadeConfig,
    CascadeEvent,
    CascadeStats,
    EventSink,
    ProviderStatus,
    TokenCounter,
    fingerprint,
)
from llm.errors import (
    AuthFailed,
    BalanceExhausted,
    ContextTooLong,
    ProviderError,
    ProviderRateLimited,
    ProviderRejected,
    ProviderUnavailable,
    QuotaExhausted,
    nothing_answered,
    provider_wait,
)
from llm.keys.admission import KeyAdmission, KeyStateStore
from llm.keys.breaker import CircuitBreaker, CircuitState
from llm.keys.pacing import Pacer
from llm.keys.share_counts import ShareStore
from llm.keys.shares import FreeShares
from llm.keys.slots import CallClaimStore, CallSlots, DeploymentSlots, PrioritySlots
from llm.providers.base import Provider
from llm.stream import StreamControl
from llm.types import Capacity, Completion, LLMRequest

__all__ = [
    "FALLBACK_ON",
    "MAX_CHARS_PER_TOKEN",
    "Cascade",
    "CascadeConfig",
    "CascadeEvent",
    "CascadeStats",
    "EventSink",
    "ProviderStatus",
    "TokenCounter",
    "fingerprint",
]

log = logging.getLogger("kopek.llm.cascade")

#: Errors on which the cascade moves on to the next provider (``ContextTooLong`` only
#: to a provider with a larger context window). Any other ``ProviderError`` is raised.
FALLBACK_ON: tuple[type[ProviderError], ...] = (
    ProviderRateLimited,
    QuotaExhausted,
    ProviderUnavailable,
    AuthFailed,
    ContextTooLong,
)


class Cascade:
    """Provider keys in order behind one ``complete`` call.

    Args:
        providers: keys in cascade order, free first, the paid anchor last.
        ledger: the ledger every attempt reserves from.
        clock: time source (monotonic for breakers/pacing, wall-clock for "today").
        config: knobs.
        token_counter: ``messages → tokens`` upper-bound estimate (``budget.pricing.tokens``).
        on_event: admin notification sink (sync or async); its failures are logged,
            never raised into a user's request.
        registry: Prometheus registry for the metrics (a private one when ``None``;
            never the global default).
        absent: names of provider keys that are not configured (for :meth:`provider_status`).
        fallback_on: errors on which the next provider is tried (default
            :data:`FALLBACK_ON`); any other ``ProviderError`` is raised at once.
        key_store: the keys' circuits, paced windows and disables shared with the
            other processes of a deployment (:mod:`llm.keys.admission`); ``None`` = this
            process only.
        lease_store: leases that make ``global_max_inflight_calls`` the limit of the
            whole deployment (:class:`llm.keys.slots.DeploymentSlots`); ``None`` = this
            process's limit.
        share_store: FREE_SHARE_MAX's counts shared with the other processes
            (:mod:`llm.keys.share_counts`); ``None`` = this process's.

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
        fallback_on: tuple[type[ProviderError], ...] = FALLBACK_ON,
        key_store: KeyStateStore | None = None,
        lease_store: CallClaimStore | None = None,
        share_store: ShareStore | None = None,
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
        self._fallback_on = fallback_on
        self._absent = tuple(n for n in absent if n not in names)
        self.breaker = CircuitBreaker(
            clock,
            cooldown_s=config.cooldown_s,
            failure_threshold=config.breaker_failure_threshold,
            failure_window_s=config.breaker_failure_window_s,
            cooldown_max_s=config.cooldown_max_s,
        )
        self.pacer = Pacer(clock, default_window_s=config.pacing_window_s)
        self.shares = FreeShares(clock, config.day_tz, config.free_share_ppm, share_store)
        self.slots = PrioritySlots(config.global_max_inflight_calls)
        self.call_slots: CallSlots = (
            self.slots if lease_store is None else DeploymentSlots(self.slots, lease_store, clock)
        )
        # a shared half-open trial is held at most one call's deadline and grace, + 30 s
        self.keys = KeyAdmission(
            self.breaker,
            self.pacer,
            clock,
            key_store,
            trial_lease_s=config.timeout_s + config.timeout_grace_s + 30.0,
        )
        self._disabled: set[str] = set()
        self._telemetry = Telemetry(clock, config.day_tz, registry, on_event)
        sizer = Sizer(ledger, token_counter)
        self._attempt = GovernedAttempt(
            ledger=ledger,
            config=config,
            count=token_counter,
            keys=self.keys,
            slots=self.call_slots,
            sizer=sizer,
            ladder=DegradationLadder(ledger, clock, config, sizer, self._telemetry),
            telemetry=self._telemetry,
        )

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
        # counted (loop check, request cap) by its first hold, in that hold's step
        request_id = RequestTicket(request.fingerprint or fingerprint(request.messages))
        await self.refresh()
        input_tokens = request.input_tokens
        if input_tokens is None:
            input_tokens = await count_off_loop(self._count, request.messages)
        failures: list[ProviderError] = []
        skipped: list[tuple[str, str]] = []
        passed: list[str] = []
        context_floor = 0
        context_error: ContextTooLong | None = None
        budget_refusal: HoldRefused | None = None
        shares = await self.shares.asking(op)
        turned_away = False  # a free key was skipped for this request's share
        for provider in self._providers:
            is_anchor = provider is self.anchor
            reason = self._skip_reason(provider, request, input_tokens, context_floor, is_anchor)
            if reason is None and shares.who:
                tokens = input_tokens + request.max_tokens
                reason = self.shares.check(provider, shares, tokens, turned_away)
                turned_away = turned_away or reason is not None
            if reason is not None:
                self._skipped(provider.name, reason, skipped, passed)
                continue
            try:
                completion = await self._attempt.run(
                    op, request_id, provider, request, input_tokens, is_anchor, passed, stream
                )
                if not provider.paid:
                    self.shares.record(provider.name, shares, completion)
                return completion
            except SkipProvider as skip:
                self._skipped(provider.name, skip.reason, skipped, passed)
                if skip.refusal is not None:
                    budget_refusal = skip.refusal
                continue
            except ProviderError as exc:
                failures.append(exc)
                why = await self._after_failure(provider, exc)
                if not isinstance(exc, self._fallback_on):
                    raise
                if isinstance(exc, ContextTooLong):
                    context_floor = max(context_floor, provider.context_window_tokens)
                    context_error = exc
                passed.append(f"{provider.name}:{why}")
                continue
        share = HoldRefused(self.shares.refusal()) if turned_away else None
        if request_id.request_id is None:  # no hold was asked: counted still (a loop or
            await self._ledger.begin_request(op, request_id.fingerprint)  # cap refuses)
        raise nothing_answered(failures, skipped, context_error, budget_refusal, share)

    def _skipped(
        self, name: str, reason: str, skipped: list[tuple[str, str]], passed: list[str]
    ) -> None:
        """Key ``name`` passed over without an answer for ``reason`` (told in the
        request's ``skipped``/``passed`` lists and the skip counters)."""
        skipped.append((name, reason))
        passed.append(f"{name}:{reason}")
        self._telemetry.count_skip(name, reason)

    def enable(self, name: str) -> bool:
        """Re-enable a key disabled after an auth failure, in this process.

        Returns:
            True if it was disabled; False if unknown or already enabled.
        """
        if name not in self._disabled:
            return False
        self._disabled.discard(name)
        self._telemetry.emit_nowait(CascadeEvent("key_enabled", name))
        return True

    async def enable_key(self, name: str) -> bool:
        """Re-enable a key disabled after an auth or balance failure
        (``/providers enable NAME``): in this process and, when shared, for every
        process (their next request reads it).

        Returns:
            True if it was disabled; False if unknown or already enabled.

        Raises:
            budget.errors.LedgerUnavailable: the shared rows cannot be written.
        """
        here = self.enable(name)
        if not self.keys.shared:
            return here
        everywhere = await self.keys.enable(name)
        if everywhere and not here:
            self._telemetry.emit_nowait(CascadeEvent("key_enabled", name))
        return here or everywhere

    async def refresh(self) -> None:
        """Read the keys' shared state now (no-op when not shared): a process that
        made no request lately shows the deployment's circuits in ``/providers``.

        Raises:
            budget.errors.LedgerUnavailable: the shared rows cannot be read.
        """
        if not self.keys.shared:
            return
        await self.keys.refresh([p.name for p in self._providers])
        self._disabled = set(self.keys.shared_disabled())

    def is_enabled(self, name: str) -> bool:
        """False while ``name`` is disabled after an auth failure."""
        return name not in self._disabled

    def provider_status(self) -> list[ProviderStatus]:
        """Every provider key (configured ones in cascade order, then absent ones)."""
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
                calls_today=self._telemetry.calls_today(p.name),
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
        return self._telemetry.stats()

    async def aclose(self) -> None:
        """Close every client's connections."""
        for p in self._providers:
            await p.aclose()

    def __repr__(self) -> str:
        order = ", ".join(p.name for p in self._providers)
        return f"Cascade([{order}], slots={self.slots!r})"

    # ---------------------------------------------------------------- fallback

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
        if request.model is not None and request.model not in models_of(provider, self._config):
            return "model"
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

    async def _after_failure(self, provider: Provider, exc: ProviderError) -> str:
        """Update breaker/keys/counters after a failed attempt; returns the reason."""
        name = provider.name
        if isinstance(exc, BalanceExhausted):
            reason = "balance"
            await self.keys.disable(name, "balance")
            if name not in self._disabled:
                self._disabled.add(name)
                await self._telemetry.emit(CascadeEvent("key_disabled_balance", name, exc.detail))
        elif isinstance(exc, ProviderRateLimited | QuotaExhausted):
            reason = "rate_limited" if isinstance(exc, ProviderRateLimited) else "quota"
            until = await self.keys.rate_limited(name, provider_wait(exc), reason=reason)
            if until is not None:
                await self._telemetry.cooldown_opened(name, reason, until, provider.paid)
        elif isinstance(exc, ProviderUnavailable):
            reason = "unavailable"
            until = await self.keys.failed(name)
            if until is not None:
                await self._telemetry.cooldown_opened(name, "failures", until, provider.paid)
        elif isinstance(exc, AuthFailed):
            reason = "auth"
            await self.keys.disable(name, "auth")
            if name not in self._disabled:
                self._disabled.add(name)
                await self._telemetry.emit(CascadeEvent("key_disabled", name, exc.detail))
        elif isinstance(exc, ContextTooLong):
            reason = "context"
            await self.keys.succeeded(name, None)
        else:
            reason = "rejected"
            await self.keys.succeeded(name, None)
        if not isinstance(exc, ProviderRejected) or isinstance(exc, ContextTooLong):
            self._telemetry.count_fallback(name, reason)
        log.info("provider %s failed: %s", name, exc)
        return reason
