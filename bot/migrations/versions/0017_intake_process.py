"""seen messages remember the process that took them in (replicas: only a dead one's are lost)

Revision ID: 0017_intake_process
Revises: 0016_provider_keys
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0017_intake_process"
down_revision: str | None = "0016_provider_keys"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("seen_messages") as batch:
        batch.add_column(sa.Column("process_id", sa.String(32), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("seen_messages") as batch:
        batch.drop_column("process_id")
