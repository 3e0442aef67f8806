"""The bot's own tables: seen messages (exactly-once intake), chat history, the outbox,
the operator notices sent once (alerts, spend reports), each chat's persona and model,
who may use the bot (runtime allow and ban entries, invites, notices) and the Telegram
Stars payments."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import (
    BigInteger,
    Boolean,
    DateTime,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

__all__ = [
    "AccessEntry",
    "AccessNotice",
    "Base",
    "ChatPrefsRow",
    "ChatSummary",
    "ChatTurn",
    "CostFooter",
    "Invite",
    "InviteUse",
    "OpsAlertMute",
    "OpsNotice",
    "OpsReconciliation",
    "PendingAllow",
    "PendingAnswer",
    "SeenMessage",
    "StarPayment",
    "metadata",
]


class Base(DeclarativeBase):
    """Declarative base of ``bot/`` tables."""


metadata = Base.metadata


class SeenMessage(Base):
    """A chat message the bot has taken in; recorded before anything else is done.

    ``status``: ``received`` (being handled), ``answered``, ``command``, ``refused``, ``failed``,
    ``stale`` (sent while the bot was down), ``lost`` (the process died while handling
    it; the user was asked to resend), ``joined`` (a part of a long paste, answered with
    the paste's first message), ``undeliverable`` (the answer or template could not be
    sent: Telegram answered 400/403 for that chat; never generated again), ``dropped``
    (webhook mode: taken in, then dropped before a handler, e.g. over the update rate).
    """

    __tablename__ = "seen_messages"
    __table_args__ = (UniqueConstraint("chat_id", "message_id", name="uq_seen_chat_message"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    chat_id: Mapped[int] = mapped_column(BigInteger)
    message_id: Mapped[int] = mapped_column(BigInteger)
    user_id: Mapped[int] = mapped_column(BigInteger, index=True)
    status: Mapped[str] = mapped_column(String(16), index=True)
    language: Mapped[str] = mapped_column(String(8), default="en")
    #: forum topic (``message_thread_id``) of the message, ``None`` outside topics
    thread_id: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    received_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    #: the process that took it in (PostgreSQL: ``budget_processes.process_id``): after
    #: a crash only a dead process's messages are "lost"; ``None`` on SQLite (one process)
    process_id: Mapped[str | None] = mapped_column(String(32), nullable=True)


class ChatTurn(Base):
    """One turn of a user's conversation in one chat and topic (``role`` user or
    assistant); see ``bot.storage.repos.Conversation``."""

    __tablename__ = "chat_turns"
    #: the history's load (newest first) and /reset: one user's turns in one chat/topic
    __table_args__ = (Index("ix_chat_turns_conversation", "user_id", "chat_id", "thread_id", "id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    user_id: Mapped[int] = mapped_column(BigInteger)
    #: the chat the turn was said in (a private chat's id is the user's id)
    chat_id: Mapped[int] = mapped_column(BigInteger)
    #: the forum topic (``message_thread_id``); ``None`` outside topics
    thread_id: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    role: Mapped[str] = mapped_column(String(16))
    content: Mapped[str] = mapped_column(Text)
    tokens: Mapped[int] = mapped_column(Integer)
    #: the turn as one chat message in the encoding, no safety factor, no reply priming
    #: (``budget.pricing.tokens.TokenCounter.raw_messages`` of it minus 3); ``None`` for turns
    #: stored before revision 0010 (counted when loaded)
    raw_tokens: Mapped[int | None] = mapped_column(Integer, nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class ChatSummary(Base):
    """The running summary of one conversation's older turns (see
    ``bot.chat.folding``): at most one per (user, chat, topic); ``/reset`` deletes it.

    ``through_turn_id``: the newest ``chat_turns.id`` folded (later prompts send the
    turns after it); ``content`` the summary (``""`` when no summary could be made yet:
    the folded turns were cut); ``tokens``/``raw_tokens`` its counts as a prompt turn
    (as ``ChatTurn``); ``summarised_turns``/``dropped_turns`` how many turns the
    summary covers and how many were cut because a summary could not be made.
    """

    __tablename__ = "chat_summaries"
    __table_args__ = (Index("ix_chat_summaries_conversation", "user_id", "chat_id", "thread_id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    user_id: Mapped[int] = mapped_column(BigInteger)
    chat_id: Mapped[int] = mapped_column(BigInteger)
    thread_id: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    through_turn_id: Mapped[int] = mapped_column(Integer)
    content: Mapped[str] = mapped_column(Text)
    tokens: Mapped[int] = mapped_column(Integer)
    raw_tokens: Mapped[int] = mapped_column(Integer)
    summarised_turns: Mapped[int] = mapped_column(Integer)
    dropped_turns: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class CostFooter(Base):
    """A user who asked for the cost footer under each answer (``/cost on``); ``/cost
    off`` deletes the row."""

    __tablename__ = "chat_cost_footers"

    user_id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    changed_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class PendingAnswer(Base):
    """A paid answer Telegram would not take yet (a flood wait): kept until it is sent.

    ``text`` is the answer's Markdown; ``parts_sent`` of its parts were delivered before
    the wait; ``not_before`` is when the wait ends (aware UTC); ``attempts`` counts sends
    that hit a wait or an error.
    """

    __tablename__ = "outbox"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    chat_id: Mapped[int] = mapped_column(BigInteger)
    reply_to: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    #: forum topic (``message_thread_id``) of the message answered; ``None`` outside topics
    thread_id: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    text: Mapped[str] = mapped_column(Text)
    parts_sent: Mapped[int] = mapped_column(Integer, default=0)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    not_before: Mapped[datetime] = mapped_column(DateTime(timezone=True), index=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class ChatPrefsRow(Base):
    """A chat's persona and model (``/persona``, ``/model``): one row per chat, every
    topic of it included; no row = the default persona and the cascade's own models.

    ``persona`` is a built-in persona's key or ``custom`` (then ``persona_text`` is the
    text, at most PERSONA_MAX_CHARS characters); ``""`` = the default. ``model`` is a
    model id (``None``: automatic). ``changed_by`` is the Telegram user who changed it last.
    """

    __tablename__ = "chat_prefs"

    chat_id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    persona: Mapped[str] = mapped_column(String(32), default="")
    persona_text: Mapped[str | None] = mapped_column(Text, nullable=True)
    model: Mapped[str | None] = mapped_column(String(128), nullable=True)
    changed_by: Mapped[int] = mapped_column(BigInteger)
    changed_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class OpsNotice(Base):
    """An operator notice that is told once (docs/decisions/074-alerts-before-the-caps.md,
    075-spend-reports.md): a threshold of a limit in one window, or the spend report of
    one period. The process that inserts the row sends it; any other process, or the
    same one after a restart, finds the key taken and sends nothing.

    ``key`` e.g. ``alert:global::hour:2026-03-02T21:00Z:0.8`` or
    ``report:daily:2026-03-02``; ``kind`` ``alert`` or ``report``.
    """

    __tablename__ = "ops_notices"

    key: Mapped[str] = mapped_column(String(200), primary_key=True)
    kind: Mapped[str] = mapped_column(String(16))
    sent_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class OpsAlertMute(Base):
    """An alert type the admins muted with ``/alerts`` (docs/decisions/181-alerts-can-be-muted.md):
    ``alert_type`` one of :data:`bot.ops.mutes.ALERT_TYPES`; no row: the type is told."""

    __tablename__ = "ops_alert_mutes"

    alert_type: Mapped[str] = mapped_column(String(16), primary_key=True)
    muted_by: Mapped[int] = mapped_column(BigInteger)
    muted_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class OpsReconciliation(Base):
    """The last ``/reconcile`` of one provider key, which the spend reports name
    (docs/decisions/182-reports-say-when-each-key-was-reconciled.md): when and by whom,
    the period compared (aware UTC), the export's file name, whether every step matched,
    and the period's totals in µUSD (ledger, export)."""

    __tablename__ = "ops_reconciliations"

    key_name: Mapped[str] = mapped_column(String(32), primary_key=True)
    at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    by_user: Mapped[int] = mapped_column(BigInteger)
    period_start: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    period_end: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    file_name: Mapped[str] = mapped_column(String(128))
    matched: Mapped[bool] = mapped_column(Boolean)
    ledger_musd: Mapped[int] = mapped_column(BigInteger)
    export_musd: Mapped[int] = mapped_column(BigInteger)


class AccessEntry(Base):
    """Who was let in or shut out at runtime (``bot.access``): one row per user id, or per
    chat id for a group or a channel (negative).

    ``allowed``: 1 when ``/allow``, an invite, or an admin adding the bot to a group let
    it in (``ALLOWED_USER_IDS``/``ALLOWED_CHAT_IDS`` are not stored); ``banned``: 1 when
    ``/ban`` shut it out, which wins over everything; ``source`` says how
    (``allow``, ``invite``, ``admin_added``, ``ban``); ``reason`` the ban's reason.
    """

    __tablename__ = "access_entries"

    subject_id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    allowed: Mapped[int] = mapped_column(Integer, default=0)
    banned: Mapped[int] = mapped_column(Integer, default=0)
    source: Mapped[str] = mapped_column(String(16))
    reason: Mapped[str | None] = mapped_column(String(200), nullable=True)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    updated_by: Mapped[int | None] = mapped_column(BigInteger, nullable=True)


class PendingAllow(Base):
    """``/allow @username`` for someone who has not written yet: the first user seen with
    that username (lowercased) is let in by id and the row goes."""

    __tablename__ = "access_pending"

    username: Mapped[str] = mapped_column(String(32), primary_key=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    created_by: Mapped[int | None] = mapped_column(BigInteger, nullable=True)


class Invite(Base):
    """An invite code (``/invite``): only its SHA-256 is stored (``bot.access.invites``).

    ``uses_left`` of ``max_uses`` remain until ``expires_at``; a user let in by it goes on
    ``plan`` (``None``: the default plan).
    """

    __tablename__ = "access_invites"

    code_sha256: Mapped[str] = mapped_column(String(64), primary_key=True)
    plan: Mapped[str | None] = mapped_column(String(64), nullable=True)
    max_uses: Mapped[int] = mapped_column(Integer)
    uses_left: Mapped[int] = mapped_column(Integer)
    expires_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    created_by: Mapped[int | None] = mapped_column(BigInteger, nullable=True)


class InviteUse(Base):
    """One user's use of one invite (a second ``/start`` with the same code takes no
    second use)."""

    __tablename__ = "access_invite_uses"

    code_sha256: Mapped[str] = mapped_column(String(64), primary_key=True)
    user_id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    used_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class AccessNotice(Base):
    """What a subject that may not use the bot was last told, and its wrong invite codes.

    ``noticed_at``: the last "you may not use this bot" template (at most one a day) or,
    for a group, the "not enabled here" line (once); ``tries`` wrong codes since
    ``tries_since`` (the hour they count in).
    """

    __tablename__ = "access_notices"

    subject_id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    noticed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    tries: Mapped[int] = mapped_column(Integer, default=0)
    tries_since: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)


class StarPayment(Base):
    """One Telegram Stars payment (``successful_payment``), booked once: the primary key
    is Telegram's ``telegram_payment_charge_id``, so the same update delivered twice, to
    two replicas or after a restart inserts one row (``bot.access.stars``).

    What it bought is fixed when the row is made: ``plan`` from ``plan_from`` (the end
    of the plan it extends, else the payment's time) until ``plan_until``; applying it
    again sets the same values. ``applied_at``: the user was put on the plan (``None``:
    not yet, retried when the update comes again). ``refunded_at``/``refunded_by``:
    ``refundStarPayment`` succeeded (by an admin's ``/refund``, or Telegram told of a
    refund: ``refunded_by`` ``None``); ``plan_before``/``plan_before_until``: the plan a
    refund puts the user back on. ``renews_at``: a subscription charge's
    ``subscription_expiration_date`` (Telegram charges again then; ``None``: a one-off
    payment, or a row from before it was kept); ``renewal_cancelled_at``:
    ``/cancel_renewal`` stopped its renewals (``None``: the bot did not, or ``/renew``
    turned them back on).
    """

    __tablename__ = "star_payments"

    charge_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    user_id: Mapped[int] = mapped_column(BigInteger, index=True)
    stars: Mapped[int] = mapped_column(Integer)
    payload: Mapped[str] = mapped_column(String(128))
    plan: Mapped[str] = mapped_column(String(64))
    plan_from: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    plan_until: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    plan_before: Mapped[str | None] = mapped_column(String(64), nullable=True)
    plan_before_until: Mapped[datetime | None] = mapped_column(
        DateTime(timezone=True), nullable=True
    )
    paid_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    applied_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    refunded_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    refunded_by: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    renews_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    renewal_cancelled_at: Mapped[datetime | None] = mapped_column(
        DateTime(timezone=True), nullable=True
    )
