"""The error tree of ``llm/``.

Every SDK or HTTP failure is translated into this tree at the client boundary
(``llm/providers/``); nothing above ``llm/`` sees ``groq``, ``mistralai`` or
``httpx`` exception types. Budget refusals are *not* wrapped: they propagate as
:class:`budget.errors.HoldRefused`.

::

    LLMError
    ├── ProviderError              .provider, .rate_limits, .status — one attempt failed
    │   ├── ProviderRateLimited    .retry_after_s — 429 (per-minute limits); fall back
    │   ├── QuotaExhausted         .retry_after_s — daily quota spent; fall back
    │   │   └── BalanceExhausted   402 / a balance error in any body: the key is disabled
    │   │                          until an admin re-enables it; fall back
    │   ├── ProviderUnavailable    .interrupted, .partial_usage — 5xx, timeout, connection,
    │   │                          overloaded, garbage 200, stream cut; fall back
    │   ├── ProviderRejected       400/404/413/422 — our request is wrong; stop
    │   │   ├── ContextTooLong     the prompt does not fit this model; only a larger one may try
    │   │   └── MediaTooLarge      .limit_bytes — an upload (audio, image) over this provider's
    │   │                          size limit (413); only a provider with a larger one may try
    │   └── AuthFailed             401/403 — the key is disabled until re-enabled
    ├── AllProvidersFailed         .attempts, .skipped — no provider could answer
    └── EmptyCompletion            .provider, .cost_musd — answered with no usable text
                                   (billed, settled as reported; not an answer)

Messages never contain a key: clients build them from the status code and the
provider's own error text only.
"""

from __future__ import annotations

from collections.abc import Sequence

from budget.errors import HoldRefused
from budget.types import Usage
from llm.types import RateLimitInfo

__all__ = [
    "AllProvidersFailed",
    "AuthFailed",
    "BalanceExhausted",
    "ContextTooLong",
    "EmptyCompletion",
    "LLMError",
    "MediaTooLarge",
    "ProviderError",
    "ProviderRateLimited",
    "ProviderRejected",
    "ProviderUnavailable",
    "QuotaExhausted",
    "nothing_answered",
    "provider_wait",
]


class LLMError(Exception):
    """Base of every error raised by ``llm/``."""


class ProviderError(LLMError):
    """One attempt at one provider key failed.

    Attributes:
        provider: provider key name (``groq``, ``groq2``, ``mistral``, ...).
        detail: short operator-facing text (status and the provider's message,
            truncated; never a key).
        status: HTTP status, or ``None`` when no response was received.
        rate_limits: rate-limit headers of the failed response, if any.
        billed_usage: usage the provider reported with the failure (an error object
            inside a 200 that still carries ``usage``): the cascade settles it
            instead of releasing the hold.
    """

    def __init__(
        self,
        provider: str,
        detail: str = "",
        *,
        status: int | None = None,
        rate_limits: RateLimitInfo | None = None,
        billed_usage: Usage | None = None,
    ) -> None:
        super().__init__(f"{provider}: {type(self).__name__}" + (f" ({detail})" if detail else ""))
        self.provider = provider
        self.detail = detail
        self.status = status
        self.rate_limits = rate_limits
        self.billed_usage = billed_usage


class ProviderRateLimited(ProviderError):
    """429: the key hit a rate limit.

    Attributes:
        retry_after_s: seconds the provider asked us to wait (``Retry-After`` /
            ``retry-after-ms``), ``None`` when it did not say.
    """

    def __init__(
        self,
        provider: str,
        detail: str = "",
        *,
        retry_after_s: float | None = None,
        status: int | None = 429,
        rate_limits: RateLimitInfo | None = None,
    ) -> None:
        super().__init__(provider, detail, status=status, rate_limits=rate_limits)
        self.retry_after_s = retry_after_s


class QuotaExhausted(ProviderError):
    """The account's quota or balance is spent (402, or a 429 naming a daily limit).

    Attributes:
        retry_after_s: seconds until the quota resets, if the provider said.
    """

    def __init__(
        self,
        provider: str,
        detail: str = "",
        *,
        retry_after_s: float | None = None,
        status: int | None = None,
        rate_limits: RateLimitInfo | None = None,
    ) -> None:
        super().__init__(provider, detail, status=status, rate_limits=rate_limits)
        self.retry_after_s = retry_after_s


class BalanceExhausted(QuotaExhausted):
    """402 (DeepSeek "Insufficient Balance") or a balance/quota error in any body:
    the account cannot pay. The key is disabled like after an auth failure until
    an admin re-enables it (``/providers enable``)."""


class ProviderUnavailable(ProviderError):
    """The provider could not answer: 5xx, timeout, connection error, garbage 200, cut stream.

    Attributes:
        interrupted: ``True`` when the request reached the provider and may have
            consumed tokens (total deadline hit, body cut mid-way, 200 with an
            unreadable body); the cascade then settles by the interrupted-call
            rule instead of releasing the hold.
        partial_usage: usage the provider reported before failing, if any.
    """

    def __init__(
        self,
        provider: str,
        detail: str = "",
        *,
        interrupted: bool = False,
        partial_usage: Usage | None = None,
        status: int | None = None,
        rate_limits: RateLimitInfo | None = None,
        billed_usage: Usage | None = None,
    ) -> None:
        super().__init__(
            provider, detail, status=status, rate_limits=rate_limits, billed_usage=billed_usage
        )
        self.interrupted = interrupted
        self.partial_usage = partial_usage


class ProviderRejected(ProviderError):
    """400/404/413/422: the provider refused our request as malformed; no fallback."""


class ContextTooLong(ProviderRejected):
    """The prompt plus ``max_tokens`` exceeds this model's context window."""


class MediaTooLarge(ProviderRejected):
    """A media upload (an audio file, an image) is over this provider's size limit: a
    413, or refused before sending because it is over the documented limit.

    Attributes:
        limit_bytes: the provider's limit, bytes, when known (``None``: the provider
            only said 413).
    """

    def __init__(
        self,
        provider: str,
        detail: str = "",
        *,
        limit_bytes: int | None = None,
        status: int | None = 413,
        rate_limits: RateLimitInfo | None = None,
    ) -> None:
        super().__init__(provider, detail, status=status, rate_limits=rate_limits)
        self.limit_bytes = limit_bytes


class AuthFailed(ProviderError):
    """401/403: the key is revoked, wrong or region-blocked."""


class AllProvidersFailed(LLMError):
    """No provider could serve the request; nothing was charged for pre-token failures.

    Attributes:
        attempts: each attempt's failure, in cascade order.
        skipped: ``(provider, reason)`` for every provider skipped without a request
            (reasons: ``disabled``, ``open``, ``paced``, ``paid_not_allowed``,
            ``context``, ``tried``).
    """

    def __init__(
        self,
        attempts: Sequence[ProviderError],
        skipped: Sequence[tuple[str, str]] = (),
    ) -> None:
        self.attempts: list[ProviderError] = list(attempts)
        self.skipped: list[tuple[str, str]] = list(skipped)
        tried = ", ".join(f"{e.provider}:{type(e).__name__}" for e in self.attempts) or "none"
        skip = ", ".join(f"{p}:{r}" for p, r in self.skipped) or "none"
        super().__init__(f"all providers failed (tried {tried}; skipped {skip})")


class EmptyCompletion(LLMError):
    """The provider answered (and billed) but with no usable text: blank content, or
    ``finish_reason == "length"`` with nothing visible (a reasoning model spent all of
    ``max_tokens`` thinking). The spend was settled as reported; it is a failed
    attempt for the answer, never an answer.

    Attributes:
        provider: provider key name.
        finish_reason: the provider's finish reason.
        cost_musd: µUSD booked by the ledger for it.
    """

    def __init__(self, provider: str, finish_reason: str, cost_musd: int) -> None:
        super().__init__(f"{provider}: empty completion (finish_reason={finish_reason})")
        self.provider = provider
        self.finish_reason = finish_reason
        self.cost_musd = cost_musd


def provider_wait(exc: ProviderRateLimited | QuotaExhausted) -> float | None:
    """The wait the provider named: Retry-After, else the reset of an exhausted
    window (``x-ratelimit-reset-*`` with nothing remaining); ``None`` = not said."""
    if exc.retry_after_s is not None:
        return exc.retry_after_s
    rl = exc.rate_limits
    if rl is None:
        return None
    resets = [
        reset
        for remaining, reset in (
            (rl.remaining_requests, rl.reset_requests_s),
            (rl.remaining_tokens, rl.reset_tokens_s),
        )
        if remaining == 0 and reset is not None
    ]
    return max(resets) if resets else None


def nothing_answered(
    failures: list[ProviderError],
    skipped: list[tuple[str, str]],
    context_error: ContextTooLong | None,
    budget_refusal: HoldRefused | None,
    share_refusal: HoldRefused | None,
) -> Exception:
    """What a cascade raises when no key answered: the context error when every failure
    was one, the ledger's refusal when nothing failed, the fair-share refusal when a
    free key turned the request away for its share (never the paid anchor on others'
    money: :mod:`llm.keys.shares`), else :class:`AllProvidersFailed`."""
    if context_error is not None and all(isinstance(e, ContextTooLong) for e in failures):
        return context_error
    if budget_refusal is not None and not failures:
        return budget_refusal
    if share_refusal is not None:
        return share_refusal
    return AllProvidersFailed(failures, skipped)
