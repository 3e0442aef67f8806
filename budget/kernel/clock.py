"""The one clock of Kopek.

Every piece of logic that needs the time takes a :class:`Clock`; nothing calls
``datetime.now()`` or ``time.time()`` directly. Two readings are offered:

* :meth:`Clock.now` — wall-clock time as an *aware* UTC ``datetime``; used for
  budget windows, resets and anything shown to people.
* :meth:`Clock.monotonic` — seconds (float) from an arbitrary origin that never
  goes backwards; used for cooldowns, TTLs and pacing.

The test clocks (a manual one, a discrete-event one) are in ``tests/support/clocks.py``:
product code only ever takes the :class:`Clock` protocol.
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime
from typing import Protocol

__all__ = ["Clock", "SystemClock"]


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
