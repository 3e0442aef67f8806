"""The test clocks: :class:`ManualClock`, :class:`VirtualClock` and :class:`JumpClock`
(all implement :class:`budget.kernel.clock.Clock`; product code only ever takes that
protocol).

:class:`ManualClock` moves only when a test moves it, and its ``sleep`` jumps time forward
at once instead of waiting (so two concurrent sleepers add up).

:class:`VirtualClock` is a discrete-event clock for simulations (``bench/digest.py``) and
tests: it wakes each sleeper at its own virtual deadline: ``sleep(3)`` started at t=0 and
``sleep(5)`` started at t=1 wake at t=3 and t=6. Time moves only in
:meth:`VirtualClock.advance` and :meth:`VirtualClock.run`, which jumps to the next
wake-up whenever the event loop has gone quiet (no task ran for ``quiet_s`` real
seconds; database work on a thread pool finishes within that).

Units: seconds; wall-clock readings are aware UTC datetimes.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

__all__ = ["JumpClock", "ManualClock", "VirtualClock"]


class ManualClock:
    """A clock that moves only when told to.

    Args:
        start: initial wall-clock time; must be timezone-aware (converted to UTC).

    Raises:
        ValueError: if ``start`` is naive.
    """

    __slots__ = ("_mono", "_now")

    def __init__(self, start: datetime | None = None) -> None:
        if start is None:
            start = datetime(2026, 1, 1, tzinfo=UTC)
        if start.tzinfo is None:
            raise ValueError("ManualClock needs an aware datetime")
        self._now = start.astimezone(UTC)
        self._mono = 1000.0

    def now(self) -> datetime:
        return self._now

    def monotonic(self) -> float:
        return self._mono

    def advance(self, seconds: float) -> None:
        """Move both readings forward by ``seconds`` (must be ≥ 0)."""
        if seconds < 0:
            raise ValueError("a clock does not go backwards")
        self._now += timedelta(seconds=seconds)
        self._mono += seconds

    def set(self, when: datetime) -> None:
        """Jump wall-clock (and monotonic, by the same delta) forward to ``when``."""
        if when.tzinfo is None:
            raise ValueError("ManualClock needs an aware datetime")
        self.advance((when.astimezone(UTC) - self._now).total_seconds())

    async def sleep(self, seconds: float) -> None:
        self.advance(max(0.0, seconds))
        await asyncio.sleep(0)

    def __repr__(self) -> str:
        return f"ManualClock(now={self._now.isoformat()}, monotonic={self._mono:.3f})"


class VirtualClock:
    """Virtual time with ordered wake-ups.

    Args:
        start: initial aware wall-clock time.
        quiet_s: real seconds without activity after which :meth:`run` advances time.
    """

    __slots__ = ("_activity", "_mono", "_now", "_quiet_s", "_seq", "_sleepers")

    def __init__(self, start: datetime, *, quiet_s: float = 0.005) -> None:
        if start.tzinfo is None:
            raise ValueError("VirtualClock needs an aware datetime")
        self._now = start.astimezone(UTC)
        self._mono = 1000.0
        self._quiet_s = quiet_s
        self._seq = itertools.count()
        self._sleepers: list[tuple[float, int, asyncio.Future[None]]] = []
        self._activity = 0

    def __repr__(self) -> str:
        return f"VirtualClock(now={self._now.isoformat()}, sleepers={len(self._sleepers)})"

    def now(self) -> datetime:
        self._activity += 1
        return self._now

    def monotonic(self) -> float:
        self._activity += 1
        return self._mono

    async def sleep(self, seconds: float) -> None:
        self._activity += 1
        if seconds <= 0:
            await asyncio.sleep(0)
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (self._mono + seconds, next(self._seq), future))
        await future

    def advance(self, seconds: float) -> None:
        """Move time forward by ``seconds`` (≥ 0), waking every sleeper due by then."""
        if seconds < 0:
            raise ValueError("a clock does not go backwards")
        self._set_mono(self._mono + seconds)

    def _set_mono(self, target: float) -> None:
        delta = target - self._mono
        self._now += timedelta(seconds=delta)
        self._mono = target
        while self._sleepers and self._sleepers[0][0] <= self._mono:
            _, _, future = heapq.heappop(self._sleepers)
            if not future.done():
                future.set_result(None)
                self._activity += 1

    async def quiet(self) -> None:
        """Wait (real time) until the loop has been quiet for ``quiet_s``."""
        while True:
            before = self._activity
            await asyncio.sleep(self._quiet_s)
            await asyncio.sleep(self._quiet_s)
            if self._activity == before:
                return

    async def run(
        self, done: Callable[[], bool], *, limit_s: float = 86400.0, max_idle_rounds: int = 50
    ) -> None:
        """Advance from wake-up to wake-up until ``done()`` or ``limit_s`` virtual seconds.

        Args:
            done: checked whenever the loop is quiet.
            limit_s: virtual-time bound (seconds from now).
            max_idle_rounds: quiet rounds with nobody asleep before giving up.
        """
        end = self._mono + limit_s
        idle_rounds = 0
        while True:
            await self.quiet()
            if done():
                return
            if not self._sleepers:
                idle_rounds += 1  # work without clock calls (a slow commit) may still run
                if idle_rounds > max_idle_rounds:
                    return
                continue
            idle_rounds = 0
            if self._sleepers[0][0] > end:
                return
            self._set_mono(self._sleepers[0][0])


class JumpClock:
    """Real time from a chosen instant, moved forward by jumps: for the in-process bot,
    whose background loops need time to pass (``sleep`` really waits), in a test that
    must cross a window or a day (:meth:`jump`, :meth:`set`).

    Args:
        start: the wall-clock reading now (aware).
    """

    __slots__ = ("_jumped", "_origin", "_real0")

    def __init__(self, start: datetime) -> None:
        if start.tzinfo is None:
            raise ValueError("JumpClock needs an aware datetime")
        self._origin = start.astimezone(UTC)
        self._real0 = time.monotonic()
        self._jumped = 0.0

    def now(self) -> datetime:
        return self._origin + timedelta(seconds=time.monotonic() - self._real0 + self._jumped)

    def monotonic(self) -> float:
        return time.monotonic() + self._jumped

    def jump(self, seconds: float) -> None:
        """Move both readings forward by ``seconds`` (≥ 0)."""
        if seconds < 0:
            raise ValueError("a clock does not go backwards")
        self._jumped += seconds

    def set(self, when: datetime) -> None:
        """Jump forward to ``when`` (aware, not before now)."""
        self.jump((when.astimezone(UTC) - self.now()).total_seconds())

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))

    def __repr__(self) -> str:
        return f"JumpClock(now={self.now().isoformat()}, jumped={self._jumped:.0f}s)"
