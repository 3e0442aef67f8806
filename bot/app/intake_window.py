"""How many updates are handled at once follows the event loop's lag (INTAKE_LAG_TARGET_MS).

A burst of new users (each update a dozen short steps: the profile touch, the ledger's
steps, the provider's answer, the reply) makes many task steps ready in the same loop
iteration; the iteration then runs them all before any timer, socket or other task gets
its turn, and the loop's *lag* (how late a due callback runs) grows with the number of
updates in flight. :class:`IntakeWindow` bounds that number with an AIMD window
(:class:`LagWindow`, pure policy): every :data:`PERIOD_S` the lag samples of a cheap
probe (:class:`LagProbe`, one :data:`PROBE_S` sleep at a time) are judged —

* **halve** (not below the floor) when the period's p99 lag is above the target *and*
  the loop thread was busy (its CPU time at least :data:`BUSY` of the period): lag the
  bot's own work causes, which fewer updates in flight reduce; a loop late while idle
  (the process descheduled on a loaded machine) is not cut, as fewer updates would not
  help it;
* **grow** (not above the ceiling, INTAKE_MAX_CONCURRENT) when the p99 is within the
  target and the window was full at some point of the period (it limited something):
  doubled until the first halving (a burst right after the start finds its size in a
  few periods), by one after it;
* otherwise keep it; after a halving one period is skipped (the updates admitted under
  the larger window are still leaving).

The window starts at the floor (:data:`FLOOR`, or the ceiling when that is lower): a burst
right after the start meets a small window that doubles as the lag allows; providers that
answer in seconds leave the loop idle, so a full window grows to the ceiling within a few
periods (and by one a period once it was halved). A window that is not full does not grow:
after a burst it keeps the size the lag allowed for the next one.

Updates beyond the window wait in FIFO order (:meth:`IntakeWindow.acquire`): none is
dropped and none overtakes another. A free slot goes to the oldest waiter, and a newcomer
passes without waiting only when no one waits and no woken waiter has yet resumed, so
the order in which updates reach the window is the order in which they leave it —
polling's tasks reach it (:class:`IntakeWindowMiddleware`, the first code of an
update's task that awaits) in Telegram's order, which
:class:`bot.middlewares.intake.ArrivalOrderMiddleware` then keeps per payer.

Time (``docs/architecture.md``, "one clock rule"): the probe is a background loop paced by
:meth:`Clock.sleep`, its lag and the periods are read on :meth:`Clock.monotonic` (a
pacing window); the loop thread's CPU time (``time.thread_time``, injected) is a
measure, not a clock that decides a wait. Under a :class:`tests.support.clocks.ManualClock`
the probe sees no lag.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from aiogram import BaseMiddleware
from aiogram.types import TelegramObject

from budget.kernel.clock import Clock

__all__ = [
    "BUSY",
    "FLOOR",
    "PERIOD_S",
    "PROBE_S",
    "IntakeWindow",
    "IntakeWindowMiddleware",
    "LagProbe",
    "LagWindow",
    "intake_window_of",
]

log = logging.getLogger(__name__)

#: The smallest window (updates in flight), unless INTAKE_MAX_CONCURRENT is lower: below
#: it the ledger's writer has too few steps to group into one commit (a burst's commits
#: per message went from 1.2 to 3.3 with 4-8 updates in flight, and its rate fell with them).
FLOOR = 8
#: Seconds of lag samples judged together.
PERIOD_S = 0.05
#: Seconds the probe sleeps between two samples (its lateness is the lag).
PROBE_S = 0.005
#: The loop thread's CPU share of a period from which its lag is taken for the bot's own.
BUSY = 0.25


def p99(samples: list[float]) -> float:
    """The 0.99-quantile of ``samples`` (nearest rank; 0.0 for none)."""
    if not samples:
        return 0.0
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]


class LagWindow:
    """The AIMD policy (module docstring): lag samples in, the window's size out.

    Args:
        floor: the smallest size (updates), ≥ 1.
        ceiling: the largest size (updates), ≥ ``floor``.
        target_s: the p99 lag (seconds) a period may reach without a halving.
        period_s: seconds of samples judged together.

    Raises:
        ValueError: ``floor`` < 1 or ``ceiling`` < ``floor``.
    """

    def __init__(
        self, *, floor: int, ceiling: int, target_s: float, period_s: float = PERIOD_S
    ) -> None:
        if floor < 1 or ceiling < floor:
            raise ValueError(f"window floor {floor}, ceiling {ceiling}: need 1 <= floor <= ceiling")
        self.floor, self.ceiling = floor, ceiling
        self.target_s, self.period_s = target_s, period_s
        self.limit = floor
        self._start: float | None = None
        self._cpu0 = 0.0
        self._lags: list[float] = []
        self._full = False
        self._skip = False
        self._doubling = True

    def __repr__(self) -> str:
        return f"LagWindow(limit={self.limit}, floor={self.floor}, ceiling={self.ceiling})"

    def observe(self, now: float, lag_s: float, *, cpu_s: float, full: bool) -> int:
        """One probe sample: ``now`` (monotonic s), its lateness ``lag_s`` (s), the loop
        thread's CPU time so far ``cpu_s`` (s), whether the window was full since the
        previous sample. Returns the window's size (changed at the end of a period)."""
        if self._start is None:
            self._start, self._cpu0 = now, cpu_s
        self._lags.append(max(0.0, lag_s))
        self._full = self._full or full
        span = now - self._start
        if span < self.period_s:
            return self.limit
        busy = (cpu_s - self._cpu0) / span if span > 0 else 0.0
        self._decide(p99(self._lags), busy)
        self._start, self._cpu0 = now, cpu_s
        self._lags.clear()
        self._full = False
        return self.limit

    def _decide(self, lag: float, busy: float) -> None:
        if self._skip:
            self._skip = False
        elif lag > self.target_s and busy >= BUSY:
            self._doubling = False
            if self.limit > self.floor:
                self.limit = max(self.floor, self.limit // 2)
                self._skip = True
        elif lag <= self.target_s and self._full:
            grown = self.limit * 2 if self._doubling else self.limit + 1
            self.limit = min(self.ceiling, grown)


class IntakeWindow:
    """A FIFO gate of a varying size: at most ``limit`` holders, the rest wait in order.

    ``policy`` sets the size (``None``: a fixed ``ceiling``, the gate is then a fair
    semaphore). Use :meth:`acquire` / :meth:`release` (the webhook's request and task),
    or ``async with window.slot()``; :meth:`observe` feeds the policy (the probe).
    """

    def __init__(self, ceiling: int, policy: LagWindow | None = None) -> None:
        self._policy = policy
        self.limit = policy.limit if policy is not None else ceiling
        self.active = 0
        #: updates that waited for a slot, since the start
        self.waited = 0
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._full = False

    def __repr__(self) -> str:
        return f"IntakeWindow(limit={self.limit}, active={self.active}, waiting={self.waiting})"

    @property
    def sized(self) -> bool:
        """True when a policy sizes the window (False: a fixed ``ceiling``)."""
        return self._policy is not None

    @property
    def waiting(self) -> int:
        """Updates waiting for a slot (woken ones not yet resumed included)."""
        return len(self._waiters)

    async def acquire(self) -> None:
        """Take a slot, waiting in FIFO order while the window is full.

        Raises:
            asyncio.CancelledError: cancelled while waiting (no slot is then held).
        """
        if not self._waiters and self.active < self.limit:
            self.active += 1
            self._full = self._full or self.active >= self.limit
            return
        self._full = True
        self.waited += 1
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():  # granted, then cancelled
                self.active -= 1
            self._waiters.remove(waiter)
            self._wake()
            raise
        self._waiters.remove(waiter)

    def release(self) -> None:
        """Give a slot back (to the oldest waiter when there is one)."""
        self.active -= 1
        self._wake()

    @contextlib.asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        """``async with``: a slot for the block."""
        await self.acquire()
        try:
            yield
        finally:
            self.release()

    def observe(self, now: float, lag_s: float, cpu_s: float) -> None:
        """One probe sample for the policy (:meth:`LagWindow.observe`); a larger size
        wakes waiters at once, a smaller one lets the holders above it finish."""
        if self._policy is None:
            return
        full = self._full or self.active >= self.limit
        limit = self._policy.observe(now, lag_s, cpu_s=cpu_s, full=full)
        if limit != self.limit:
            log.debug("intake window %d -> %d", self.limit, limit)
            self.limit = limit
            self._wake()
        self._full = self.active >= self.limit

    def _wake(self) -> None:
        for waiter in self._waiters:
            if self.active >= self.limit:
                return
            if not waiter.done():
                waiter.set_result(None)
                self.active += 1


class LagProbe:
    """The background loop that samples the event loop's lag for ``window``: sleeps
    :data:`PROBE_S` on ``clock``, and hands the lateness to :meth:`IntakeWindow.observe`.

    ``cpu``: the loop thread's CPU seconds (``time.thread_time``; tests inject one).
    """

    def __init__(
        self, window: IntakeWindow, clock: Clock, cpu: Callable[[], float] = time.thread_time
    ) -> None:
        self._window = window
        self._clock = clock
        self._cpu = cpu
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Start sampling (in the running loop); a second call does nothing."""
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="intake-lag-probe")

    async def stop(self) -> None:
        """Stop sampling."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _run(self) -> None:
        clock = self._clock
        while True:
            before = clock.monotonic()
            await clock.sleep(PROBE_S)
            now = clock.monotonic()
            self._window.observe(now, now - before - PROBE_S, self._cpu())


Handler = Callable[[TelegramObject, dict[str, Any]], Awaitable[Any]]


class IntakeWindowMiddleware(BaseMiddleware):
    """Polling: each update is handled inside a slot of ``window`` (an update outer
    middleware; it does not await while a slot is free and no one waits)."""

    def __init__(self, window: IntakeWindow) -> None:
        self._window = window

    async def __call__(self, handler: Handler, event: TelegramObject, data: dict[str, Any]) -> Any:
        await self._window.acquire()
        try:
            return await handler(event, data)
        finally:
            self._window.release()


def intake_window_of(
    ceiling: int, target_ms: int, clock: Clock
) -> tuple[IntakeWindow, LagProbe | None]:
    """INTAKE_MAX_CONCURRENT (``ceiling``) and INTAKE_LAG_TARGET_MS (``target_ms``; 0: a
    fixed window of ``ceiling``, no probe): the window and the probe that sizes it."""
    if target_ms <= 0:
        return IntakeWindow(ceiling), None
    policy = LagWindow(floor=min(FLOOR, ceiling), ceiling=ceiling, target_s=target_ms / 1000)
    window = IntakeWindow(ceiling, policy)
    return window, LagProbe(window, clock)
