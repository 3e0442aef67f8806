"""Digest pacing: send now on a free provider, wait for a free reset, or allow the paid anchor.

Inputs are the cascade's :class:`llm.types.Capacity` readings (from the providers'
rate-limit headers; ``reset_at`` on the monotonic clock). Policy for one request
that needs ``tokens`` (input + max_tokens):

1. If some free, available provider has ``tokens ≤ share × remaining`` (or its
   remaining is unknown), send now with ``allow_paid=False``. ``share`` is
   DIGEST_MAX_FREE_SHARE: a digest request never takes more than that fraction of what
   a free provider has left at that moment, so chat always finds headroom.
2. Otherwise wait until the earliest reset among the free providers (or ``poll_s`` if
   none is known) — unless that wait would end past the digest's deadline
   (due time + DIGEST_LATEST_DELAY_MINUTES); then send with ``allow_paid=True``.

Worked timeline (share 0.8, request 1,000 tokens): Groq has 1,100 tokens left (resets in
20 s), Cerebras 0 (resets in 45 s), Mistral unavailable (breaker open for 300 s):
1,000 > 0.8 × 1,100 = 880 → nobody fits → wait 20 s for Groq's reset, then re-read.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from llm.types import Capacity

__all__ = ["PaceDecision", "decide"]


@dataclass(frozen=True, slots=True)
class PaceDecision:
    """What to do with the next request.

    Attributes:
        send: True = send now.
        allow_paid: with ``send``: whether the paid anchor may serve it.
        wait_s: without ``send``: seconds to wait before deciding again (> 0).
        provider: with ``send`` and not paid: the free provider that has room.
    """

    send: bool
    allow_paid: bool = False
    wait_s: float = 0.0
    provider: str = ""


def decide(
    capacities: Iterable[Capacity],
    tokens: int,
    *,
    share: float,
    now_mono: float,
    seconds_to_deadline: float,
    poll_s: float = 5.0,
) -> PaceDecision:
    """Decide for one request (pure).

    Args:
        capacities: the cascade's readings, any order.
        tokens: tokens the request may consume (input tokens + max_tokens).
        share: fraction (0, 1] of a free provider's remaining tokens a digest may use.
        now_mono: current monotonic reading (the clock of ``Capacity.reset_at``).
        seconds_to_deadline: seconds until the digest's latest acceptable delivery;
            ≤ 0 means already late.
        poll_s: wait when no free provider reports a reset time, in seconds.

    Returns:
        The decision (see the module docstring).
    """
    readings = list(capacities)
    if not readings:
        return PaceDecision(send=True)  # no pacing data at all: free-only, the cascade decides
    free = [c for c in readings if not c.paid]
    resets: list[float] = []
    for cap in free:
        stale = cap.reset_at is not None and cap.reset_at <= now_mono  # window already reset
        fits = cap.remaining_tokens is None or stale or tokens <= share * cap.remaining_tokens
        if cap.available and fits:
            return PaceDecision(send=True, provider=cap.provider)
        if cap.reset_at is not None and cap.reset_at > now_mono:
            resets.append(cap.reset_at - now_mono)
    wait = min(resets) if resets else poll_s
    wait = max(wait, 0.001)
    if not free or wait > seconds_to_deadline:
        return PaceDecision(send=True, allow_paid=True)
    return PaceDecision(send=False, wait_s=wait)
