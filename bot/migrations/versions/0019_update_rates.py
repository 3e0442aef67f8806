"""USER_MAX_UPDATES_PER_MINUTE across replicas: each payer's sliding window in one row

The times of a payer's updates let through in the last minute (a JSON list of epoch
seconds), when they were last told "too fast" and their last update, shared by the
replicas of a PostgreSQL deployment (``bot.storage.pg_rates``). Created on both engines to keep
one schema; only PostgreSQL deployments use it.

Revision ID: 0019_update_rates
Revises: 0018_call_leases
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from bot.migrations.columns import BIG

revision: str = "0019_update_rates"
down_revision: str | None = "0018_call_leases"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "update_rates",
        sa.Column("payer_id", BIG, primary_key=True, autoincrement=False),
        sa.Column("times", sa.Text(), nullable=False),
        sa.Column("noticed_at", sa.Float(), nullable=True),
        sa.Column("last_at", sa.Float(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("update_rates")
