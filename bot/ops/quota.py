"""The free quota forecast: when a free key's daily requests run out at the current rate,
and where chat goes after that (docs/decisions/180-anomaly-alerts.md).

The figures are the rate-limit headers the cascade already records for each key
(:meth:`llm.keys.pacing.Pacer.last_headers`, shown by ``/providers`` and the dashboard):
the daily request headers only — Groq's ``x-ratelimit-remaining-requests`` (requests per
day, console.groq.com/docs/rate-limits) and Cerebras' ``-requests-day``
(inference-docs.cerebras.ai/support/rate-limits); a per-minute count (Mistral's
``-req-minute``) is pacing's business, not a forecast's. The watch samples them every
minute (:meth:`QuotaForecaster.sample`); the rate is the drop of ``remaining`` since the
oldest sample of the last :data:`SAMPLE_SPAN` (a rise means the window reset or refilled:
the samples start again), so a provider's own refill is already in it.

A forecast is told when the run-out falls within ``lead`` of now and before the
window's reset (``x-ratelimit-reset-requests``, when sent), after at least
:data:`MIN_SAMPLE_SPAN` of samples. The fallback named is the one the cascade would
use: the next key after it in cascade order (:attr:`llm.cascade.cascade.Cascade.providers`
— the order every chat request walks) that is configured, enabled and not out of
requests itself (``None``: none is left).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from llm.cascade.types import ProviderStatus
from llm.providers.ratelimits import parse_duration_s

__all__ = ["MIN_SAMPLE_SPAN", "SAMPLE_SPAN", "QuotaForecast", "QuotaForecaster", "daily_requests"]

#: How far back the rate is measured.
SAMPLE_SPAN = timedelta(minutes=30)
#: The shortest span a rate is measured over.
MIN_SAMPLE_SPAN = timedelta(minutes=5)

_REMAINING = ("x-ratelimit-remaining-requests", "x-ratelimit-remaining-requests-day")
_RESET = ("x-ratelimit-reset-requests", "x-ratelimit-reset-requests-day")


@dataclass(frozen=True, slots=True)
class QuotaForecast:
    """One free key's daily requests running out.

    Attributes:
        key: the key (``groq``, ``groq2`` …); ``remaining``: requests left now.
        per_hour: requests used per hour (the measured drop).
        runs_out_at: when ``remaining`` reaches 0 at that rate (aware UTC).
        fallback: the key chat goes to after it (``None``: none left); ``fallback_paid``.
    """

    key: str
    remaining: int
    per_hour: int
    runs_out_at: datetime
    fallback: str | None
    fallback_paid: bool


def daily_requests(headers: dict[str, str]) -> tuple[int | None, float | None]:
    """``(requests left today, seconds to the reset)`` from one key's last headers
    (``None``: not sent or unreadable)."""
    lowered = {k.lower(): v for k, v in headers.items()}
    remaining = next((lowered[n] for n in _REMAINING if n in lowered), None)
    reset = next((lowered[n] for n in _RESET if n in lowered), None)
    try:
        left = int(remaining.strip()) if remaining is not None else None
    except ValueError:
        left = None
    return (left if left is None or left >= 0 else None), parse_duration_s(reset)


def fallback_of(key: str, keys: Sequence[ProviderStatus], out: set[str]) -> ProviderStatus | None:
    """The key after ``key`` in cascade order that chat would use (see the module
    docstring); ``out``: keys known to have no request left."""
    names = [k.name for k in keys]
    if key not in names:
        return None
    for later in keys[names.index(key) + 1 :]:
        if later.present and later.enabled and later.name not in out:
            return later
    return None


class QuotaForecaster:
    """Samples of each free key's daily requests, and the forecasts they make.

    Args:
        lead: tell a run-out no further ahead than this.
    """

    __slots__ = ("_samples", "lead")

    def __init__(self, lead: timedelta) -> None:
        self.lead = lead
        self._samples: dict[str, list[tuple[datetime, int]]] = {}

    def __repr__(self) -> str:
        return f"QuotaForecaster(lead={self.lead}, keys={sorted(self._samples)})"

    def _record(self, key: str, now: datetime, remaining: int) -> list[tuple[datetime, int]]:
        samples = self._samples.setdefault(key, [])
        if samples and remaining > samples[-1][1]:
            samples.clear()  # the window reset or refilled: measure afresh
        samples.append((now, remaining))
        while len(samples) > 2 and now - samples[1][0] >= SAMPLE_SPAN:
            samples.pop(0)
        return samples

    def sample(self, now: datetime, keys: Sequence[ProviderStatus]) -> list[QuotaForecast]:
        """Record every free key's headers at ``now`` (cascade order: ``keys``); returns
        the forecasts to tell now."""
        found: list[tuple[ProviderStatus, int, float, float | None]] = []
        out: set[str] = set()
        for status in keys:
            if not status.present or status.paid:
                continue
            remaining, reset_s = daily_requests(status.last_rate_limits)
            if remaining is None:
                continue
            if remaining == 0:
                out.add(status.name)
            samples = self._record(status.name, now, remaining)
            first_left, span = samples[0][1], now - samples[0][0]
            if span < MIN_SAMPLE_SPAN or first_left <= remaining:
                continue
            per_s = (first_left - remaining) / span.total_seconds()
            found.append((status, remaining, per_s, reset_s))
        told = []
        for status, remaining, per_s, reset_s in found:
            runs_out = now + timedelta(seconds=remaining / per_s)
            if runs_out - now > self.lead:
                continue
            if reset_s is not None and runs_out >= now + timedelta(seconds=reset_s):
                continue  # the window resets first
            nxt = fallback_of(status.name, keys, out | {status.name})
            told.append(
                QuotaForecast(
                    status.name,
                    remaining,
                    int(per_s * 3600),
                    runs_out,
                    None if nxt is None else nxt.name,
                    bool(nxt is not None and nxt.paid),
                )
            )
        return told
