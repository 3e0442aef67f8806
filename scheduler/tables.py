"""Tables of ``scheduler/`` (own ``DeclarativeBase``; migration ``0002_digests``).

* ``user_profiles`` — one row per Telegram user: chat, language, timezone, digest time,
  digest on/off, active (False after a 403 until the user writes again). The bot uses it
  for /tz and /lang too, through :class:`scheduler.profiles.ProfileRepository`.
* ``digest_sources`` — channels and feeds: title, newest post id seen, ``preview_lost``.
* ``digest_subscriptions`` — user × source, with the user's own cursor (last post id
  included in one of their digests) and whether the loss of preview was reported.
* ``digest_delivered`` — feed entries a subscription has delivered (by entry id, never
  by date), the last N per subscription (N = max(4 × the feed's size, 200)); migration
  ``0006_feed_delivered``.
* ``digest_runs`` — one row per (user, local date), unique: status, ``late``,
  ``retry_not_before``, the generated digest (JSON) so delivery never regenerates it.
* ``summary_cache`` — summaries shared by every reader, keyed by (source, post id,
  content hash, language, prompt version).
* ``summary_pending`` — a summary being made right now, by which process, until when
  (the cache's single flight across processes; migration ``0015_digest_claims``).
* ``digest_ticks`` — one row: when any process last looked for due digests, so a
  process that starts knows which due instants fell while none was running
  (migration ``0023_digest_restarts``, with ``digest_runs.messages_sent``: the
  messages of a digest delivered before a flood wait, so a retry in any process sends
  the rest only).

``digest_runs.claimed_by`` names the process making or delivering that run (its
``budget_processes`` id; migration ``0015_digest_claims``): several processes on one
PostgreSQL database run each digest once (:mod:`scheduler.claims`).

Datetimes are stored timezone-aware (UTC).
"""

from __future__ import annotations

from datetime import UTC, date, datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    Date,
    DateTime,
    ForeignKey,
    Integer,
    MetaData,
    String,
    Text,
    TypeDecorator,
    UniqueConstraint,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.types import TypeEngine

__all__ = [
    "Base",
    "DeliveredEntry",
    "DigestRun",
    "DigestSource",
    "DigestSubscription",
    "RunStatus",
    "SummaryCacheEntry",
    "SummaryPending",
    "UTCDateTime",
    "UserProfile",
    "metadata",
]


class UTCDateTime(TypeDecorator[datetime]):
    """An aware-UTC datetime on every backend (SQLite keeps no offset: stored as naive UTC;
    PostgreSQL: ``timestamptz``).

    Raises:
        ValueError: when a naive datetime is written.
    """

    impl = DateTime
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> TypeEngine[Any]:
        # PostgreSQL has a real instant type: timestamptz
        if dialect.name == "postgresql":
            return dialect.type_descriptor(DateTime(timezone=True))
        return dialect.type_descriptor(DateTime())

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime written to a UTCDateTime column")
        if dialect.name == "postgresql":
            return value.astimezone(UTC)
        return value.astimezone(UTC).replace(tzinfo=None)

    def process_result_value(self, value: Any, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        assert isinstance(value, datetime)
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value.astimezone(UTC)


class Base(DeclarativeBase):
    """Declarative base of the scheduler tables."""

    metadata = MetaData(
        naming_convention={
            "ix": "ix_%(column_0_label)s",
            "uq": "uq_%(table_name)s_%(column_0_name)s",
            "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
            "pk": "pk_%(table_name)s",
        }
    )


metadata = Base.metadata


class RunStatus(StrEnum):
    """Life of a (user, local date) digest."""

    PENDING = "pending"  # being generated
    DEFERRED = "deferred"  # the ledger refused; retry at retry_not_before
    READY = "ready"  # generated (payload stored), delivery pending/retrying
    SENT = "sent"  # delivered
    EMPTY = "empty"  # nothing new to send that day
    FAILED_DELIVERY = "failed_delivery"  # recipient gone (403) or retries exhausted


class UserProfile(Base):
    """A Telegram user's preferences (shared with the chat part of the bot)."""

    __tablename__ = "user_profiles"

    user_id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    chat_id: Mapped[int] = mapped_column(BigInteger)
    language: Mapped[str] = mapped_column(String(8), default="en")
    tz: Mapped[str | None] = mapped_column(String(64), default=None)
    digest_time: Mapped[str] = mapped_column(String(5), default="09:00")
    digest_enabled: Mapped[bool] = mapped_column(Boolean, default=True)
    active: Mapped[bool] = mapped_column(Boolean, default=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    last_seen_at: Mapped[datetime] = mapped_column(UTCDateTime())


class DigestSource(Base):
    """A channel or feed that at least one user subscribed to."""

    __tablename__ = "digest_sources"
    __table_args__ = (UniqueConstraint("kind", "key"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    kind: Mapped[str] = mapped_column(String(16))
    key: Mapped[str] = mapped_column(String(2048))
    title: Mapped[str] = mapped_column(String(256), default="")
    last_seen_post_id: Mapped[int | None] = mapped_column(BigInteger, default=None)
    preview_lost: Mapped[bool] = mapped_column(Boolean, default=False)
    checked_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), default=None)


class DigestSubscription(Base):
    """User × source, with the user's cursor."""

    __tablename__ = "digest_subscriptions"
    __table_args__ = (UniqueConstraint("user_id", "source_id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    user_id: Mapped[int] = mapped_column(
        BigInteger, ForeignKey("user_profiles.user_id", ondelete="CASCADE"), index=True
    )
    source_id: Mapped[int] = mapped_column(
        Integer, ForeignKey("digest_sources.id", ondelete="CASCADE"), index=True
    )
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    last_post_id: Mapped[int | None] = mapped_column(BigInteger, default=None)
    last_digest_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), default=None)
    lost_notified: Mapped[bool] = mapped_column(Boolean, default=False)


class DeliveredEntry(Base):
    """A feed entry one subscription has delivered (or skipped as backlog at its start).

    ``post_id`` is the entry's identity number (:func:`scheduler.sources.feeds.entry_identity`);
    ``seen_at`` is the last digest that saw the entry in the feed (oldest rows are pruned
    first, so entries still in the feed are never forgotten).
    """

    __tablename__ = "digest_delivered"
    __table_args__ = (UniqueConstraint("subscription_id", "post_id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    subscription_id: Mapped[int] = mapped_column(
        Integer, ForeignKey("digest_subscriptions.id", ondelete="CASCADE"), index=True
    )
    post_id: Mapped[int] = mapped_column(BigInteger)
    seen_at: Mapped[datetime] = mapped_column(UTCDateTime())


class DigestRun(Base):
    """Exactly one per (user, local date)."""

    __tablename__ = "digest_runs"
    __table_args__ = (UniqueConstraint("user_id", "local_date"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    user_id: Mapped[int] = mapped_column(BigInteger, index=True)
    local_date: Mapped[date] = mapped_column(Date)
    #: indexed: every tick looks up the ``ready`` runs of any date
    status: Mapped[str] = mapped_column(String(16), default=RunStatus.PENDING.value, index=True)
    due_at: Mapped[datetime] = mapped_column(UTCDateTime())
    late: Mapped[bool] = mapped_column(Boolean, default=False)
    retry_not_before: Mapped[datetime | None] = mapped_column(UTCDateTime(), default=None)
    refusal_reason: Mapped[str | None] = mapped_column(String(32), default=None)
    deferred_notified: Mapped[bool] = mapped_column(Boolean, default=False)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    delivery_attempts: Mapped[int] = mapped_column(Integer, default=0)
    post_count: Mapped[int] = mapped_column(Integer, default=0)
    payload: Mapped[str | None] = mapped_column(Text, default=None)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime())
    sent_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), default=None)
    #: the process making or delivering this run (``None``: nobody); see scheduler.claims
    claimed_by: Mapped[str | None] = mapped_column(String(32), default=None)
    claimed_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), default=None)
    #: messages of the digest delivered before a flood wait stopped it (the retry
    #: sends the rest); see docs/decisions/031-digests-across-restarts.md
    messages_sent: Mapped[int] = mapped_column(Integer, default=0)


class SummaryCacheEntry(Base):
    """One post's summary in one language under one prompt version."""

    __tablename__ = "summary_cache"
    __table_args__ = (
        UniqueConstraint("source_key", "post_id", "content_hash", "language", "prompt_version"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    source_key: Mapped[str] = mapped_column(String(2048))
    post_id: Mapped[int] = mapped_column(BigInteger)
    content_hash: Mapped[str] = mapped_column(String(64))
    language: Mapped[str] = mapped_column(String(8))
    prompt_version: Mapped[str] = mapped_column(String(32))
    summary: Mapped[str] = mapped_column(Text)
    provider: Mapped[str] = mapped_column(String(32), default="")
    model: Mapped[str] = mapped_column(String(128), default="")
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())


class SummaryPending(Base):
    """A summary one process is making now: the others wait for its cache entry.

    ``key_hash`` is the sha256 hex of the cache key (:func:`scheduler.cache.key_hash`);
    ``owner`` the maker's process id (``budget_processes``). The row is deleted when the
    entry is stored or the making failed; a row whose owner stopped heartbeating, or
    whose ``expires_at`` passed, is taken over by the next process that needs it.
    """

    __tablename__ = "summary_pending"

    key_hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    owner: Mapped[str] = mapped_column(String(32))
    expires_at: Mapped[datetime] = mapped_column(UTCDateTime())
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())


class DigestTick(Base):
    """When a process last looked for due digests (one row, ``id`` 1).

    A due instant after ``ticked_at`` and before a process's next look fell while no
    process was looking: the bot was down (see
    ``docs/decisions/031-digests-across-restarts.md``). Every process writes it at each
    tick; it only moves forward.
    """

    __tablename__ = "digest_ticks"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    ticked_at: Mapped[datetime] = mapped_column(UTCDateTime())
