"""wallet: one row per Telegram Stars payment that credited a prepaid wallet

``budget_wallet_credits`` keyed by ``telegram_payment_charge_id`` (inserted once, with
the credit booked on the wallet's ``budget_buckets`` row in the same transaction). The
wallet's bucket needs no DDL: it is a ``budget_buckets`` row of level ``wallet``, window
``balance``. See ``docs/decisions/240-the-wallet-is-a-balance-level.md``.

Downgrade drops the table: the credits' record goes with it (export it first); the
wallet buckets stay, and are refused by no code of the earlier revision (it never
reads them).

Revision ID: 0050_wallet
Revises: 0038_chat_prefs
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from bot.migrations.columns import BIG, TIME

revision: str = "0050_wallet"
down_revision: str | None = "0038_chat_prefs"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "budget_wallet_credits",
        sa.Column("charge_id", sa.String(128), nullable=False),
        sa.Column("user_id", BIG, nullable=False),
        sa.Column("stars", BIG, nullable=False),
        sa.Column("musd_per_star", BIG, nullable=False),
        sa.Column("credit_musd", BIG, nullable=False),
        sa.Column("credited_at", TIME, nullable=False),
        sa.Column("refunded_at", TIME, nullable=True),
        sa.Column("refunded_by", BIG, nullable=True),
        sa.Column("removed_musd", BIG, nullable=False, server_default="0"),
        sa.PrimaryKeyConstraint("charge_id"),
    )
    op.create_index("ix_budget_wallet_credits_user", "budget_wallet_credits", ["user_id"])


def downgrade() -> None:
    op.drop_index("ix_budget_wallet_credits_user", table_name="budget_wallet_credits")
    op.drop_table("budget_wallet_credits")
