"""plan refunds: a plan payment's refund is a pending row too, beside the top-ups'

``budget_wallet_refunds`` gains ``kind`` (``topup``, the rows before; ``plan``: a plan
or subscription payment's refund, no credit) and ``stars`` (a plan payment's Stars: it
has no credit row to join). See
``docs/decisions/280-a-plan-refund-is-pending-until-telegram-answers.md``.

Downgrade deletes the plan rows (a plan refund still pending then has nobody to finish
it: finish them first) and drops the two columns.

Revision ID: 0052_plan_refunds
Revises: 0051_pending_refunds
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from bot.migrations.columns import BIG

revision: str = "0052_plan_refunds"
down_revision: str | None = "0051_pending_refunds"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("budget_wallet_refunds") as batch:
        batch.add_column(sa.Column("kind", sa.String(8), nullable=False, server_default="topup"))
        batch.add_column(sa.Column("stars", BIG, nullable=True))


def downgrade() -> None:
    op.execute("DELETE FROM budget_wallet_refunds WHERE kind = 'plan'")
    with op.batch_alter_table("budget_wallet_refunds") as batch:
        batch.drop_column("stars")
        batch.drop_column("kind")
