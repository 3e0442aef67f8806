"""several processes on one database make each digest and each summary once

``digest_runs.claimed_by``/``claimed_at``: the process (its ``budget_processes`` id)
that claimed the run; another takes a run over only when that process stopped
heartbeating. ``summary_pending``: a summary being made, by whom, until when; the other
processes wait for its ``summary_cache`` entry instead of asking a provider again.

Revision ID: 0015_digest_claims
Revises: 0014_turn_chat
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from bot.migrations.columns import UTC

revision: str = "0015_digest_claims"
down_revision: str | None = "0014_turn_chat"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("digest_runs") as batch:
        batch.add_column(sa.Column("claimed_by", sa.String(32), nullable=True))
        batch.add_column(sa.Column("claimed_at", UTC, nullable=True))
    op.create_table(
        "summary_pending",
        sa.Column("key_hash", sa.String(64), nullable=False),
        sa.Column("owner", sa.String(32), nullable=False),
        sa.Column("expires_at", UTC, nullable=False),
        sa.Column("created_at", UTC, nullable=False),
        sa.PrimaryKeyConstraint("key_hash", name="pk_summary_pending"),
    )


def downgrade() -> None:
    op.drop_table("summary_pending")
    with op.batch_alter_table("digest_runs") as batch:
        batch.drop_column("claimed_at")
        batch.drop_column("claimed_by")
