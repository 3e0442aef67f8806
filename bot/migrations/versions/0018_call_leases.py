"""leases of provider calls in flight: GLOBAL_MAX_INFLIGHT_CALLS across replicas

Each provider call in flight in a deployment sharing one PostgreSQL database holds a
row; a new call is let through only while fewer than GLOBAL_MAX_INFLIGHT_CALLS rows of
live processes (heartbeat fresher than PROCESS_DEAD_AFTER_SECONDS) that have not lapsed
(HOLD_TTL_SECONDS) exist (``llm.keys.slots.DeploymentSlots``, ``llm.keys.claims``). Created on
both engines to keep one schema; only PostgreSQL deployments use it.

Revision ID: 0018_call_leases
Revises: 0017_intake_process
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0018_call_leases"
down_revision: str | None = "0017_intake_process"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "call_leases",
        sa.Column("lease_id", sa.String(32), primary_key=True),
        sa.Column("process_id", sa.String(32), nullable=False),
        sa.Column("priority", sa.Integer(), nullable=False),
        sa.Column("taken_at", sa.Float(), nullable=False),
        sa.Column("expires_at", sa.Float(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("call_leases")
