"""FREE_SHARE_MAX's rows shared by replicas on PostgreSQL (``llm.keys.share_counts``),
on the ledger's :data:`budget.storage.tables.metadata` (kept apart for its size).
Created on both engines, used on PostgreSQL only. Migration ``0053_free_shares``."""

from __future__ import annotations

from sqlalchemy import Column, Float, Index, String, Table

from budget.storage.tables import BIG, metadata

__all__ = ["free_share_active", "free_share_use"]

free_share_use = Table(
    "free_share_use",
    metadata,
    # FREE_SHARE_MAX's counts across replicas sharing a PostgreSQL database: one row per
    # BUDGET_TZ day, free key and subject ('user' or 'chat', its id), the requests and
    # tokens served (llm.keys.share_counts). Created on both engines, used on PostgreSQL
    # only. Migration ``0053_free_shares``
    Column("day", String(10), primary_key=True),
    Column("key", String(64), primary_key=True),
    Column("kind", String(8), primary_key=True),
    Column("subject", BIG, primary_key=True, autoincrement=False),
    Column("requests", BIG, nullable=False),
    Column("tokens", BIG, nullable=False),
)


free_share_active = Table(
    "free_share_active",
    metadata,
    # who asked lately, for FREE_SHARE_MAX's "while others are active" across replicas
    # (epoch seconds; the group asked in, NULL: privately). Migration ``0053_free_shares``
    Column("user_id", BIG, primary_key=True, autoincrement=False),
    Column("chat_id", BIG, nullable=True),
    Column("seen_at", Float, nullable=False),
    Index("ix_free_share_active_seen", "seen_at"),
)
