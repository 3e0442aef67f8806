"""Free speech-to-text tiers are limited in audio seconds, not tokens: Groq's free plan
allows ``whisper-large-v3-turbo`` 7,200 audio seconds an hour (ASH) and 28,800 a day
(ASD), and 20 requests a minute, 2,000 a day (console.groq.com/docs/rate-limits, the
figures of :data:`llm.providers.transcription.GROQ_WHISPER_TURBO`). :class:`AudioPacer`
keeps what each key was sent in rolling windows of the injected monotonic clock and
says when one more clip would pass a limit, so the cascade passes such a key over
(``paced``) instead of sending a request bound to be answered 429.

What is counted is what is *held* for before the request (the declared duration plus
the margin, or the provider's minimum), then corrected to what the provider reported
(:meth:`AudioPacer.correct`): a sender understating a duration cannot push a key past
its window by more than one clip.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from budget.kernel.clock import Clock

__all__ = ["AudioLimits", "AudioPacer"]

_MINUTE_S = 60.0
_HOUR_S = 3600.0
_DAY_S = 86_400.0


@dataclass(frozen=True, slots=True)
class AudioLimits:
    """One key's documented free-plan limits (``None``: not limited).

    Attributes:
        seconds_per_hour: audio seconds in any rolling hour.
        seconds_per_day: audio seconds in any rolling 24 hours.
        requests_per_minute: requests in any rolling minute.
        requests_per_day: requests in any rolling 24 hours.
    """

    seconds_per_hour: int | None = None
    seconds_per_day: int | None = None
    requests_per_minute: int | None = None
    requests_per_day: int | None = None


@dataclass(slots=True)
class _Sent:
    at: float
    seconds: int


@dataclass(slots=True)
class _KeyLog:
    sent: deque[_Sent] = field(default_factory=deque)


class AudioPacer:
    """Rolling audio-second and request windows per key.

    Args:
        clock: the injected clock (``monotonic`` readings).
    """

    __slots__ = ("_clock", "_keys")

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._keys: dict[str, _KeyLog] = {}

    def __repr__(self) -> str:
        return f"AudioPacer(keys={sorted(self._keys)})"

    def _log(self, key: str) -> _KeyLog:
        log = self._keys.get(key)
        if log is None:
            log = self._keys[key] = _KeyLog()
        now = self._clock.monotonic()
        while log.sent and log.sent[0].at <= now - _DAY_S:
            log.sent.popleft()
        return log

    def _within(self, key: str, horizon_s: float) -> tuple[int, int]:
        """(audio seconds, requests) sent to ``key`` in the last ``horizon_s``."""
        now = self._clock.monotonic()
        recent = [s for s in self._log(key).sent if s.at > now - horizon_s]
        return sum(s.seconds for s in recent), len(recent)

    def would_exceed(self, key: str, seconds: int, limits: AudioLimits) -> bool:
        """Would one more request of ``seconds`` pass any of ``limits``?"""
        hour_s, _ = self._within(key, _HOUR_S)
        day_s, day_n = self._within(key, _DAY_S)
        _, minute_n = self._within(key, _MINUTE_S)
        checks = (
            (limits.seconds_per_hour, hour_s + seconds),
            (limits.seconds_per_day, day_s + seconds),
            (limits.requests_per_minute, minute_n + 1),
            (limits.requests_per_day, day_n + 1),
        )
        return any(limit is not None and used > limit for limit, used in checks)

    def record(self, key: str, seconds: int) -> _Sent:
        """Count a request of ``seconds`` sent to ``key`` now; returns its entry (for
        :meth:`correct`)."""
        entry = _Sent(self._clock.monotonic(), max(0, seconds))
        self._log(key).sent.append(entry)
        return entry

    @staticmethod
    def correct(entry: _Sent, seconds: int) -> None:
        """Replace a recorded request's seconds by what the provider reported."""
        entry.seconds = max(0, seconds)

    def used(self, key: str) -> tuple[int, int]:
        """(audio seconds in the last hour, in the last day) sent to ``key``."""
        return self._within(key, _HOUR_S)[0], self._within(key, _DAY_S)[0]
