"""digests: user profiles, sources, subscriptions, digest runs, summary cache

Hand-written to match ``scheduler.tables.metadata`` (portable types; checked by
``tests/scheduler/test_migration.py``). Datetimes are stored as UTC
(``scheduler.tables.UTCDateTime``).

Revision ID: 0002_digests
Revises: 0001_ledger
Create Date: 2026-01-01
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from bot.migrations.columns import UTC

revision: str = "0002_digests"
down_revision: str | None = "0001_ledger"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "user_profiles",
        sa.Column("user_id", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("chat_id", sa.BigInteger(), nullable=False),
        sa.Column("language", sa.String(8), nullable=False),
        sa.Column("tz", sa.String(64), nullable=True),
        sa.Column("digest_time", sa.String(5), nullable=False),
        sa.Column("digest_enabled", sa.Boolean(), nullable=False),
        sa.Column("active", sa.Boolean(), nullable=False),
        sa.Column("created_at", UTC, nullable=False),
        sa.Column("last_seen_at", UTC, nullable=False),
        sa.PrimaryKeyConstraint("user_id", name="pk_user_profiles"),
    )
    op.create_table(
        "digest_sources",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("key", sa.String(2048), nullable=False),
        sa.Column("title", sa.String(256), nullable=False),
        sa.Column("last_seen_post_id", sa.BigInteger(), nullable=True),
        sa.Column("preview_lost", sa.Boolean(), nullable=False),
        sa.Column("checked_at", UTC, nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_digest_sources"),
        sa.UniqueConstraint("kind", "key", name="uq_digest_sources_kind"),
    )
    op.create_table(
        "digest_subscriptions",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("user_id", sa.BigInteger(), nullable=False),
        sa.Column("source_id", sa.Integer(), nullable=False),
        sa.Column("created_at", UTC, nullable=False),
        sa.Column("last_post_id", sa.BigInteger(), nullable=True),
        sa.Column("last_digest_at", UTC, nullable=True),
        sa.Column("lost_notified", sa.Boolean(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_digest_subscriptions"),
        sa.ForeignKeyConstraint(
            ["user_id"],
            ["user_profiles.user_id"],
            name="fk_digest_subscriptions_user_id_user_profiles",
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["source_id"],
            ["digest_sources.id"],
            name="fk_digest_subscriptions_source_id_digest_sources",
            ondelete="CASCADE",
        ),
        sa.UniqueConstraint("user_id", "source_id", name="uq_digest_subscriptions_user_id"),
    )
    op.create_index(
        "ix_digest_subscriptions_user_id", "digest_subscriptions", ["user_id"], unique=False
    )
    op.create_index(
        "ix_digest_subscriptions_source_id", "digest_subscriptions", ["source_id"], unique=False
    )
    op.create_table(
        "digest_runs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("user_id", sa.BigInteger(), nullable=False),
        sa.Column("local_date", sa.Date(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("due_at", UTC, nullable=False),
        sa.Column("late", sa.Boolean(), nullable=False),
        sa.Column("retry_not_before", UTC, nullable=True),
        sa.Column("refusal_reason", sa.String(32), nullable=True),
        sa.Column("deferred_notified", sa.Boolean(), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("delivery_attempts", sa.Integer(), nullable=False),
        sa.Column("post_count", sa.Integer(), nullable=False),
        sa.Column("payload", sa.Text(), nullable=True),
        sa.Column("created_at", UTC, nullable=False),
        sa.Column("updated_at", UTC, nullable=False),
        sa.Column("sent_at", UTC, nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_digest_runs"),
        sa.UniqueConstraint("user_id", "local_date", name="uq_digest_runs_user_id"),
    )
    op.create_index("ix_digest_runs_user_id", "digest_runs", ["user_id"], unique=False)
    op.create_table(
        "summary_cache",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("source_key", sa.String(2048), nullable=False),
        sa.Column("post_id", sa.BigInteger(), nullable=False),
        sa.Column("content_hash", sa.String(64), nullable=False),
        sa.Column("language", sa.String(8), nullable=False),
        sa.Column("prompt_version", sa.String(32), nullable=False),
        sa.Column("summary", sa.Text(), nullable=False),
        sa.Column("provider", sa.String(32), nullable=False),
        sa.Column("model", sa.String(128), nullable=False),
        sa.Column("created_at", UTC, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_summary_cache"),
        sa.UniqueConstraint(
            "source_key",
            "post_id",
            "content_hash",
            "language",
            "prompt_version",
            name="uq_summary_cache_source_key",
        ),
    )


def downgrade() -> None:
    op.drop_table("summary_cache")
    op.drop_index("ix_digest_runs_user_id", table_name="digest_runs")
    op.drop_table("digest_runs")
    op.drop_index("ix_digest_subscriptions_source_id", table_name="digest_subscriptions")
    op.drop_index("ix_digest_subscriptions_user_id", table_name="digest_subscriptions")
    op.drop_table("digest_subscriptions")
    op.drop_table("digest_sources")
    op.drop_table("user_profiles")
