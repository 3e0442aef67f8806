"""The one clock of Kopek.

Every piece of logic that needs the time takes a :class:`Clock`; nothing calls
``datetime.now()`` or ``time.time()`` directly. Two readings are offered:

* :meth:`Clock.now` — wall-clock time as an *aware* UTC ``datetime``; used for
  budget windows, resets and anything shown to people.
* :meth:`Clock.monotonic` — seconds (float) from an arbitrary origin that never
  goes backwards; used for cooldowns, TTLs and pacing.

:class:`ManualClock` is the test clock: time moves only when a test moves it,
and :meth:`ManualClock.sleep` advances virtual time instead of waiting, so
simulations (``bench/digest.py``) run in seconds.
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta
from typing import Protocol

__all__ = ["Clock", "ManualClock", "SystemClock"]


class Clock(Protocol):
    """Source of time. Units: ``monotonic()`` and ``sleep()`` are in seconds."""

    def now(self) -> datetime:
        """Current wall-clock time, timezone-aware, in UTC."""
        ...

    def monotonic(self) -> float:
        """Seconds since an arbitrary origin; never decreases."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Wait ``seconds`` (virtual time for a manual clock)."""
        ...


class SystemClock:
    """The real clock: ``datetime.now(UTC)``, ``time.monotonic()``, ``asyncio.sleep``."""

    __slots__ = ()

    def now(self) -> datetime:
        return datetime.now(UTC)

    def monotonic(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))

    def __repr__(self) -> str:
        return "SystemClock()"


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
