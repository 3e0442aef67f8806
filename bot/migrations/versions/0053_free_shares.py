"""free shares: FREE_SHARE_MAX's counts and who is active, shared by replicas

``free_share_use`` (one row per BUDGET_TZ day, free key and subject: requests and
tokens served) and ``free_share_active`` (who asked lately, and in which group), so a
subject's share of a free key is counted once across replicas sharing a PostgreSQL
database (``llm.keys.share_counts``; decision 281). Created on both engines to keep one
schema; only PostgreSQL deployments use them. Downgrade drops them: the counts of the
day are lost (each process then counts its own again).

Revision ID: 0053_free_shares
Revises: 0052_plan_refunds
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from bot.migrations.columns import BIG

revision: str = "0053_free_shares"
down_revision: str | None = "0052_plan_refunds"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "free_share_use",
        sa.Column("day", sa.String(10), nullable=False),
        sa.Column("key", sa.String(64), nullable=False),
        sa.Column("kind", sa.String(8), nullable=False),
        sa.Column("subject", BIG, nullable=False, autoincrement=False),
        sa.Column("requests", BIG, nullable=False),
        sa.Column("tokens", BIG, nullable=False),
        sa.PrimaryKeyConstraint("day", "key", "kind", "subject"),
    )
    op.create_table(
        "free_share_active",
        sa.Column("user_id", BIG, nullable=False, autoincrement=False),
        sa.Column("chat_id", BIG, nullable=True),
        sa.Column("seen_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("user_id"),
    )
    op.create_index("ix_free_share_active_seen", "free_share_active", ["seen_at"])


def downgrade() -> None:
    op.drop_index("ix_free_share_active_seen", table_name="free_share_active")
    op.drop_table("free_share_active")
    op.drop_table("free_share_use")
