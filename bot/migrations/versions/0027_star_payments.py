"""Telegram Stars payments: one row per telegram_payment_charge_id (booked once)

See ``bot/storage/tables.py`` (``StarPayment``) and ``docs/access.md#telegram-stars``.
Downgrade drops the table: the payments' record goes with it (export it first; the
plans they bought stay in the ledger's ``budget_user_plans``).

Revision ID: 0027_star_payments
Revises: 0026_access
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0027_star_payments"
down_revision: str | None = "0026_access"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _when() -> sa.DateTime:
    return sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "star_payments",
        sa.Column("charge_id", sa.String(128), nullable=False),
        sa.Column("user_id", sa.BigInteger(), nullable=False),
        sa.Column("stars", sa.Integer(), nullable=False),
        sa.Column("payload", sa.String(128), nullable=False),
        sa.Column("plan", sa.String(64), nullable=False),
        sa.Column("plan_from", _when(), nullable=False),
        sa.Column("plan_until", _when(), nullable=False),
        sa.Column("plan_before", sa.String(64), nullable=True),
        sa.Column("plan_before_until", _when(), nullable=True),
        sa.Column("paid_at", _when(), nullable=False),
        sa.Column("applied_at", _when(), nullable=True),
        sa.Column("refunded_at", _when(), nullable=True),
        sa.Column("refunded_by", sa.BigInteger(), nullable=True),
        sa.PrimaryKeyConstraint("charge_id"),
    )
    op.create_index("ix_star_payments_user_id", "star_payments", ["user_id"])


def downgrade() -> None:
    op.drop_index("ix_star_payments_user_id", table_name="star_payments")
    op.drop_table("star_payments")
