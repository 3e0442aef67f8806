"""What every provider client shares: the :class:`Provider` protocol, usage and body
parsing for OpenAI-style chat completions, and the status → error translation.

Usage fields read (each provider's own, see ``tests/fixtures/llm/``):

* ``prompt_tokens`` / ``completion_tokens`` — all providers;
* cached input: DeepSeek ``prompt_cache_hit_tokens`` (api-docs.deepseek.com, context
  caching), else ``prompt_tokens_details.cached_tokens`` (Groq, Cerebras, newer
  Mistral), else Mistral's ``num_cached_tokens``;
* reasoning: ``completion_tokens_details.reasoning_tokens`` (Groq, Cerebras, DeepSeek);
* Groq streams report usage in ``x_groq.usage`` when ``usage`` is absent.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import httpx

from budget.kernel.clock import Clock, SystemClock
from budget.types import Usage
from llm.errors import (
    AuthFailed,
    BalanceExhausted,
    ContextTooLong,
    ProviderError,
    ProviderRateLimited,
    ProviderRejected,
    ProviderUnavailable,
    QuotaExhausted,
)
from llm.providers.body_cap import BodyTooLarge
from llm.providers.tools import tool_calls_of
from llm.types import Completion, Message, RateLimitInfo

__all__ = [
    "Provider",
    "ProviderBase",
    "UsageReading",
    "decode_json",
    "error_for_status",
    "messages_payload",
    "parse_completion_body",
    "parse_usage",
    "read_usage",
    "transport_error",
]

_CONTEXT_MARKERS = (
    "context length",
    "context_length",
    "context window",
    "maximum context",
    "too many tokens",
    "prompt is too long",
    "reduce the length",
)
_QUOTA_MARKERS = ("per day", "(rpd)", "(tpd)", "quota exceeded")
#: An error body naming these means the account cannot pay: the key is disabled.
_BALANCE_MARKERS = (
    "insufficient balance",
    "insufficient_balance",
    "insufficient_quota",
    "insufficient funds",
    "balance is not enough",
    "credit balance",
    "payment required",
    "exceeded your current quota",
    "insufficient credit",  # OpenRouter-style "Insufficient credits"
    "out of credit",
    "billing",  # OpenAI "billing_hard_limit_reached", "billing_not_active"
)
_DETAIL_MAX = 300


@runtime_checkable
class Provider(Protocol):
    """One provider key as the cascade sees it.

    Attributes:
        name: provider key name (``groq``, ``groq2``, ``mistral``, ``cerebras``, ``deepseek``).
        model: default model id.
        paid: True for a paid-tier account (the paid anchor).
        context_window_tokens: the default model's context window, in tokens.
    """

    name: str
    model: str
    paid: bool
    context_window_tokens: int

    async def complete(
        self, messages: Sequence[Message], max_tokens: int, model: str | None = None
    ) -> Completion:
        """One non-streaming chat completion within the client's total deadline.

        Args:
            messages: the prompt.
            max_tokens: output cap, tokens.
            model: a model other than the default (the cheap model of degraded mode).

        Returns:
            The normalised completion (``cost_musd`` 0: the cascade fills it).

        Raises:
            ProviderError: every failure, translated (see :mod:`llm.errors`).
        """
        ...

    async def aclose(self) -> None:
        """Close the HTTP connections."""
        ...


class ProviderBase:
    """What every client shares: its identity (see :class:`Provider`), the total
    deadline of one call (``timeout_s``, seconds) and the clock used for HTTP-date
    ``Retry-After`` values (default: the system clock)."""

    __slots__ = ("_clock", "_timeout_s", "context_window_tokens", "model", "name", "paid")

    def __init__(
        self,
        name: str,
        *,
        model: str,
        paid: bool,
        context_window_tokens: int,
        timeout_s: float,
        clock: Clock | None,
    ) -> None:
        self.name = name
        self.model = model
        self.paid = paid
        self.context_window_tokens = context_window_tokens
        self._timeout_s = timeout_s
        self._clock: Clock = clock or SystemClock()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, model={self.model!r}, paid={self.paid})"


def messages_payload(messages: Sequence[Message]) -> list[dict[str, str]]:
    """The ``messages`` array of an OpenAI-style request."""
    return [{"role": m.role, "content": m.content} for m in messages]


class _BadUsage(ValueError):
    """Internal: a usage field that is not a non-negative integer."""


def _as_int(value: object) -> int:
    """A usage count: a non-negative integer (an integral float or a numeric string
    is coerced); anything else raises :class:`_BadUsage`."""
    if isinstance(value, bool):
        raise _BadUsage(repr(value))
    if isinstance(value, int):
        number = value
    elif isinstance(value, float) and value.is_integer():
        number = int(value)
    elif isinstance(value, str) and value.strip().isascii() and value.strip().isdigit():
        number = int(value.strip())
    else:
        raise _BadUsage(repr(value)[:40])
    if number < 0:
        raise _BadUsage(str(number))
    return number


def _opt_int(mapping: Mapping[str, Any], key: str) -> int:
    return _as_int(mapping[key]) if mapping.get(key) is not None else 0


def _sub(mapping: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = mapping.get(key)
    return value if isinstance(value, Mapping) else {}


@dataclass(frozen=True, slots=True)
class UsageReading:
    """The usage report of a completion body, as :func:`read_usage` read it.

    Attributes:
        usage: the normalised report; ``None`` when there was none or it was unreadable.
        issue: ``""`` for a readable report, ``"missing"`` when the body carries none,
            ``"invalid"`` when it is not a set of non-negative integers,
            ``"inconsistent"`` when it contradicts itself.
    """

    usage: Usage | None
    issue: str = ""


def read_usage(body: Mapping[str, Any]) -> UsageReading:
    """Normalise the usage of an OpenAI-style completion body, strictly.

    Returns:
        The report with ``issue`` ``""`` when readable; no usage and ``"missing"`` when
        the body carries none; no usage and ``"invalid"`` when it is not a set of
        non-negative integers (negative, fractional, boolean or non-numeric values;
        numeric strings are coerced) — which counts as missing; no usage and
        ``"inconsistent"`` when it contradicts itself (cached tokens above the prompt,
        DeepSeek's cache hits + misses other than the prompt, reasoning tokens above
        the completion): no reading of it can be trusted, its cheapest least of all.
    """
    usage = body.get("usage")
    if not isinstance(usage, Mapping):
        usage = _sub(_sub(body, "x_groq"), "usage")
    if not usage:
        return UsageReading(None, "missing")
    try:
        prompt = _as_int(usage.get("prompt_tokens"))
        output = _as_int(usage.get("completion_tokens"))
        if "prompt_cache_hit_tokens" in usage:
            cached = _opt_int(usage, "prompt_cache_hit_tokens")
        elif "cached_tokens" in _sub(usage, "prompt_tokens_details"):
            cached = _opt_int(_sub(usage, "prompt_tokens_details"), "cached_tokens")
        else:
            cached = _opt_int(usage, "num_cached_tokens")
        reasoning = _opt_int(_sub(usage, "completion_tokens_details"), "reasoning_tokens")
        extra: dict[str, int] = {}
        if "prompt_cache_miss_tokens" in usage:
            extra["prompt_cache_miss_tokens"] = _opt_int(usage, "prompt_cache_miss_tokens")
    except _BadUsage:
        return UsageReading(None, "invalid")
    misses = extra.get("prompt_cache_miss_tokens")
    if (
        cached > prompt
        or reasoning > output
        or (misses is not None and "prompt_cache_hit_tokens" in usage and cached + misses != prompt)
    ):
        return UsageReading(None, "inconsistent")
    time_info = _sub(body, "time_info") or usage
    total_time = time_info.get("total_time")
    if (
        isinstance(total_time, int | float)
        and not isinstance(total_time, bool)
        and math.isfinite(total_time)
        and 0 <= total_time < 1e6
    ):
        extra["provider_total_time_ms"] = round(float(total_time) * 1000)
    return UsageReading(
        Usage(
            input_tokens=prompt,
            cached_input_tokens=cached,
            output_tokens=output,
            reasoning_tokens=reasoning,
            extra=extra,
        )
    )


def parse_usage(body: Mapping[str, Any]) -> Usage | None:
    """Normalise the usage of an OpenAI-style completion body.

    Returns:
        The usage, or ``None`` when the body carries none or an unreadable one
        (see :func:`read_usage`).
    """
    return read_usage(body).usage


def _error_status(err: Mapping[str, Any]) -> int:
    """The HTTP status an error object inside a 200 stands for: its numeric ``code``
    (or ``status``) when that is one, else guessed from its type/message."""
    for key in ("code", "status"):
        value = err.get(key)
        if isinstance(value, bool):
            continue
        if isinstance(value, int) and 100 <= value <= 599:
            return value
        if isinstance(value, str) and value.strip().isdigit() and 100 <= int(value) <= 599:
            return int(value)
    words = " ".join(str(err.get(k, "")) for k in ("code", "type", "message")).lower()
    if any(marker in words for marker in _BALANCE_MARKERS):
        return 402
    if "rate" in words and "limit" in words:
        return 429
    if "auth" in words or "api key" in words:
        return 401
    return 502


def _without_choices(
    provider: str, body: Mapping[str, Any], reading: UsageReading, rate_limits: RateLimitInfo
) -> ProviderError:
    """The error a 200 body without ``choices`` stands for (see
    :func:`parse_completion_body`)."""
    usage = reading.usage
    err = body.get("error")
    if err is None and isinstance(body.get("detail"), str):
        err = body["detail"]  # FastAPI-style gateways: {"detail": "..."}
    if isinstance(err, str) and err.strip():
        err = {"message": err}  # {"error": "Insufficient Balance"}
    if isinstance(err, Mapping):
        status = _error_status(err)
        exc = error_for_status(provider, status, json.dumps(body), rate_limits)
        exc.detail = f"200 with an error object: {exc.detail}"
        exc.billed_usage = usage
        return exc
    if usage is None and reading.issue == "inconsistent":  # it billed something: the ceiling
        return ProviderUnavailable(
            provider, "200 without choices, usage self-contradictory", interrupted=True,
            status=200,
        )  # fmt: skip
    if usage is None:
        return ProviderUnavailable(provider, "200 without choices or usage", status=200)
    return ProviderUnavailable(
        provider,
        "200 without choices",
        interrupted=True,
        partial_usage=usage,
        status=200,
        billed_usage=usage,
    )


def parse_completion_body(
    provider: str,
    model: str,
    body: object,
    rate_limits: RateLimitInfo,
    *,
    paid: bool,
) -> Completion:
    """Build a :class:`Completion` from a 200 body (already JSON-decoded).

    * An error object and no ``choices`` (gateways, providers under load:
      ``{"error": {"code": 502, ...}}``): the error its code stands for, exactly as
      :func:`error_for_status` maps that HTTP status; not interrupted (the hold is
      released) unless the body also reports usage (then that usage is settled,
      ``billed_usage``).
    * No ``choices`` and no usage: nothing was generated → :class:`ProviderUnavailable`,
      not interrupted (the hold is released).
    * Usage but no ``choices``: :class:`ProviderUnavailable` carrying that usage
      (settled as reported).
    * Choices with text but usage missing, unreadable or self-contradictory: the
      completion, with ``usage_issue`` set (the cascade settles at the ceiling,
      estimated); self-contradictory usage and no ``choices``: interrupted (the ceiling).

    Raises:
        ProviderError: as above; ProviderUnavailable (interrupted) for a body that
            is not a JSON object or has no message content.
    """
    if not isinstance(body, Mapping):
        raise ProviderUnavailable(
            provider, "200 without a completion body", interrupted=True, status=200
        )
    reading = read_usage(body)
    usage, issue = reading.usage, reading.issue
    choices = body.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], Mapping):
        raise _without_choices(provider, body, reading, rate_limits)
    choice = choices[0]
    message = _sub(choice, "message")
    content = message.get("content")
    if content is None:
        content = ""
    if not isinstance(content, str):
        raise ProviderUnavailable(
            provider,
            "200 without message content",
            interrupted=True,
            partial_usage=usage,
            status=200,
        )
    finish = choice.get("finish_reason")
    answered_model = body.get("model")
    return Completion(
        text=content,
        finish_reason=finish if isinstance(finish, str) else "unknown",
        provider=provider,
        model=answered_model if isinstance(answered_model, str) and answered_model else model,
        usage=usage or Usage(),
        rate_limits=rate_limits,
        paid=paid,
        usage_issue=issue,
        tool_calls=tool_calls_of(message),
    )


def decode_json(provider: str, raw: bytes) -> object:
    """Decode a 200 body; an unreadable one is a (billed) provider failure.

    Raises:
        ProviderUnavailable: (interrupted) not JSON.
    """
    try:
        return json.loads(raw)
    except (ValueError, RecursionError) as exc:
        # JSONDecodeError and UnicodeDecodeError are ValueErrors; so is an integer
        # literal over Python's 4,300-digit limit; nesting too deep is a RecursionError
        raise ProviderUnavailable(
            provider, "200 with a body that is not JSON", interrupted=True, status=200
        ) from exc


def _error_text(body: str) -> str:
    """The provider's own error message from an error body (truncated)."""
    try:
        data = json.loads(body)
    except (ValueError, TypeError, RecursionError):  # deep nesting: RecursionError
        return body.strip()[:_DETAIL_MAX]
    if isinstance(data, Mapping):
        err = data.get("error")
        if isinstance(err, Mapping):
            data = err
        msg = data.get("message") or data.get("detail")
        if isinstance(msg, str):
            return msg[:_DETAIL_MAX]
        if msg is not None:
            return json.dumps(msg)[:_DETAIL_MAX]
    return body.strip()[:_DETAIL_MAX]


def error_for_status(
    provider: str, status: int, body: str, rate_limits: RateLimitInfo
) -> ProviderError:
    """Translate a non-2xx response into the ``llm`` error tree.

    ============  ===============================================================
    status        error
    ============  ===============================================================
    401, 403      :class:`AuthFailed`
    402           :class:`BalanceExhausted` (DeepSeek "Insufficient Balance"), and
                  any status whose message names a balance/quota-of-money error
    429           :class:`ProviderRateLimited`, or :class:`QuotaExhausted` when the
                  message names a daily limit (Groq "(RPD)"/"(TPD)")
    400/413/422   :class:`ContextTooLong` when the message is about the context
                  length (413 always), else :class:`ProviderRejected`
    404           :class:`ProviderUnavailable`: the model is unknown *at that provider*
                  (retired or misnamed in settings) — the next provider can still
                  answer, and repeated 404s open that provider's breaker
    408, 5xx      :class:`ProviderUnavailable` (503 = overloaded)
    other         :class:`ProviderUnavailable`
    ============  ===============================================================
    """
    text = _error_text(body)
    detail = f"HTTP {status}: {text}" if text else f"HTTP {status}"
    low = text.lower()
    if status in (401, 403):
        return AuthFailed(provider, f"HTTP {status}", status=status, rate_limits=rate_limits)
    if status == 402 or any(marker in low for marker in _BALANCE_MARKERS):
        return BalanceExhausted(
            provider,
            detail,
            retry_after_s=rate_limits.retry_after_s,
            status=status,
            rate_limits=rate_limits,
        )
    if status == 429:
        if any(marker in low for marker in _QUOTA_MARKERS):
            return QuotaExhausted(
                provider,
                detail,
                retry_after_s=rate_limits.retry_after_s,
                status=status,
                rate_limits=rate_limits,
            )
        return ProviderRateLimited(
            provider,
            detail,
            retry_after_s=rate_limits.retry_after_s,
            status=status,
            rate_limits=rate_limits,
        )
    if status == 413 or (
        status in (400, 422) and any(marker in low for marker in _CONTEXT_MARKERS)
    ):
        return ContextTooLong(provider, detail, status=status, rate_limits=rate_limits)
    if status in (400, 409, 422):
        return ProviderRejected(provider, detail, status=status, rate_limits=rate_limits)
    return ProviderUnavailable(provider, detail, status=status, rate_limits=rate_limits)


def transport_error(provider: str, exc: BaseException) -> ProviderUnavailable:
    """Translate an ``httpx`` transport failure (or the total deadline) into
    :class:`ProviderUnavailable`.

    A failure before the request could reach the provider (connect error or
    timeout, pool timeout) is *not* interrupted: the hold is released. Anything
    later (read timeout, the total deadline, a cut body, a body over its cap —
    :class:`~llm.providers.body_cap.BodyTooLarge`, named in the detail) is
    *interrupted*: the provider may have generated and billed tokens.
    """
    cause: BaseException = exc
    if not isinstance(exc, httpx.HTTPError | TimeoutError) and isinstance(
        exc.__cause__, httpx.HTTPError | TimeoutError
    ):
        cause = exc.__cause__
    if isinstance(cause, TimeoutError):
        return ProviderUnavailable(provider, "total deadline exceeded", interrupted=True)
    if isinstance(cause, BodyTooLarge):
        return ProviderUnavailable(provider, str(cause), interrupted=True)
    pre_token = isinstance(cause, httpx.ConnectError | httpx.ConnectTimeout | httpx.PoolTimeout)
    return ProviderUnavailable(provider, type(cause).__name__, interrupted=not pre_token)
