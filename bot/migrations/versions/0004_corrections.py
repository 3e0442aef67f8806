"""ledger: correction events of estimated bookings (/reconcile apply)

Revision ID: 0004_corrections
Revises: 0003_bot
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from bot.migrations.columns import BIG

revision: str = "0004_corrections"
down_revision: str | None = "0003_bot"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "budget_corrections",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("at", sa.Float(), nullable=False),
        sa.Column("hold_id", sa.String(32), nullable=False),
        sa.Column("provider", sa.String(32), nullable=False),
        sa.Column("model", sa.String(128), nullable=False),
        sa.Column("bucket", sa.String(32), nullable=False),
        sa.Column("old_musd", BIG, nullable=False),
        sa.Column("new_musd", BIG, nullable=False),
        sa.Column("by_user", BIG, nullable=True),
        sa.Column("source_file", sa.String(255), nullable=False),
        sa.Column("source_sha256", sa.String(64), nullable=False),
        sa.Column("over_limit", sa.Text(), nullable=True),
    )
    op.create_index("ix_budget_corrections_hold", "budget_corrections", ["hold_id"])


def downgrade() -> None:
    op.drop_index("ix_budget_corrections_hold", table_name="budget_corrections")
    op.drop_table("budget_corrections")
