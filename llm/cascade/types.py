"""What the cascade is configured with and what it reports: its knobs
(:class:`CascadeConfig`), admin events (:class:`CascadeEvent`), per-key status
(:class:`ProviderStatus`), counters (:class:`CascadeStats`), and the limit on an
answer's length (:data:`MAX_CHARS_PER_TOKEN`; what a provider may *report* is bounded
by the model's context window: :func:`llm.model_caps.possible_tokens`).

Plain data only: no I/O, no state. :mod:`llm.cascade.cascade` re-exports every public name.
"""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal

from llm.types import Message

__all__ = [
    "MAX_CHARS_PER_TOKEN",
    "PARK_NOTICE_S",
    "CascadeConfig",
    "CascadeEvent",
    "CascadeStats",
    "EventSink",
    "ProviderStatus",
    "TokenCounter",
    "fingerprint",
]

#: Characters one output token can plausibly produce; a longer answer is cut.
MAX_CHARS_PER_TOKEN = 8
#: A free key parked this long or longer is worth telling admins about, seconds.
PARK_NOTICE_S = 3600.0

#: ``messages → tokens``: the token counter's upper-bound estimate (``budget.pricing.tokens``).
TokenCounter = Callable[[Sequence[Message]], int]
#: Admin notification sink, sync or async.
EventSink = Callable[["CascadeEvent"], Awaitable[None] | None]


def fingerprint(messages: Sequence[Message]) -> str:
    """sha256 hex of the prompt: every message's role, NUL, content, U+0001, in UTF-8
    (one hash call over the joined text: a long history made four per message)."""
    text = "".join(f"{message.role}\x00{message.content}\x01" for message in messages)
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class CascadeConfig:
    """Knobs of the cascade (the composition root fills them from Settings).

    Attributes:
        timeout_s: PROVIDER_TIMEOUT_SECONDS. Each client enforces it; the cascade adds
            ``timeout_grace_s`` on top as a backstop for a client that does not.
        cooldown_s: COOLDOWN_SECONDS, open time after a 429 that names no wait, or
            after repeated failures.
        cooldown_max_s: COOLDOWN_MAX_SECONDS, the longest provider-named wait obeyed.
        breaker_failure_threshold: failures within the window that open a breaker.
        breaker_failure_window_s: that window, seconds.
        global_max_inflight_calls: GLOBAL_MAX_INFLIGHT_CALLS.
        degraded_min_output_tokens: DEGRADED_MIN_OUTPUT_TOKENS, the smallest max_tokens
            the ladder may shrink to.
        cheap_models: cheaper model per provider key (ladder step 1).
        day_tz: IANA zone in which "calls today" is counted (BUDGET_TZ).
        pacing_window_s: reset assumed when a provider gives no reset header, seconds.
        timeout_grace_s: see ``timeout_s``.
        first_token_timeout_s: PROVIDER_FIRST_TOKEN_TIMEOUT_SECONDS, a streamed call's
            wait for its first chunk.
        idle_timeout_s: PROVIDER_IDLE_TIMEOUT_SECONDS, the longest gap between chunks.
        token_safety_factor: TOKEN_SAFETY_FACTOR, how far a provider's tokenizer may
            count from Kopek's (o200k), either way: a streamed text is certainly past
            ``max_tokens`` once its o200k count ÷ this factor is
            (:mod:`llm.cascade.received`).
        free_share_ppm: FREE_SHARE_MAX in parts per million: the most of a free key's
            daily quota one user or group may take while others are active
            (:mod:`llm.keys.shares`); 1,000,000 keeps no share.
    """

    timeout_s: float = 60.0
    cooldown_s: float = 600.0
    cooldown_max_s: float = 3600.0
    breaker_failure_threshold: int = 3
    breaker_failure_window_s: float = 60.0
    global_max_inflight_calls: int = 8
    degraded_min_output_tokens: int = 128
    cheap_models: Mapping[str, str] = field(default_factory=dict)
    day_tz: str = "UTC"
    pacing_window_s: float = 60.0
    timeout_grace_s: float = 5.0
    first_token_timeout_s: float = 20.0
    idle_timeout_s: float = 20.0
    token_safety_factor: Decimal = Decimal("1.25")
    free_share_ppm: int = 1_000_000


@dataclass(frozen=True, slots=True)
class CascadeEvent:
    """Something admins may want to hear about.

    Attributes:
        kind: ``key_disabled`` (auth failure; once per disable), ``key_disabled_balance``
            (402 / balance error; once per disable), ``key_enabled``,
            ``cooldown_opened``, ``key_parked`` (a free key cooled longer than 1 h),
            ``usage_anomaly`` (output above max_tokens, input above Kopek's bound, or
            usage beyond what the model can do; once per key and kind),
            ``paid_anchor_call``, ``degraded``, ``degraded_refused``.
        provider: provider key name.
        detail: operator-facing text (never a key).
    """

    kind: str
    provider: str
    detail: str = ""


@dataclass(frozen=True, slots=True)
class ProviderStatus:
    """One provider key, for /providers and /budget.

    Attributes:
        name: key name.
        model: default model.
        paid: paid tier.
        present: a key is configured.
        enabled: not disabled by an auth failure.
        state: circuit state (``closed``/``open``/``half_open``).
        cooldown_remaining_s: seconds until it may be tried again.
        last_rate_limits: the rate-limit headers last seen.
        calls_today: attempts sent today (``day_tz``).
        remaining_tokens: pacing's view of its token window (``None`` = unknown).
    """

    name: str
    model: str
    paid: bool
    present: bool
    enabled: bool
    state: str
    cooldown_remaining_s: float
    last_rate_limits: dict[str, str]
    calls_today: int
    remaining_tokens: int | None


@dataclass(frozen=True, slots=True)
class CascadeStats:
    """Counters since start.

    Attributes:
        calls: attempts sent, per provider key.
        fallbacks: per provider key, per reason (``rate_limited``, ``quota``,
            ``unavailable``, ``auth``, ``context``), attempts that moved on.
        skips: per provider key, per reason, providers passed over without a request.
        cooldowns_opened: breaker openings (and extensions) per provider key.
        paid_anchor_calls: attempts sent to the paid anchor — to be kept at zero.
        degraded_steps: ladder steps applied, per step.
        estimate_error_tokens: per attempt, reported input tokens − counted input tokens.
    """

    calls: dict[str, int]
    fallbacks: dict[str, dict[str, int]]
    skips: dict[str, dict[str, int]]
    cooldowns_opened: dict[str, int]
    paid_anchor_calls: int
    degraded_steps: dict[str, int]
    estimate_error_tokens: tuple[int, ...]
