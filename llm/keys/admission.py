"""Admission state of every provider key — its circuit and its paced windows — kept in
this process, or shared by every process of a deployment through a store.

Without a store (SQLite, one process: the default) :class:`KeyAdmission` is a thin async
face of the cascade's :class:`~llm.keys.breaker.CircuitBreaker` and
:class:`~llm.keys.pacing.Pacer`, which hold the truth, exactly as before.

With a :class:`KeyStateStore` (PostgreSQL, several replicas: :mod:`llm.keys.postgres`) the
store's row of each key is the truth, and every change is one locked read-modify-write
of that row applying the same pure transitions (:func:`llm.keys.breaker.acquire`,
:func:`~llm.keys.breaker.open_circuit`, :func:`~llm.keys.pacing.observe`, …). Times in the rows
are epoch seconds of the injected clock (``clock.now()``), comparable across
processes; the breaker and pacer of each process *mirror* the rows (converted to
their monotonic base) for the synchronous readers (``/providers``, the digest
runner's capacity, the cascade's skip check). When the rows are read:

* at the start of each request (:meth:`KeyAdmission.refresh`, one query for every key):
  the skip check (open, paced) sees what every replica wrote until then;
* right before each call (:meth:`KeyAdmission.begin`, the row locked): the circuit may
  refuse (another replica's 429 opened it, or holds the half-open trial) and a free
  key's paced window is re-checked and consumed atomically — so a 429 that replica 1
  has written makes replicas 2 and 3 send nothing to that key until its cooldown
  ends, with no polling lag;
* after each call (:meth:`KeyAdmission.succeeded`, :meth:`~KeyAdmission.rate_limited`,
  :meth:`~KeyAdmission.failed`…): the outcome and the response's rate-limit headers are
  written through.

Shared semantics beyond the in-memory ones: the half-open trial is one per deployment
and has a lease (``trial_lease_s``; a replica that died holding it does not block the
key); a success closes a shared circuit only when its cooldown is over or this process
holds its trial (a 429 written by another replica meanwhile is newer evidence); a free
key's window is re-checked at :meth:`KeyAdmission.begin` (``share`` 1). Failures (5xx,
timeouts) are counted per process; the opening they cause is shared.

Errors: a store raises :class:`budget.errors.LedgerUnavailable` when it cannot be
read or written: :meth:`KeyAdmission.refresh`, :meth:`~KeyAdmission.begin` and
:meth:`~KeyAdmission.enable` let it through (fail closed: no call is sent); a change
after a call that cannot be written is logged and lost (the call has happened; the
ledger refuses the next one while the database is unreachable).
"""

from __future__ import annotations

import copy
import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

from budget.errors import BudgetError
from budget.kernel.clock import Clock
from llm.keys import breaker as circuits
from llm.keys import pacing as paces
from llm.keys.breaker import Circuit, CircuitBreaker, cooldown_seconds
from llm.keys.pacing import KeyPace, Pacer
from llm.types import RateLimitInfo

__all__ = ["Changed", "KeyAdmission", "KeyStateStore", "SharedKey"]

T = TypeVar("T")

log = logging.getLogger("kopek.llm.cascade")  # one logger for every part of the cascade


@dataclass(slots=True)
class SharedKey:
    """One provider key's shared row; times are epoch seconds.

    Attributes:
        circuit: its circuit (``failures`` unused: counted per process).
        pace: its paced windows (``last`` rebuilt from the stored raw headers).
        disabled: ``"auth"`` / ``"balance"`` while disabled until ``/providers enable``;
            ``""`` when enabled.
    """

    circuit: Circuit = field(default_factory=Circuit)
    pace: KeyPace = field(default_factory=KeyPace)
    disabled: str = ""


@dataclass(frozen=True, slots=True)
class Changed(Generic[T]):
    """What :meth:`KeyStateStore.change` did to one key's row.

    Attributes:
        result: what the transition returned.
        row: the row after it (a copy: changing it changes nothing stored).
    """

    result: T
    row: SharedKey


class KeyStateStore(Protocol):
    """Where the shared rows live (:class:`llm.keys.postgres.PgKeyStates`)."""

    async def read(self, names: Sequence[str]) -> dict[str, SharedKey]:
        """The rows of ``names`` that exist (a missing key is closed and unpaced).

        Raises:
            budget.errors.LedgerUnavailable: the store cannot be read.
        """
        ...

    async def change(self, name: str, fn: Callable[[SharedKey], T]) -> Changed[T]:
        """Lock ``name``'s row (created when missing), apply ``fn`` to it, write it back
        if it changed; one transaction. Returns ``fn``'s result and the row after it.

        Raises:
            budget.errors.LedgerUnavailable: the store cannot be written.
        """
        ...


class KeyAdmission:
    """The circuits and paced windows of every key (module docstring).

    Args:
        breaker: the cascade's breaker (the truth without a store, a mirror with one).
        pacer: the cascade's pacer (likewise).
        clock: the one clock (``monotonic`` for the mirror, ``now`` for the rows).
        store: shared rows; ``None`` = this process only.
        trial_lease_s: how long a shared half-open trial is held at most, seconds
            (the call's own deadline and grace, plus slack).
    """

    __slots__ = ("_breaker", "_clock", "_disabled", "_pacer", "_store", "_trials", "trial_lease_s")

    def __init__(
        self,
        breaker: CircuitBreaker,
        pacer: Pacer,
        clock: Clock,
        store: KeyStateStore | None = None,
        *,
        trial_lease_s: float = 90.0,
    ) -> None:
        self._breaker = breaker
        self._pacer = pacer
        self._clock = clock
        self._store = store
        self.trial_lease_s = trial_lease_s
        self._trials: set[str] = set()
        self._disabled: dict[str, str] = {}

    def __repr__(self) -> str:
        where = "shared" if self._store is not None else "local"
        return f"KeyAdmission({where}, trials={sorted(self._trials)})"

    @property
    def shared(self) -> bool:
        """The state is shared through a store."""
        return self._store is not None

    def shared_disabled(self) -> dict[str, str]:
        """Keys the shared rows say are disabled (``name → reason``), as last read."""
        return dict(self._disabled)

    # -- reading -------------------------------------------------------------------
    async def refresh(self, names: Sequence[str]) -> None:
        """Mirror the shared rows of ``names`` (no-op without a store)."""
        if self._store is None:
            return
        rows = await self._store.read(names)
        for name in names:
            self._adopt(name, rows.get(name) or SharedKey())

    # -- before a call ---------------------------------------------------------------
    async def begin(self, name: str, tokens: int | None) -> str:
        """May the call go to ``name`` now? Takes the half-open trial when the cooldown
        is over, and for a free key (``tokens`` = input + max_tokens; ``None`` for a
        paid one) consumes its paced window.

        Returns:
            ``""`` (go), ``"open"`` (the circuit refuses: cooling, or another caller
            holds the trial) or, shared only, ``"paced"`` (the window has no room now).
            A paid key's call may go on ``"open"`` (the anchor is the last resort).
        """
        if self._store is None:
            granted = self._breaker.try_acquire(name)
            if granted and tokens is not None:
                self._pacer.consume(name, tokens)
            return "" if granted else "open"
        lease = self.trial_lease_s

        def step(row: SharedKey) -> str:
            now = self._epoch()
            if tokens is not None and paces.exceeds(row.pace, now, tokens):
                return "paced"
            granted = circuits.acquire(row.circuit, now, lease)
            if granted and tokens is not None:
                paces.consume(row.pace, now, tokens)
            return granted or "open"

        verdict = await self._change(name, step)
        if verdict == "trial":
            self._trials.add(name)
        return "" if verdict in ("trial", "closed") else verdict

    async def cancel(self, name: str) -> None:
        """Hand back a half-open trial that sent no request."""
        if self._store is None:
            self._breaker.cancel(name)
            return
        if name not in self._trials:
            return
        self._trials.discard(name)

        def step(row: SharedKey) -> None:
            row.circuit.trial_until = None

        await self._record(name, step)

    # -- after a call ----------------------------------------------------------------
    async def succeeded(self, name: str, info: RateLimitInfo | None, *, cut: bool = False) -> None:
        """The provider answered (``cut``: a stream broke off after text was shown,
        counted as a failure); ``info`` = the response's rate-limit headers."""
        if cut:
            await self.failed(name)
        if self._store is None:
            if not cut:
                self._breaker.record_success(name)
            if info is not None:
                self._pacer.observe(name, info)
            return
        held = name in self._trials
        if not cut:
            self._trials.discard(name)
            self._breaker.circuit(name).failures.clear()
        window = self._pacer.default_window_s

        def step(row: SharedKey) -> None:
            now = self._epoch()
            c = row.circuit
            if not cut and (c.open_until is None or held or now >= c.open_until):
                circuits.close(c)
            if info is not None:
                paces.observe(row.pace, now, info, window)

        await self._record(name, step)

    async def observe(self, name: str, info: RateLimitInfo) -> None:
        """Record a failed response's rate-limit headers."""
        if self._store is None:
            self._pacer.observe(name, info)
            return
        if not info.raw and info.remaining_tokens is None and info.remaining_requests is None:
            return
        window = self._pacer.default_window_s
        await self._record(name, lambda row: paces.observe(row.pace, self._epoch(), info, window))

    async def rate_limited(
        self, name: str, retry_after_s: float | None, *, reason: str = "rate_limited"
    ) -> float | None:
        """A 429 (or exhausted quota, or a usage anomaly): open for the provider's own
        wait, clamped (:func:`llm.keys.breaker.cooldown_seconds`); never shortened.

        Returns:
            The monotonic end of the cooldown when this call opened or lengthened it;
            ``None`` when a longer one was already running.
        """
        if self._store is None:
            before = self._breaker.open_until(name)
            until = self._breaker.record_rate_limited(name, retry_after_s, reason=reason)
            return until if until != before else None
        b = self._breaker
        seconds = cooldown_seconds(retry_after_s, b.cooldown_s, b.cooldown_max_s)
        return await self._open(name, seconds, reason)

    async def failed(self, name: str) -> float | None:
        """A 5xx, timeout or connection failure (counted in this process).

        Returns:
            The monotonic end of the cooldown when this failure opened the circuit.
        """
        if not self._breaker.record_failure(name):
            return None
        until = self._breaker.open_until(name)
        if self._store is None:
            return until
        self._trials.discard(name)
        reason = self._breaker.circuit(name).reason
        seconds = max(0.0, (until or 0.0) - self._clock.monotonic())
        return await self._open(name, seconds, reason)

    async def disable(self, name: str, reason: str) -> None:
        """Mark ``name`` disabled (auth, balance) for every process; its trial ends."""
        if self._store is None:
            self._breaker.cancel(name)
            return
        self._trials.discard(name)

        def step(row: SharedKey) -> None:
            row.circuit.trial_until = None
            row.disabled = reason

        await self._record(name, step)

    async def enable(self, name: str) -> bool:
        """Clear a shared disable; True when the row said disabled (always False
        without a store: the cascade keeps that in its own set)."""
        if self._store is None:
            return False

        def step(row: SharedKey) -> bool:
            was = bool(row.disabled)
            row.disabled = ""
            return was

        return await self._change(name, step)

    # -- mirror ------------------------------------------------------------------------
    async def _open(self, name: str, seconds: float, reason: str) -> float | None:
        def step(row: SharedKey) -> str:
            now = self._epoch()
            return circuits.open_circuit(row.circuit, now, now + seconds, reason)

        self._trials.discard(name)
        kind = await self._record(name, step)
        return self._breaker.open_until(name) if kind else None

    async def _change(self, name: str, fn: Callable[[SharedKey], T]) -> T:
        assert self._store is not None
        changed = await self._store.change(name, fn)
        self._adopt(name, changed.row)
        return changed.result

    async def _record(self, name: str, fn: Callable[[SharedKey], T]) -> T | None:
        """:meth:`_change` after a call: a store failure is logged, not raised."""
        try:
            return await self._change(name, fn)
        except BudgetError:
            log.warning("shared state of key %s not written (storage failure)", name)
            return None

    def _epoch(self) -> float:
        return self._clock.now().timestamp()

    def _adopt(self, name: str, row: SharedKey) -> None:
        """Mirror ``row`` (epoch times) into the breaker and pacer (monotonic)."""
        offset = self._clock.monotonic() - self._epoch()

        def mono(t: float | None) -> float | None:
            return None if t is None or math.isinf(t) else t + offset

        c = row.circuit
        trial = c.trial_until
        if trial is not None and name not in self._trials:
            trial = mono(trial)  # another process's trial: its lease
        elif trial is not None:
            trial = math.inf  # ours: held until its outcome, as in memory
        self._breaker.adopt(name, mono(c.open_until), trial, c.reason)
        pace = copy.copy(row.pace)
        pace.tokens_reset_at = mono(pace.tokens_reset_at)
        pace.requests_reset_at = mono(pace.requests_reset_at)
        self._pacer.adopt(name, pace)
        if row.disabled:
            self._disabled[name] = row.disabled
        else:
            self._disabled.pop(name, None)
