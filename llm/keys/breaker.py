"""Circuit breaker per provider key: a pure closed / open / half-open state machine.

Time is the injected clock's monotonic reading (seconds); tests move a manual
clock (``tests/support/clocks.py``) instead of sleeping. Every transition is appended
to :attr:`CircuitBreaker.events` so tests and the admin view can read the history.

Timeline with ``cooldown_s=600``, ``cooldown_max_s=3600``, ``failure_threshold=3``,
``failure_window_s=60``::

    t=0     429, no Retry-After      → open until 600 (COOLDOWN_SECONDS)
    t=100   429, Retry-After 5       → still open until 600 (a cooldown never shortens)
    t=300   try_acquire()            → False (skipped without a request)
    t=600   try_acquire()            → True: half-open, this caller holds the one trial
    t=600   try_acquire()            → False (the trial is in flight)
    t=601   record_success()         → closed
    t=700, 710, 720  three 5xx       → open until 1320 (3 failures within 60 s)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import StrEnum

from budget.kernel.clock import Clock

__all__ = [
    "BreakerEvent",
    "Circuit",
    "CircuitBreaker",
    "CircuitState",
    "acquire",
    "close",
    "cooldown_seconds",
    "open_circuit",
]


def cooldown_seconds(retry_after_s: float | None, default_s: float, max_s: float) -> float:
    """The cooldown a 429 imposes, seconds: the provider's own wait when given and
    finite, clamped to [1, ``max_s``]; ``default_s`` when none (or ``inf``/``nan``)."""
    if retry_after_s is None or not math.isfinite(retry_after_s):
        return default_s
    return min(max(retry_after_s, 1.0), max(max_s, 1.0))


class CircuitState(StrEnum):
    """State of one key's circuit."""

    CLOSED = "closed"  # requests flow
    OPEN = "open"  # skipped without a request until the cooldown ends
    HALF_OPEN = "half_open"  # cooldown over; one trial request decides


@dataclass(frozen=True, slots=True)
class BreakerEvent:
    """One transition.

    Attributes:
        key: provider key name.
        kind: ``opened``, ``extended`` (an open circuit's cooldown lengthened),
            ``half_open`` (trial granted), ``closed``.
        at: monotonic time of the transition, seconds.
        until: end of the cooldown (monotonic seconds) for ``opened``/``extended``.
        reason: ``rate_limited``, ``quota``, ``failures``, ``trial_failed``, or ``""``.
    """

    key: str
    kind: str
    at: float
    until: float | None = None
    reason: str = ""


@dataclass(slots=True)
class Circuit:
    """One key's circuit: the record the transitions below act on (in this process's
    memory for :class:`CircuitBreaker`, or a shared row, :mod:`llm.keys.admission`).

    Attributes:
        open_until: end of the cooldown (seconds on the caller's time base; ``None`` =
            closed).
        trial_until: the half-open trial is held until then (``math.inf``: until its
            outcome is reported; a shared row gives it a lease so that a holder that
            died does not block the key); ``None`` = no trial.
        reason: why it opened (``BreakerEvent.reason``).
        failures: times of recent failures (this process's count only).
    """

    open_until: float | None = None
    trial_until: float | None = None
    reason: str = ""
    failures: list[float] = field(default_factory=list)

    def trial_live(self, now: float) -> bool:
        """A trial is held at ``now``."""
        return self.trial_until is not None and now < self.trial_until

    def available(self, now: float) -> bool:
        """Would :func:`acquire` grant a request at ``now``? (No side effect.)"""
        if self.open_until is None:
            return True
        return not self.trial_live(now) and now >= self.open_until


def acquire(circuit: Circuit, now: float, lease_s: float = math.inf) -> str:
    """May a request go now? ``"closed"`` (yes), ``"trial"`` (yes: the cooldown is over
    and this caller now holds the one half-open trial, for ``lease_s`` seconds or until
    its outcome), ``""`` (no: open, or another caller holds the trial)."""
    if circuit.open_until is None:
        return "closed"
    if not circuit.available(now):
        return ""
    circuit.trial_until = now + lease_s
    return "trial"


def open_circuit(circuit: Circuit, now: float, until: float, reason: str) -> str:
    """Open ``circuit`` until ``until`` (a running longer cooldown is kept: never
    shortened); any trial ends. Returns ``"opened"``, ``"extended"`` (an open
    circuit's cooldown lengthened) or ``""`` (kept as it was)."""
    circuit.trial_until = None
    current = circuit.open_until
    if current is not None and current >= until:
        return ""
    kind = "extended" if current is not None and current > now else "opened"
    circuit.open_until = until
    circuit.reason = reason
    return kind


def close(circuit: Circuit) -> bool:
    """Close ``circuit`` and forget its failures; True when it was open."""
    circuit.failures.clear()
    if circuit.open_until is None:
        return False
    circuit.open_until = None
    circuit.trial_until = None
    circuit.reason = ""
    return True


class CircuitBreaker:
    """Breakers for any number of keys, sharing one configuration.

    Args:
        clock: monotonic time source.
        cooldown_s: open time after a 429 that names no wait, or after repeated
            failures, seconds (COOLDOWN_SECONDS; tests pass small values or 0).
        cooldown_max_s: the longest wait a provider's own Retry-After may impose,
            seconds (COOLDOWN_MAX_SECONDS).
        failure_threshold: failures (5xx, timeouts) within ``failure_window_s`` that open it.
        failure_window_s: sliding window for counting failures, seconds.
    """

    __slots__ = (
        "_circuits",
        "_clock",
        "cooldown_max_s",
        "cooldown_s",
        "events",
        "failure_threshold",
        "failure_window_s",
    )

    def __init__(
        self,
        clock: Clock,
        *,
        cooldown_s: float = 600.0,
        failure_threshold: int = 3,
        failure_window_s: float = 60.0,
        cooldown_max_s: float = 3600.0,
    ) -> None:
        self._clock = clock
        self.cooldown_s = cooldown_s
        self.cooldown_max_s = cooldown_max_s
        self.failure_threshold = failure_threshold
        self.failure_window_s = failure_window_s
        self._circuits: dict[str, Circuit] = {}
        self.events: list[BreakerEvent] = []

    def _get(self, key: str) -> Circuit:
        circuit = self._circuits.get(key)
        if circuit is None:
            circuit = self._circuits[key] = Circuit()
        return circuit

    def circuit(self, key: str) -> Circuit:
        """The record of ``key`` (live: :meth:`adopt` and the transitions change it)."""
        return self._get(key)

    def adopt(
        self, key: str, open_until: float | None, trial_until: float | None, reason: str
    ) -> None:
        """Take a shared row's state for ``key`` (times on this breaker's monotonic
        base); the failure count stays this process's. No event is recorded: the
        transition was another process's (or already recorded)."""
        circuit = self._get(key)
        circuit.open_until = open_until
        circuit.trial_until = trial_until
        circuit.reason = reason

    def state(self, key: str) -> CircuitState:
        """Current state of ``key`` (an expired cooldown reads as half-open)."""
        circuit = self._get(key)
        if circuit.open_until is None:
            return CircuitState.CLOSED
        now = self._clock.monotonic()
        if circuit.trial_live(now) or now >= circuit.open_until:
            return CircuitState.HALF_OPEN
        return CircuitState.OPEN

    def cooldown_remaining_s(self, key: str) -> float:
        """Seconds until ``key`` may be tried again (0 when closed or half-open)."""
        circuit = self._get(key)
        if circuit.open_until is None:
            return 0.0
        return max(0.0, circuit.open_until - self._clock.monotonic())

    def open_until(self, key: str) -> float | None:
        """Monotonic end of the current cooldown, ``None`` when closed."""
        return self._get(key).open_until

    def available(self, key: str) -> bool:
        """Would :meth:`try_acquire` succeed now? (No side effect.)"""
        return self._get(key).available(self._clock.monotonic())

    def try_acquire(self, key: str) -> bool:
        """May a request go to ``key`` now?

        Closed: always. Open: no. Cooldown over: the first caller gets the single
        half-open trial (and must report its outcome with a ``record_*`` method or
        hand it back with :meth:`cancel`); others get ``False`` until it ends.
        """
        granted = acquire(self._get(key), self._clock.monotonic())
        if granted == "trial":
            self.events.append(BreakerEvent(key, "half_open", self._clock.monotonic()))
        return granted != ""

    def cancel(self, key: str) -> None:
        """Hand back a half-open trial that sent no request (no outcome)."""
        self._get(key).trial_until = None

    def record_success(self, key: str) -> None:
        """The provider answered: close the circuit and forget failures."""
        if close(self._get(key)):
            self.events.append(BreakerEvent(key, "closed", self._clock.monotonic()))

    def record_rate_limited(
        self, key: str, retry_after_s: float | None, *, reason: str = "rate_limited"
    ) -> float:
        """A 429 (or exhausted quota): open for the provider's own wait.

        ``retry_after_s`` (Retry-After or a reset header), when given and finite, is
        clamped to [1 s, ``cooldown_max_s``]; without one, ``cooldown_s``. An existing
        longer cooldown is kept (never shortened).

        Returns:
            The monotonic end of the cooldown now in force.
        """
        seconds = cooldown_seconds(retry_after_s, self.cooldown_s, self.cooldown_max_s)
        return self._open(key, self._clock.monotonic() + seconds, reason)

    def record_failure(self, key: str) -> bool:
        """A 5xx, timeout or connection failure.

        Opens the circuit for ``cooldown_s`` when ``failure_threshold`` failures fall
        within ``failure_window_s``, or at once when it was the half-open trial.

        Returns:
            True when this failure opened (or re-opened) the circuit.
        """
        circuit = self._get(key)
        now = self._clock.monotonic()
        if circuit.trial_live(now):
            self._open(key, now + self.cooldown_s, "trial_failed")
            return True
        horizon = now - self.failure_window_s
        circuit.failures = [t for t in circuit.failures if t > horizon]
        circuit.failures.append(now)
        if len(circuit.failures) >= self.failure_threshold:
            circuit.failures.clear()
            self._open(key, now + self.cooldown_s, "failures")
            return True
        return False

    def _open(self, key: str, until: float, reason: str) -> float:
        circuit = self._get(key)
        now = self._clock.monotonic()
        kind = open_circuit(circuit, now, until, reason)
        if kind:
            self.events.append(BreakerEvent(key, kind, now, until=until, reason=reason))
        assert circuit.open_until is not None
        return circuit.open_until

    def __repr__(self) -> str:
        states = ", ".join(f"{k}={self.state(k).value}" for k in sorted(self._circuits))
        return f"CircuitBreaker({states})"
