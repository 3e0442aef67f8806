"""Value types shared by the ledger and its callers (``llm/``, ``scheduler/``, ``bot/``).

Units: money is integer micro-USD (µUSD, 1 µUSD = 1e-6 USD) in every field whose
name ends in ``_musd``; tokens are integer counts; datetimes are aware UTC.

Vocabulary:

* *operation* — one unit of user-visible work (one chat message, one user's digest);
  has caps on cost and number of requests, occupies one in-flight slot of its user.
* *request* — one logical LLM call inside an operation; may try several providers.
* *attempt* — one provider tried for a request; each attempt takes its own *hold*.
* *hold* (reservation) — money set aside for an attempt, at its *ceiling*
  (input tokens × input price + max_tokens × output price, rounded up), on every
  applicable level and window at once; ended by *settle* (actual cost) or *release* (0).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum

__all__ = [
    "HOLD_ONLY_ORIGINS",
    "CalibrationSample",
    "Level",
    "Origin",
    "Refusal",
    "RefusalReason",
    "Usage",
    "Window",
]


class RefusalReason(StrEnum):
    """Why the ledger said no. Each has its own user-facing template."""

    KILL = "kill"  # the kill switch (global or scoped) is tripped
    LIMIT = "limit"  # a money limit of some level/window is spent
    BUSY = "busy"  # the limit would fit once outstanding holds settle
    INFLIGHT = "inflight"  # the user already has USER_MAX_INFLIGHT operations running
    RATE = "rate"  # the user started USER_MAX_PER_MINUTE operations in the last minute
    OPERATION_CAP = "operation_cap"  # the operation's max cost or max requests is reached
    LOOP = "loop"  # the same prompt was sent again as a new request in one operation
    UNAVAILABLE = "unavailable"  # the ledger could not write: fail closed
    MESSAGES = "messages"  # the courtesy daily message limit (USER_DAILY_MESSAGES)
    SHARE = "share"  # past FREE_SHARE_MAX of every free key while others use them too


class Level(StrEnum):
    """Budget level a limit belongs to."""

    USER = "user"
    CHAT = "chat"  # a group or supergroup paying as one (scope: the chat id)
    PLAN = "plan"  # everyone on one plan together (scope: the plan's name)
    TEAM = "team"
    GLOBAL = "global"
    PROVIDER = "provider"
    #: a user's prepaid wallet (scope: the user id): a balance, not a window; it pays
    #: for the paid holds the user's own allowance (user and plan levels) does not
    #: fit (docs/decisions/240-the-wallet-is-a-balance-level.md)
    WALLET = "wallet"


class Window(StrEnum):
    """Budget windows, cut in BUDGET_TZ."""

    HOUR = "hour"
    DAY = "day"
    MONTH = "month"  # the calendar month (or billing cycle) in BUDGET_TZ
    MINUTE = "minute"  # only for the per-user rate (USER_MAX_PER_MINUTE)
    BALANCE = "balance"  # the wallet's one bucket: never resets (key "")


class Origin(StrEnum):
    """What an operation is for; spend is reported per origin."""

    CHAT = "chat"
    DIGEST = "digest"
    #: a history summary folded for a chat message (a hold's origin, in that message's
    #: operation: docs/decisions/150-history-summaries-are-charged-steps.md)
    SUMMARY = "summary"
    #: a voice note's (or audio file's) transcription, a step of its chat message's
    #: operation; its quantities are audio seconds
    TRANSCRIPTION = "transcription"
    #: an answer about a photo, by a vision model, in its chat message's operation; its
    #: input tokens include the image tokens
    VISION = "vision"


#: Origins a hold may carry but no operation begins with (a summary is a step of the
#: chat message's operation, capped by that operation's caps).
HOLD_ONLY_ORIGINS: frozenset[Origin] = frozenset(
    {Origin.SUMMARY, Origin.TRANSCRIPTION, Origin.VISION}
)


@dataclass(frozen=True, slots=True)
class Refusal:
    """A refusal value: what stopped a request and until when.

    Attributes:
        reason: why.
        level: which budget level refused (``None`` for reasons without a level,
            e.g. ``inflight``).
        window: which window of that level (``None`` when not window-bound).
        resets_at: aware UTC time at which the refusing window resets (``None``
            when nothing resets on its own, e.g. a manual kill).
        busy: ``True`` when outstanding holds (not settled spend) are what
            blocked it — "retry in a minute" rather than "exhausted".
        scope: the name of the refusing scope (team name, provider name), or ``""``.
        note: operator-facing detail (kill reason); never shown to users raw.
        plan: the refused user's plan, when the ledger knew it (``""`` otherwise): the
            refusal metrics' plan label.
        ceiling_musd: a limit's refusal: the hold that did not fit (µUSD, the
            request's worst case); 0 when not a hold's.
        remaining_musd: a limit's refusal: what was left of the refusing bucket (µUSD,
            limit − settled − held, may be ≤ 0); ``None`` when not known.
        kept_musd: a global limit's refusal that the limit itself would have let
            through: what other teams' guarantees kept of it (µUSD; 0 otherwise).
    """

    reason: RefusalReason
    level: Level | None = None
    window: Window | None = None
    resets_at: datetime | None = None
    busy: bool = False
    scope: str = ""
    note: str = ""
    plan: str = ""
    ceiling_musd: int = 0
    remaining_musd: int | None = None
    kept_musd: int = 0


@dataclass(frozen=True, slots=True)
class Usage:
    """Token usage reported by a provider (or counted, for an interrupted call).

    ``input_tokens`` counts every prompt token, cached ones included;
    ``cached_input_tokens`` is the part of it served from the provider's cache.
    ``output_tokens`` counts every generated token, reasoning included;
    ``reasoning_tokens`` is the part of it spent on reasoning (priced as output).
    """

    input_tokens: int = 0
    cached_input_tokens: int = 0
    output_tokens: int = 0
    reasoning_tokens: int = 0
    extra: dict[str, int] = field(default_factory=dict)

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens


@dataclass(frozen=True, slots=True)
class CalibrationSample:
    """One model's estimate calibration, to persist with the settle it was learnt from.

    Attributes:
        provider, model: the key name and the model id.
        ratio_ppm: the reported ÷ counted input tokens, parts per million (smoothed).
        samples: how many reported counts the ratio folds.
    """

    provider: str
    model: str
    ratio_ppm: int
    samples: int
