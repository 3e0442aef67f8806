"""seen messages remember their forum topic (for the resend notice after a crash)

Revision ID: 0007_topics
Revises: 0006_feed_delivered
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007_topics"
down_revision: str | None = "0006_feed_delivered"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("seen_messages") as batch:
        batch.add_column(sa.Column("thread_id", sa.BigInteger(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("seen_messages") as batch:
        batch.drop_column("thread_id")
