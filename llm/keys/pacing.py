"""Proactive pacing of free-tier keys from their rate-limit headers.

After every response the cascade calls :meth:`Pacer.observe` with the parsed
headers; before a request it asks :meth:`Pacer.would_exceed` whether
``input_tokens + max_tokens`` fits what the key has left. If not, the key is
treated as cooling until its reset instead of being sent a request that will 429.
Between responses, :meth:`Pacer.consume` subtracts what an in-flight request may
use, so a burst of concurrent requests does not all pass on one stale reading.

Times are monotonic seconds from the injected clock. Worked timeline (Groq key,
reset header ``7.66s``)::

    t=100.00  response: remaining-tokens 100, reset-tokens 7.66s → 100 left until 107.66
    t=101.00  would_exceed(2000) → True  (skip Groq, no request)
    t=107.66  would_exceed(2000) → False (window reset; remaining unknown or = limit)

Mistral sends no reset header; its windows are a minute (``-minute`` headers), so
``default_window_s`` (60 s) is assumed.
"""

from __future__ import annotations

from dataclasses import dataclass

from budget.kernel.clock import Clock
from llm.types import RateLimitInfo

__all__ = ["KeyPace", "Pacer", "consume", "exceeds", "expire", "observe", "reset_at"]


@dataclass(slots=True)
class KeyPace:
    """What one key has left.

    Attributes:
        remaining_tokens: tokens left in the current window (``None`` = unknown).
        tokens_reset_at: monotonic time the token window resets.
        limit_tokens: size of the token window, if known.
        remaining_requests: requests left (``None`` = unknown).
        requests_reset_at: monotonic time the request window resets.
        last: the last headers seen.
    """

    remaining_tokens: int | None = None
    tokens_reset_at: float | None = None
    limit_tokens: int | None = None
    remaining_requests: int | None = None
    requests_reset_at: float | None = None
    last: RateLimitInfo | None = None


def observe(pace: KeyPace, now: float, info: RateLimitInfo, default_window_s: float) -> None:
    """Record one response's rate-limit headers in ``pace`` at ``now`` (seconds on the
    caller's time base); a window without a reset header resets ``default_window_s``
    seconds later. Headers naming nothing change nothing."""
    if not info.raw and info.remaining_tokens is None and info.remaining_requests is None:
        return
    pace.last = info
    if info.remaining_tokens is not None:
        pace.remaining_tokens = info.remaining_tokens
        reset = info.reset_tokens_s
        pace.tokens_reset_at = now + (reset if reset is not None else default_window_s)
    if info.limit_tokens is not None:
        pace.limit_tokens = info.limit_tokens
    if info.remaining_requests is not None:
        pace.remaining_requests = info.remaining_requests
        reset = info.reset_requests_s
        pace.requests_reset_at = now + (reset if reset is not None else default_window_s)


def expire(pace: KeyPace, now: float) -> None:
    """Forget the windows of ``pace`` that have reset by ``now`` (tokens back to the
    window's size when known)."""
    if pace.tokens_reset_at is not None and now >= pace.tokens_reset_at:
        pace.remaining_tokens = pace.limit_tokens
        pace.tokens_reset_at = None
    if pace.requests_reset_at is not None and now >= pace.requests_reset_at:
        pace.remaining_requests = None
        pace.requests_reset_at = None


def consume(pace: KeyPace, now: float, tokens: int) -> None:
    """Subtract a request about to be sent (``tokens`` = input + max_tokens)."""
    expire(pace, now)
    if pace.remaining_tokens is not None:
        pace.remaining_tokens = max(0, pace.remaining_tokens - tokens)
    if pace.remaining_requests is not None:
        pace.remaining_requests = max(0, pace.remaining_requests - 1)


def exceeds(pace: KeyPace, now: float, tokens: int, share: float = 1.0) -> bool:
    """True when ``tokens`` more would exceed ``share`` of what is left before the reset
    (or no request is left)."""
    expire(pace, now)
    if pace.remaining_requests is not None and pace.remaining_requests <= 0:
        return True
    return pace.remaining_tokens is not None and tokens > pace.remaining_tokens * share


def reset_at(pace: KeyPace, now: float) -> float | None:
    """When the binding window resets (``None`` = unknown/now)."""
    expire(pace, now)
    if pace.remaining_requests is not None and pace.remaining_requests <= 0:
        return pace.requests_reset_at
    return pace.tokens_reset_at


class Pacer:
    """Remaining-capacity book for every key.

    Args:
        clock: monotonic time source.
        default_window_s: reset assumed when a provider sends remaining counts but
            no reset time, seconds.
    """

    __slots__ = ("_clock", "_keys", "default_window_s")

    def __init__(self, clock: Clock, *, default_window_s: float = 60.0) -> None:
        self._clock = clock
        self.default_window_s = default_window_s
        self._keys: dict[str, KeyPace] = {}

    def _get(self, key: str) -> KeyPace:
        pace = self._keys.get(key)
        if pace is None:
            pace = self._keys[key] = KeyPace()
        return pace

    def observe(self, key: str, info: RateLimitInfo) -> None:
        """Record the rate-limit headers of a response from ``key``."""
        if not info.raw and info.remaining_tokens is None and info.remaining_requests is None:
            return
        observe(self._get(key), self._clock.monotonic(), info, self.default_window_s)

    def consume(self, key: str, tokens: int) -> None:
        """Subtract a request about to be sent (``tokens`` = input + max_tokens)."""
        pace = self._keys.get(key)
        if pace is None:
            return
        consume(pace, self._clock.monotonic(), tokens)

    def pace(self, key: str) -> KeyPace:
        """The record of ``key`` (live)."""
        return self._get(key)

    def adopt(self, key: str, pace: KeyPace) -> None:
        """Take a shared row's windows for ``key`` (times on this pacer's monotonic
        base)."""
        self._keys[key] = pace

    def would_exceed(self, key: str, tokens: int, share: float = 1.0) -> bool:
        """True when ``tokens`` more would exceed ``share`` of what ``key`` has left
        before its reset (``share`` = 1: all of it)."""
        pace = self._keys.get(key)
        if pace is None:
            return False
        return exceeds(pace, self._clock.monotonic(), tokens, share)

    def remaining_tokens(self, key: str) -> int | None:
        """Tokens ``key`` has left now (``None`` = unknown)."""
        pace = self._keys.get(key)
        if pace is None:
            return None
        expire(pace, self._clock.monotonic())
        return pace.remaining_tokens

    def reset_at(self, key: str) -> float | None:
        """Monotonic time the binding window of ``key`` resets (``None`` = unknown/now)."""
        pace = self._keys.get(key)
        if pace is None:
            return None
        return reset_at(pace, self._clock.monotonic())

    def last_headers(self, key: str) -> dict[str, str]:
        """The rate-limit headers last seen from ``key`` (empty when none)."""
        pace = self._keys.get(key)
        return dict(pace.last.raw) if pace is not None and pace.last is not None else {}

    def __repr__(self) -> str:
        return f"Pacer(keys={sorted(self._keys)})"
