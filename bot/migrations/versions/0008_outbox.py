"""outbox: paid answers waiting for a Telegram flood wait to end

Revision ID: 0008_outbox
Revises: 0007_topics
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008_outbox"
down_revision: str | None = "0007_topics"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "outbox",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("chat_id", sa.BigInteger(), nullable=False),
        sa.Column("reply_to", sa.BigInteger(), nullable=True),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("parts_sent", sa.Integer(), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("not_before", sa.DateTime(timezone=True), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_outbox_not_before", "outbox", ["not_before"])


def downgrade() -> None:
    op.drop_index("ix_outbox_not_before", table_name="outbox")
    op.drop_table("outbox")
