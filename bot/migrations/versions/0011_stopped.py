"""budget holds remember a stopped streamed answer (/budget's stop figures, the export's flag)

Revision ID: 0011_stopped
Revises: 0010_level_user
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011_stopped"
down_revision: str | None = "0010_level_user"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("budget_holds") as batch:
        batch.add_column(sa.Column("stopped", sa.Integer(), nullable=False, server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("budget_holds") as batch:
        batch.drop_column("stopped")
