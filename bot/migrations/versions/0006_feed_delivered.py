"""feed entries delivered per subscription (identity, not date)

Revision ID: 0006_feed_delivered
Revises: 0005_money
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from bot.migrations.columns import UTC

revision: str = "0006_feed_delivered"
down_revision: str | None = "0005_money"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "digest_delivered",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("subscription_id", sa.Integer(), nullable=False),
        sa.Column("post_id", sa.BigInteger(), nullable=False),
        sa.Column("seen_at", UTC, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_digest_delivered"),
        sa.ForeignKeyConstraint(
            ["subscription_id"],
            ["digest_subscriptions.id"],
            name="fk_digest_delivered_subscription_id_digest_subscriptions",
            ondelete="CASCADE",
        ),
        sa.UniqueConstraint(
            "subscription_id", "post_id", name="uq_digest_delivered_subscription_id"
        ),
    )
    op.create_index(
        "ix_digest_delivered_subscription_id",
        "digest_delivered",
        ["subscription_id"],
        unique=False,
    )


def downgrade() -> None:
    op.drop_index("ix_digest_delivered_subscription_id", table_name="digest_delivered")
    op.drop_table("digest_delivered")
