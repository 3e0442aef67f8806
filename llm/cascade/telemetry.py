"""The cascade's counters, Prometheus series and admin events.

:class:`Telemetry` is what every part of the cascade (the fallback loop, the governed
attempt, the degradation ladder) reports into: attempts per key and per day
(``day_tz``), skips, fallbacks, cooldowns, ladder steps, estimate errors and usage
anomalies, mirrored as ``kopek_llm_*`` series; and the admin event sink, whose failures
are logged, never raised into a user's request.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections import Counter
from datetime import date
from zoneinfo import ZoneInfo

from prometheus_client import CollectorRegistry
from prometheus_client import Counter as PromCounter
from prometheus_client import Histogram as PromHistogram

from budget.kernel.clock import Clock
from llm.cascade.types import PARK_NOTICE_S, CascadeEvent, CascadeStats, EventSink

__all__ = ["CascadeMetrics", "Telemetry"]

log = logging.getLogger("kopek.llm.cascade")  # one logger for every part of the cascade


class CascadeMetrics:
    """The cascade's Prometheus series, registered in one registry."""

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
            "Usage reports not taken at face value (missing, invalid, inconsistent,"
            " implausible, not_final: Kopek's figure booked; input_over_bound,"
            " output_over_max_tokens: booked as reported, flagged)",
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


class Telemetry:
    """Counters since start, their Prometheus mirror and the admin event sink.

    Args:
        clock: wall clock for "today"; monotonic clock for cooldown lengths.
        day_tz: IANA zone in which "calls today" is counted.
        registry: Prometheus registry (a private one when ``None``; never the global
            default).
        on_event: admin notification sink (sync or async), or ``None``.
    """

    __slots__ = (
        "_anomalies",
        "_calls",
        "_calls_today",
        "_clock",
        "_cooldowns",
        "_degraded",
        "_estimate_errors",
        "_fallbacks",
        "_on_event",
        "_paid_calls",
        "_skips",
        "_tasks",
        "_today",
        "_tz",
        "metrics",
    )

    def __init__(
        self,
        clock: Clock,
        day_tz: str,
        registry: CollectorRegistry | None,
        on_event: EventSink | None,
    ) -> None:
        self._clock = clock
        self._tz = ZoneInfo(day_tz)
        self._on_event = on_event
        self.metrics = CascadeMetrics(registry if registry is not None else CollectorRegistry())
        self._calls: Counter[str] = Counter()
        self._calls_today: Counter[str] = Counter()
        self._today: date | None = None
        self._fallbacks: dict[str, Counter[str]] = {}
        self._skips: dict[str, Counter[str]] = {}
        self._cooldowns: Counter[str] = Counter()
        self._paid_calls = 0
        self._degraded: Counter[str] = Counter()
        self._estimate_errors: list[int] = []
        self._anomalies: Counter[str] = Counter()
        self._tasks: set[asyncio.Future[None]] = set()

    def __repr__(self) -> str:
        return f"Telemetry(calls={sum(self._calls.values())}, paid={self._paid_calls})"

    # ------------------------------------------------------------ counters

    def calls_today(self, name: str) -> int:
        """Attempts sent to key ``name`` today (``day_tz``)."""
        self._roll_day()
        return self._calls_today[name]

    def record_call(self, name: str, is_anchor: bool) -> None:
        """One attempt sent to key ``name`` (the paid anchor's are told to admins)."""
        self._roll_day()
        self._calls[name] += 1
        self._calls_today[name] += 1
        self.metrics.calls.labels(provider=name).inc()
        if is_anchor:
            self._paid_calls += 1
            self.metrics.paid.inc()
            self.emit_nowait(CascadeEvent("paid_anchor_call", name))

    def count_skip(self, name: str, reason: str) -> None:
        """Key ``name`` passed over without a request."""
        self._skips.setdefault(name, Counter())[reason] += 1
        self.metrics.skips.labels(provider=name, reason=reason).inc()

    def count_fallback(self, name: str, reason: str) -> None:
        """An attempt at key ``name`` failed and the request moved on."""
        self._fallbacks.setdefault(name, Counter())[reason] += 1
        self.metrics.fallbacks.labels(provider=name, reason=reason).inc()

    def count_degraded(self, step: str) -> None:
        """One degradation-ladder step (or ``refused``) applied."""
        self._degraded[step] += 1
        self.metrics.degraded.labels(step=step).inc()

    def count_estimate_error(self, error_tokens: int) -> None:
        """Reported − counted input tokens of one attempt."""
        self._estimate_errors.append(error_tokens)
        self.metrics.estimate.observe(error_tokens)

    def count_anomaly(self, name: str, kind: str) -> None:
        """A usage report not taken at face value."""
        self._anomalies[kind] += 1
        self.metrics.anomalies.labels(provider=name, kind=kind).inc()

    def count_empty(self, name: str) -> None:
        """A billed completion with no usable text."""
        self.metrics.empty.labels(provider=name).inc()

    async def cooldown_opened(self, name: str, reason: str, until: float, paid: bool) -> None:
        """Key ``name``'s breaker opened (or was extended) until monotonic ``until``;
        a free key parked for :data:`PARK_NOTICE_S` or longer is told to admins too."""
        self._cooldowns[name] += 1
        self.metrics.cooldowns.labels(provider=name).inc()
        remaining = max(0.0, until - self._clock.monotonic())
        await self.emit(CascadeEvent("cooldown_opened", name, f"{reason}, {remaining:.0f} s"))
        if not paid and remaining >= PARK_NOTICE_S:
            await self.emit(CascadeEvent("key_parked", name, f"{reason}, {remaining:.0f} s"))

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

    def _roll_day(self) -> None:
        today = self._clock.now().astimezone(self._tz).date()
        if today != self._today:
            self._today = today
            self._calls_today.clear()

    # -------------------------------------------------------------- events

    async def emit(self, event: CascadeEvent) -> None:
        """Hand ``event`` to the sink and await it; a failing sink is logged."""
        if self._on_event is None:
            return
        try:
            result = self._on_event(event)
            if inspect.isawaitable(result):
                await result
        except Exception:
            log.exception("on_event handler failed for %s", event)

    def emit_nowait(self, event: CascadeEvent) -> None:
        """Hand ``event`` to the sink without waiting (an async sink runs as a task;
        with no running loop it is dropped with a warning)."""
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
