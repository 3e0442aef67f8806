"""Values and ports of ``scheduler/``: what the bot injects and what it gets back.

Units: datetimes are aware UTC; durations are seconds; tokens are integer counts.

The bot renders everything users read (headers, notices) from these structured
values with its own templates; the only text ``scheduler/`` produces for users is
the body of a digest item (a post's summary, or an excerpt of the post itself when
no summary could be made).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, datetime
from enum import StrEnum
from typing import Protocol

from budget.protocol import OperationTicket
from budget.types import Level, Origin, RefusalReason, Window
from llm.types import Capacity, Completion, LLMRequest

__all__ = [
    "Deliverer",
    "DigestItem",
    "DigestSection",
    "Notice",
    "NoticeKind",
    "OperationPort",
    "Post",
    "SourceKind",
    "SourceRef",
    "SubscribeResult",
    "SubscribeStatus",
    "SummaryBackend",
]


class SourceKind(StrEnum):
    """What a subscription reads."""

    CHANNEL = "channel"  # a public Telegram channel through its web preview
    FEED = "feed"  # an RSS/Atom feed


@dataclass(frozen=True, slots=True)
class SourceRef:
    """A parsed /sub argument.

    Attributes:
        kind: channel or feed.
        key: the channel name in lower case (``durov``) or the feed URL as given.
    """

    kind: SourceKind
    key: str

    @property
    def display(self) -> str:
        """``@name`` for a channel, the URL for a feed."""
        return f"@{self.key}" if self.kind is SourceKind.CHANNEL else self.key


@dataclass(frozen=True, slots=True)
class Post:
    """One post of a channel or one entry of a feed.

    Attributes:
        source_key: channel name (lower case) or feed URL.
        post_id: channel post number; for feeds a stable number derived from the entry
            id (ordering of feed entries uses ``published``).
        published: aware UTC datetime of the post (``None`` if the source gave none).
        text: the post's own text (a reply's quoted text is not part of it), plain.
        link: public link to the post (``https://t.me/<name>/<id>`` or the entry link).
        forwarded_from: name of the channel/user it was forwarded from, or ``None``.
        title: a feed entry's title, plain (``""`` for channel posts); the digest's
            link label.
    """

    source_key: str
    post_id: int
    published: datetime | None
    text: str
    link: str
    forwarded_from: str | None = None
    title: str = ""


@dataclass(frozen=True, slots=True)
class DigestItem:
    """One post in a digest.

    Attributes:
        post_id: the post number.
        link: link to the post.
        published: aware UTC datetime of the post, or ``None``.
        summary: the summary (or, when ``summarized`` is False, an excerpt of the post).
        summarized: False when no summary could be made (providers unavailable or the
            digest's operation cap was reached) and ``summary`` is an excerpt.
        forwarded_from: the origin of a forwarded post, or ``None``.
        title: a feed entry's title (``""`` for channel posts): the link's label.
    """

    post_id: int
    link: str
    published: datetime | None
    summary: str
    summarized: bool = True
    forwarded_from: str | None = None
    title: str = ""


@dataclass(frozen=True, slots=True)
class DigestSection:
    """The part of a digest for one source; the bot renders headers and splits messages.

    Attributes:
        kind: channel or feed.
        source_key: channel name or feed URL.
        title: the channel's/feed's title as last seen (``""`` if unknown).
        link: link to the channel (``https://t.me/<name>``) or the feed URL.
        items: posts, oldest first.
    """

    kind: SourceKind
    source_key: str
    title: str
    link: str
    items: tuple[DigestItem, ...]


class NoticeKind(StrEnum):
    """What a :class:`Notice` tells the user; the bot picks the template by it."""

    #: The ledger refused the digest; it goes out once the refusing window resets.
    #: Fields: ``reason``, ``level``, ``window``, ``resets_at``, ``local_date``.
    DEFERRED = "deferred"
    #: A subscribed channel no longer has a public preview. Field: ``channel``.
    CHANNEL_LOST = "channel_lost"
    #: The digest that follows is late (sent after the bot was down or deferred).
    #: Fields: ``local_date``, ``due_at``.
    LATE = "late"
    #: Some posts of the digest that follows could not be summarised and are shown as
    #: excerpts. Fields: ``count``, ``cause`` (``providers`` or ``operation_cap``).
    UNAVAILABLE = "unavailable"


@dataclass(frozen=True, slots=True)
class Notice:
    """A structured notice to one user; the bot renders it with its templates. Only
    the fields its :class:`NoticeKind` names are set.

    Attributes:
        kind: which notice.
        reason, level, window: the ledger's refusal (``DEFERRED``).
        resets_at: aware UTC time the refusing window resets, ``None`` when nothing
            resets on its own (a kill) (``DEFERRED``).
        local_date: the digest's date in the user's timezone (``DEFERRED``, ``LATE``).
        due_at: aware UTC time the digest was due (``LATE``).
        channel: the channel's name (``CHANNEL_LOST``).
        count: posts shown as excerpts (``UNAVAILABLE``).
        cause: ``providers`` or ``operation_cap`` (``UNAVAILABLE``).
    """

    kind: NoticeKind
    reason: RefusalReason | None = None
    level: Level | None = None
    window: Window | None = None
    resets_at: datetime | None = None
    local_date: date | None = None
    due_at: datetime | None = None
    channel: str = ""
    count: int = 0
    cause: str = ""


class Deliverer(Protocol):
    """How digests and notices reach Telegram; implemented by the bot.

    Both methods raise :class:`scheduler.errors.DeliveryRetryAfter` on Telegram's 429
    and :class:`scheduler.errors.RecipientGone` on 403 (blocked/deactivated). The bot
    splits a digest into messages within Telegram's limits.
    """

    async def send_digest(
        self,
        user_id: int,
        chat_id: int,
        language: str,
        parts: Sequence[DigestSection],
        *,
        skip_messages: int = 0,
    ) -> None:
        """Send one digest: all its messages but the first ``skip_messages`` (delivered
        by an earlier attempt). A 429 part-way says how many are delivered
        (:attr:`scheduler.errors.DeliveryRetryAfter.messages_sent`)."""
        ...

    async def notify(self, user_id: int, chat_id: int, language: str, notice: Notice) -> None:
        """Send one notice."""
        ...


class Step(StrEnum):
    """A digest run's progress, as :meth:`scheduler.runner.DigestRunner.run_now` reports
    it (the bot turns each into a sentence); see :class:`ProgressStep` for the details
    each carries."""

    STARTED = "started"
    FETCHED = "fetched"  # count: posts fetched
    SUMMARISED = "summarised"  # count of total posts summarised so far
    DEFERRED = "deferred"  # reason: the ledger's refusal; goes out when the window resets
    EMPTY = "empty"  # nothing new to send
    DELIVERED = "delivered"
    DELIVERY_RETRY = "delivery_retry"  # retry_after_s: Telegram's wait
    RECIPIENT_GONE = "recipient_gone"  # the user blocked the bot; marked inactive
    ALREADY_SENT = "already_sent"  # today's digest went out before
    NO_PROFILE = "no_profile"  # the user never wrote to the bot
    ELSEWHERE = "elsewhere"  # another bot process (replica) is making or delivering it
    NOT_ALLOWED = "not_allowed"  # the user may not use the bot (access rules): nothing made

    @property
    def final(self) -> bool:
        """True for the steps after which the run reports nothing more."""
        return self in _FINAL_STEPS


_FINAL_STEPS = frozenset(
    {
        Step.DELIVERED,
        Step.DEFERRED,
        Step.EMPTY,
        Step.RECIPIENT_GONE,
        Step.ALREADY_SENT,
        Step.NO_PROFILE,
        Step.ELSEWHERE,
        Step.NOT_ALLOWED,
    }
)


@dataclass(frozen=True, slots=True)
class ProgressStep:
    """One progress report of a digest run.

    Attributes:
        step: what happened.
        count: posts fetched (``FETCHED``) or summarised so far (``SUMMARISED``).
        total: posts to summarise (``SUMMARISED``).
        reason: the ledger's refusal reason (``DEFERRED``).
        retry_after_s: seconds Telegram asked to wait (``DELIVERY_RETRY``).
    """

    step: Step
    count: int = 0
    total: int = 0
    reason: RefusalReason | None = None
    retry_after_s: float = 0.0


class OperationPort(Protocol):
    """The part of :class:`budget.protocol.LedgerPort` the digest runner uses (one
    operation per digest; the cascade takes the holds)."""

    async def begin_operation(
        self,
        user_id: int,
        origin: Origin,
        *,
        max_musd: int | None = None,
        max_requests: int | None = None,
    ) -> OperationTicket:
        """Admit an operation (see :meth:`budget.protocol.LedgerPort.begin_operation`).

        Raises:
            budget.errors.HoldRefused: kill, in-flight or rate refusal.
        """
        ...

    async def end_operation(self, op: OperationTicket) -> None:
        """Free the operation's in-flight slot. Idempotent."""
        ...


class SummaryBackend(Protocol):
    """The part of ``llm.cascade.cascade.Cascade`` the digest runner uses.

    ``complete`` raises :class:`budget.errors.HoldRefused` when the ledger refuses and
    :class:`llm.errors.LLMError` subclasses (``AllProvidersFailed`` when nobody could
    answer) otherwise.
    """

    async def complete(self, op: OperationTicket, request: LLMRequest) -> Completion:
        """Run one request inside ``op`` down the provider ladder."""
        ...

    def capacity(self) -> list[Capacity]:
        """Each provider's remaining tokens and reset time (monotonic), cascade order."""
        ...


class SubscribeStatus(StrEnum):
    """IntakeStatus of /sub (the bot has one template per value)."""

    OK = "ok"
    ALREADY = "already"
    INVALID = "invalid"  # not a channel name or http(s) feed URL
    NO_PREVIEW = "no_preview"  # channel without public preview / not a readable feed
    REFUSED_ADDRESS = "refused_address"  # feed URL to a non-public address (SSRF guard)
    UNRESOLVED = "unresolved"  # the feed's host name resolved to no address (guard fails closed)
    TOO_MANY = "too_many"  # the user has reached the subscription limit
    UNAVAILABLE = "unavailable"  # the source could not be fetched right now; try later
    NOT_SUBSCRIBED = "not_subscribed"  # /unsub of something the user does not follow
    RATE_LIMITED = "rate_limited"  # too many source look-ups by this user; retry_after_s


@dataclass(frozen=True, slots=True)
class SubscribeResult:
    """What /sub, /unsub return.

    Attributes:
        status: the outcome.
        source: the parsed source (``None`` when the argument was invalid).
        title: channel/feed title when known, else ``""``.
        limit: the subscription limit (for ``too_many``), else 0.
        retry_after_s: seconds until another look-up is allowed (``rate_limited``), else 0.
    """

    status: SubscribeStatus
    source: SourceRef | None = None
    title: str = ""
    limit: int = 0
    retry_after_s: int = 0
