"""chat turns belong to one chat and forum topic: history never crosses chats

Before, a user's turns were one history for every chat, so what they said in their
private chat was sent as context for their answers in a group. Each turn
now records ``chat_id`` and ``thread_id`` (the forum topic, NULL outside topics), and
history is loaded and /reset per (user, chat, topic).

Legacy turns do not say where they were said. They are all given to the user's private
chat (``chat_id = user_id``: Telegram's private chat id is the user's id), never to a
group: the worst this does is show a group turn of theirs back to that user alone,
whereas guessing a group could show a private turn to the group.

The downgrade keeps only private-chat turns outside topics: the older code has one
history per user, and would again carry group turns into every chat.

Revision ID: 0014_turn_chat
Revises: 0013_turn_tokens
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0014_turn_chat"
down_revision: str | None = "0013_turn_tokens"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("chat_turns") as batch:
        batch.add_column(sa.Column("chat_id", sa.BigInteger(), nullable=True))
        batch.add_column(sa.Column("thread_id", sa.BigInteger(), nullable=True))
    op.execute("UPDATE chat_turns SET chat_id = user_id WHERE chat_id IS NULL")
    with op.batch_alter_table("chat_turns") as batch:
        batch.alter_column("chat_id", existing_type=sa.BigInteger(), nullable=False)
        batch.drop_index("ix_chat_turns_user_id")
        batch.create_index(
            "ix_chat_turns_conversation", ["user_id", "chat_id", "thread_id", "id"]
        )


def downgrade() -> None:
    op.execute("DELETE FROM chat_turns WHERE chat_id <> user_id OR thread_id IS NOT NULL")
    with op.batch_alter_table("chat_turns") as batch:
        batch.drop_index("ix_chat_turns_conversation")
        batch.create_index("ix_chat_turns_user_id", ["user_id"])
        batch.drop_column("thread_id")
        batch.drop_column("chat_id")
