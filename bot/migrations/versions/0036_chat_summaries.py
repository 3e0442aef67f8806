"""history summaries and the cost footer

``chat_summaries``: the running summary of one (user, chat, topic) conversation's older
turns, with the newest turn it folded (``docs/decisions/150-history-summaries-are-charged-steps.md``).
``chat_cost_footers``: the users who turned on ``/cost``
(``docs/decisions/153-the-cost-footer.md``).

Revision ID: 0036_chat_summaries
Revises: 0032_ops_notices
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0036_chat_summaries"
down_revision: str | None = "0032_ops_notices"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "chat_summaries",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("user_id", sa.BigInteger(), nullable=False),
        sa.Column("chat_id", sa.BigInteger(), nullable=False),
        sa.Column("thread_id", sa.BigInteger(), nullable=True),
        sa.Column("through_turn_id", sa.Integer(), nullable=False),
        sa.Column("content", sa.Text(), nullable=False),
        sa.Column("tokens", sa.Integer(), nullable=False),
        sa.Column("raw_tokens", sa.Integer(), nullable=False),
        sa.Column("summarised_turns", sa.Integer(), nullable=False),
        sa.Column("dropped_turns", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index(
        "ix_chat_summaries_conversation", "chat_summaries", ["user_id", "chat_id", "thread_id"]
    )
    op.create_table(
        "chat_cost_footers",
        sa.Column("user_id", sa.BigInteger(), primary_key=True, autoincrement=False),
        sa.Column("changed_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("chat_cost_footers")
    op.drop_index("ix_chat_summaries_conversation", table_name="chat_summaries")
    op.drop_table("chat_summaries")
