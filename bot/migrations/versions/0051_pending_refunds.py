"""pending refunds: one row per refund of a wallet top-up, pending until Telegram answers

``budget_wallet_refunds`` keyed by ``telegram_payment_charge_id``: inserted ``pending``
in the transaction that takes the unspent credit out of the wallet, held by one process
(``claimed_by``) while it calls ``refundStarPayment``, then ``done``; a process that
starts (or a periodic round) completes every pending refund whose holder is dead. See
``docs/decisions/300-a-refund-is-pending-until-telegram-answers.md``.

Downgrade drops the table: a refund still pending then stays booked (its credit out
of the wallet) with nobody to finish it; finish or export them first.

Revision ID: 0051_pending_refunds
Revises: 0044_reconciliations
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from bot.migrations.columns import BIG, TIME

revision: str = "0051_pending_refunds"
down_revision: str | None = "0044_reconciliations"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "budget_wallet_refunds",
        sa.Column("charge_id", sa.String(128), nullable=False),
        sa.Column("user_id", BIG, nullable=False),
        sa.Column("requested_by", BIG, nullable=True),
        sa.Column("requested_at", TIME, nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("removed_musd", BIG, nullable=False),
        sa.Column("claimed_by", sa.String(32), nullable=True),
        sa.Column("telegram", sa.String(200), nullable=True),
        sa.Column("finished_at", TIME, nullable=True),
        sa.PrimaryKeyConstraint("charge_id"),
    )
    op.create_index("ix_budget_wallet_refunds_state", "budget_wallet_refunds", ["state"])


def downgrade() -> None:
    op.drop_index("ix_budget_wallet_refunds_state", table_name="budget_wallet_refunds")
    op.drop_table("budget_wallet_refunds")
