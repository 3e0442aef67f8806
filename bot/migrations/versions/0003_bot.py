"""bot tables: seen messages and chat history

Revision ID: 0003_bot
Revises: 0002_digests
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003_bot"
down_revision: str | None = "0002_digests"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "seen_messages",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("chat_id", sa.BigInteger(), nullable=False),
        sa.Column("message_id", sa.BigInteger(), nullable=False),
        sa.Column("user_id", sa.BigInteger(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("language", sa.String(8), nullable=False),
        sa.Column("received_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.UniqueConstraint("chat_id", "message_id", name="uq_seen_chat_message"),
    )
    op.create_index("ix_seen_messages_user_id", "seen_messages", ["user_id"])
    op.create_index("ix_seen_messages_status", "seen_messages", ["status"])
    op.create_table(
        "chat_turns",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("user_id", sa.BigInteger(), nullable=False),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("content", sa.Text(), nullable=False),
        sa.Column("tokens", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_chat_turns_user_id", "chat_turns", ["user_id"])


def downgrade() -> None:
    op.drop_index("ix_chat_turns_user_id", table_name="chat_turns")
    op.drop_table("chat_turns")
    op.drop_index("ix_seen_messages_status", table_name="seen_messages")
    op.drop_index("ix_seen_messages_user_id", table_name="seen_messages")
    op.drop_table("seen_messages")
