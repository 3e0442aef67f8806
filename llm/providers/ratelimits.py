"""Parsing of providers' rate-limit headers into :class:`llm.types.RateLimitInfo`.

Durations come in several forms and are parsed exactly (with :class:`decimal.Decimal`,
then converted to float seconds):

=================  ============  =========================================
value              seconds       seen at
=================  ============  =========================================
``6``              6.0           ``retry-after`` (RFC 9110 delay-seconds)
``1.559999999s``   1.559999999   Groq ``x-ratelimit-reset-tokens``
``250ms``          0.25          Groq, ``retry-after-ms`` style values
``2m59.56s``       179.56        Groq ``x-ratelimit-reset-requests``
``11.3828670978``  11.382867...  Cerebras ``x-ratelimit-reset-tokens-minute``
=================  ============  =========================================

Header families (names are case-insensitive):

* Groq (console.groq.com/docs/rate-limits): ``x-ratelimit-{limit,remaining,reset}-tokens``
  (tokens per minute) and ``-requests`` (requests per day); ``retry-after`` on 429.
* Mistral (observed, mistralai/client-ts#169): ``x-ratelimit-{limit,remaining}-tokens-minute``,
  ``x-ratelimit-{limit,remaining}-req-minute``; no reset header (the window is a minute).
* Cerebras (inference-docs.cerebras.ai/support/rate-limits):
  ``x-ratelimit-{limit,remaining,reset}-tokens-minute`` and ``-requests-day``.
* Any: ``retry-after`` (seconds or an HTTP date), ``retry-after-ms`` (milliseconds, preferred).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from datetime import datetime
from decimal import Decimal, InvalidOperation
from email.utils import parsedate_to_datetime

from llm.types import RateLimitInfo

__all__ = ["parse_duration_s", "parse_rate_limits", "parse_retry_after_s"]

_NUM = r"([0-9]+(?:\.[0-9]+)?)"
_DURATION = re.compile(rf"^(?:{_NUM}h)?(?:{_NUM}m(?!s))?(?:{_NUM}s)?(?:{_NUM}ms)?$")

_TOKENS_REMAINING = ("x-ratelimit-remaining-tokens", "x-ratelimit-remaining-tokens-minute")
_TOKENS_RESET = ("x-ratelimit-reset-tokens", "x-ratelimit-reset-tokens-minute")
_TOKENS_LIMIT = ("x-ratelimit-limit-tokens", "x-ratelimit-limit-tokens-minute")
_REQ_REMAINING = (
    "x-ratelimit-remaining-requests",
    "x-ratelimit-remaining-req-minute",
    "x-ratelimit-remaining-requests-minute",
    "x-ratelimit-remaining-requests-day",
)
_REQ_RESET = (
    "x-ratelimit-reset-requests",
    "x-ratelimit-reset-requests-minute",
    "x-ratelimit-reset-requests-day",
)
_REQ_LIMIT = (
    "x-ratelimit-limit-requests",
    "x-ratelimit-limit-req-minute",
    "x-ratelimit-limit-requests-minute",
    "x-ratelimit-limit-requests-day",
)


def parse_duration_s(value: str | None) -> float | None:
    """Parse a duration into seconds.

    Accepts bare seconds (``"6"``, ``"11.38"``) and Go-style durations made of
    ``h``, ``m``, ``s`` and ``ms`` parts (``"1.559999999s"``, ``"250ms"``,
    ``"2m59.56s"`` = 179.56 s).

    Returns:
        Seconds (≥ 0), or ``None`` for a missing, unreadable, negative or
        non-finite (``inf``, ``nan``) value.
    """
    if value is None:
        return None
    text = value.strip().lower()
    if not text:
        return None
    try:
        number = Decimal(text)
    except InvalidOperation:
        pass
    else:
        if not number.is_finite() or number < 0 or not math.isfinite(float(number)):
            return None
        return float(number)
    match = _DURATION.match(text)
    if match is None or not any(match.groups()):
        return None
    hours, minutes, seconds, millis = (Decimal(g) if g else Decimal(0) for g in match.groups())
    total = hours * 3600 + minutes * 60 + seconds + millis / 1000
    return float(total)


def parse_retry_after_s(
    retry_after: str | None, retry_after_ms: str | None = None, *, now: datetime | None = None
) -> float | None:
    """Seconds to wait from ``retry-after-ms`` (preferred) or ``retry-after``.

    ``retry-after`` may be delay-seconds or an HTTP date (RFC 9110 §10.2.3); the
    date form needs ``now`` (aware) and yields ``None`` without it.

    Returns:
        Seconds (≥ 0) or ``None`` when neither header is present and readable.
    """
    if retry_after_ms is not None:
        ms = parse_duration_s(retry_after_ms.strip().removesuffix("ms"))
        if ms is not None:
            return ms / 1000
    if retry_after is None:
        return None
    seconds = parse_duration_s(retry_after)
    if seconds is not None:
        return seconds
    if now is None:
        return None
    try:
        when = parsedate_to_datetime(retry_after)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        return None
    return max(0.0, (when - now).total_seconds())


def _first(headers: Mapping[str, str], names: tuple[str, ...]) -> str | None:
    for name in names:
        if name in headers:
            return headers[name]
    return None


def _int(value: str | None) -> int | None:
    if value is None:
        return None
    try:
        return int(Decimal(value.strip()))
    except (InvalidOperation, ValueError):
        return None


def parse_rate_limits(headers: Mapping[str, str], *, now: datetime | None = None) -> RateLimitInfo:
    """Read every known rate-limit header of one response.

    Args:
        headers: response headers (any mapping; names compared case-insensitively).
        now: aware current time, only needed for an HTTP-date ``retry-after``.

    Returns:
        The parsed values; ``raw`` keeps only ``x-ratelimit-*`` and ``retry-after*``
        headers (never authentication or cookies).
    """
    low = {k.lower(): v for k, v in headers.items()}
    raw = {k: v for k, v in low.items() if k.startswith(("x-ratelimit-", "retry-after"))}
    return RateLimitInfo(
        remaining_tokens=_int(_first(low, _TOKENS_REMAINING)),
        reset_tokens_s=parse_duration_s(_first(low, _TOKENS_RESET)),
        remaining_requests=_int(_first(low, _REQ_REMAINING)),
        reset_requests_s=parse_duration_s(_first(low, _REQ_RESET)),
        retry_after_s=parse_retry_after_s(
            low.get("retry-after"), low.get("retry-after-ms"), now=now
        ),
        raw=raw,
        limit_tokens=_int(_first(low, _TOKENS_LIMIT)),
        limit_requests=_int(_first(low, _REQ_LIMIT)),
    )
