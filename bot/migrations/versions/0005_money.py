"""money promise: provable-bound margin of each hold, per-model estimate calibration

``budget_holds.margin_musd``: provable-bound ceiling − estimated ceiling of a hold
(counted against every limit while the hold is outstanding, never booked).
``budget_calibration``: reported ÷ counted input tokens per provider and model
(parts per million, an exponential moving average), so estimates stay tight.

Revision ID: 0005_money
Revises: 0004_corrections
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from bot.migrations.columns import BIG

revision: str = "0005_money"
down_revision: str | None = "0004_corrections"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("budget_holds") as batch:
        batch.add_column(
            sa.Column("margin_musd", BIG, nullable=False, server_default="0")
        )
    op.create_table(
        "budget_calibration",
        sa.Column("provider", sa.String(32), nullable=False),
        sa.Column("model", sa.String(128), nullable=False),
        sa.Column("ratio_ppm", sa.Integer(), nullable=False),
        sa.Column("samples", sa.Integer(), nullable=False),
        sa.Column("updated_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("provider", "model", name="pk_budget_calibration"),
    )


def downgrade() -> None:
    op.drop_table("budget_calibration")
    with op.batch_alter_table("budget_holds") as batch:
        batch.drop_column("margin_musd")
