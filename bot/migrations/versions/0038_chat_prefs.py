"""a chat's persona and model: ``chat_prefs``, one row per chat (``/persona``, ``/model``)

See ``docs/decisions/160-personas-are-part-of-every-hold.md`` and
``docs/decisions/161-model-choice-per-chat.md``.

Revision ID: 0038_chat_prefs
Revises: 0027_star_payments
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0038_chat_prefs"
down_revision: str | None = "0027_star_payments"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "chat_prefs",
        sa.Column("chat_id", sa.BigInteger(), primary_key=True, autoincrement=False),
        sa.Column("persona", sa.String(length=32), nullable=False),
        sa.Column("persona_text", sa.Text(), nullable=True),
        sa.Column("model", sa.String(length=128), nullable=True),
        sa.Column("changed_by", sa.BigInteger(), nullable=False),
        sa.Column("changed_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("chat_prefs")
