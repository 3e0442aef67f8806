"""runtime signals between replicas: /kill hard cuts every replica's streams

A signal's generation grows each time a process raises it; every process reads it every
0.5 s and acts when it grew (``bot.ops.signals``). Created on both engines to keep one
schema; only PostgreSQL deployments use it.

Revision ID: 0020_runtime_signals
Revises: 0019_update_rates
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from bot.migrations.columns import BIG

revision: str = "0020_runtime_signals"
down_revision: str | None = "0019_update_rates"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "runtime_signals",
        sa.Column("name", sa.String(32), primary_key=True),
        sa.Column("generation", BIG, nullable=False),
        sa.Column("raised_at", sa.Float(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("runtime_signals")
