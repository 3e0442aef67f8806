"""processes sharing one ledger database register and heartbeat (PostgreSQL liveness)

Revision ID: 0012_processes
Revises: 0011_stopped
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012_processes"
down_revision: str | None = "0011_stopped"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "budget_processes",
        sa.Column("process_id", sa.String(32), primary_key=True),
        sa.Column("started_at", sa.Float(), nullable=False),
        sa.Column("heartbeat_at", sa.Float(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("budget_processes")
