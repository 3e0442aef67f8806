"""the last reconciliation of each provider key, for the spend reports

``ops_reconciliations``: one row per provider key, replaced by each ``/reconcile`` of that
key: when, by whom, the period compared, the file, whether every step matched and the
two totals. See ``docs/decisions/182-reports-say-when-each-key-was-reconciled.md``.

Revision ID: 0044_reconciliations
Revises: 0043_alert_mutes
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0044_reconciliations"
down_revision: str | None = "0043_alert_mutes"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "ops_reconciliations",
        sa.Column("key_name", sa.String(length=32), primary_key=True),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("by_user", sa.BigInteger(), nullable=False),
        sa.Column("period_start", sa.DateTime(timezone=True), nullable=False),
        sa.Column("period_end", sa.DateTime(timezone=True), nullable=False),
        sa.Column("file_name", sa.String(length=128), nullable=False),
        sa.Column("matched", sa.Boolean(), nullable=False),
        sa.Column("ledger_musd", sa.BigInteger(), nullable=False),
        sa.Column("export_musd", sa.BigInteger(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("ops_reconciliations")
