"""digests survive restarts: the last tick, a digest's delivered messages, ready runs found

``digest_ticks``: one row, when any process last looked for due digests; a process that
starts catches up the previous local date's digest whose due instant fell after it (the
bot was down). ``digest_runs.messages_sent``: the messages of a digest delivered before a
flood wait; the retry, in any process, sends the rest only. ``ix_digest_runs_status``:
every tick looks up the ``ready`` runs of any date. See
``docs/decisions/031-digests-across-restarts.md``.

Revision ID: 0023_digest_restarts
Revises: 0022_ledger_timestamptz
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from bot.migrations.columns import UTC

revision: str = "0023_digest_restarts"
down_revision: str | None = "0022_ledger_timestamptz"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("digest_runs") as batch:
        batch.add_column(
            sa.Column("messages_sent", sa.Integer(), nullable=False, server_default="0")
        )
    op.create_index("ix_digest_runs_status", "digest_runs", ["status"], unique=False)
    op.create_table(
        "digest_ticks",
        sa.Column("id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("ticked_at", UTC, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_digest_ticks"),
    )


def downgrade() -> None:
    op.drop_table("digest_ticks")
    op.drop_index("ix_digest_runs_status", table_name="digest_runs")
    with op.batch_alter_table("digest_runs") as batch:
        batch.drop_column("messages_sent")
