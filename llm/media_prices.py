"""What media inputs cost, in integer µUSD: audio by the second, images by their tokens.

Pure functions of documented figures (:mod:`llm.providers.transcription` for the audio
rates and minimums, :mod:`llm.providers.image_tokens` for the tokens an image is billed
as, the price card for the input rate of a vision model's tokens). Rounding follows the
price card (``budget/pricing/prices.py``): a *ceiling* is rounded **up** (it must stay
an upper bound), an *actual* cost to the **nearest** µUSD (half-even).

Worked figures, Groq ``whisper-large-v3-turbo`` at $0.04 an hour (11.1 µUSD a second)
with its 10-second minimum: a voice note Telegram says is 7 s long holds
``ceil(max(7 + 1, 10) × 11.1…) = 112`` µUSD and settles at 111 µUSD if Groq reports
6.9 s; a 30-minute note holds ``ceil(1801 × 11.1…) = 20,012`` µUSD. Mistral
``voxtral-mini-latest`` at $0.18 an hour (50 µUSD a second): 7 s holds 400 µUSD.

The one-second margin: Telegram's ``duration`` is whole seconds "as defined by the
sender", so the audio may be up to a second longer than declared (it is rounded) — and
a client can lie outright; the settle books what the provider reports, and a report
above the hold is an anomaly like any other.
"""

from __future__ import annotations

import math
from decimal import ROUND_CEILING, ROUND_HALF_EVEN, Decimal

__all__ = [
    "DURATION_MARGIN_S",
    "image_tokens_ceiling_musd",
    "musd_per_second",
    "transcription_ceiling_musd",
    "transcription_cost_musd",
]

#: Seconds added to a declared duration before it is held (see the module docstring).
DURATION_MARGIN_S = 1

_SECONDS_PER_HOUR = Decimal(3600)
_MICRO = Decimal(1_000_000)


def musd_per_second(usd_per_hour: Decimal) -> Decimal:
    """The exact rate in µUSD per second of a price in USD per hour
    (``Decimal("0.04")`` → 11.111… µUSD/s)."""
    return usd_per_hour * _MICRO / _SECONDS_PER_HOUR


def transcription_ceiling_musd(
    declared_s: int,
    usd_per_hour: Decimal,
    minimum_billed_s: int,
    *,
    margin_s: int = DURATION_MARGIN_S,
) -> int:
    """The most a transcription of ``declared_s`` seconds can cost, µUSD, rounded up:
    ``max(declared_s + margin_s, minimum_billed_s)`` seconds at the hourly rate.

    Raises:
        ValueError: a negative duration, margin or minimum.
    """
    if min(declared_s, margin_s, minimum_billed_s) < 0:
        raise ValueError("durations and minimums are non-negative")
    seconds = max(declared_s + margin_s, minimum_billed_s)
    return int((seconds * musd_per_second(usd_per_hour)).to_integral_value(ROUND_CEILING))


def transcription_cost_musd(billed_s: int, usd_per_hour: Decimal) -> int:
    """What ``billed_s`` billed seconds cost, µUSD, to the nearest (half-even).

    Raises:
        ValueError: negative seconds.
    """
    if billed_s < 0:
        raise ValueError("billed seconds are non-negative")
    return int((billed_s * musd_per_second(usd_per_hour)).to_integral_value(ROUND_HALF_EVEN))


def image_tokens_ceiling_musd(tokens: int, usd_per_million_input: Decimal) -> int:
    """The most ``tokens`` image tokens can cost at a model's input rate (USD per 1M
    tokens, the price card's unit), µUSD, rounded up: µUSD = tokens × USD/1M.

    Raises:
        ValueError: negative tokens or rate.
    """
    if tokens < 0 or usd_per_million_input < 0:
        raise ValueError("tokens and rates are non-negative")
    return math.ceil(tokens * usd_per_million_input)
