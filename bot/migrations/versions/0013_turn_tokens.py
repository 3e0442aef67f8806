"""chat turns keep their raw token count (the prompt is never counted again)

Revision ID: 0013_turn_tokens
Revises: 0012_processes
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013_turn_tokens"
down_revision: str | None = "0012_processes"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("chat_turns") as batch:
        batch.add_column(sa.Column("raw_tokens", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("chat_turns") as batch:
        batch.drop_column("raw_tokens")
