"""retention: the sums of pruned attempts and events, and one pruning round per day

``budget_attempt_sums``: the booked attempts that ``RETENTION_DAYS`` pruned from
``budget_holds``, summed per 15-minute UTC slot, ledger day, provider key and model
(what the export's totals and the reconciliation read for pruned days);
``budget_event_sums``: pruned events counted per day, kind and reason;
``budget_retention``: the day each pruning job last ran for (one round per day per
database). See ``docs/decisions/140-retention-keeps-sums.md``.

Revision ID: 0034_retention
Revises: 0024_process_liveness_lock
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from bot.migrations.columns import BIG

revision: str = "0034_retention"
down_revision: str | None = "0024_process_liveness_lock"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_SUMS = (
    "attempts",
    "input_tokens",
    "cached_input_tokens",
    "output_tokens",
    "reasoning_tokens",
    "cost_musd",
    "list_price_musd",
    "free_list_musd",
)


def upgrade() -> None:
    op.create_table(
        "budget_attempt_sums",
        sa.Column("slot", BIG, nullable=False),
        sa.Column("day_key", sa.String(16), nullable=False),
        sa.Column("provider", sa.String(32), nullable=False),
        sa.Column("model", sa.String(128), nullable=False),
        *(sa.Column(name, BIG, nullable=False) for name in _SUMS),
        sa.PrimaryKeyConstraint(
            "slot", "day_key", "provider", "model", name="pk_budget_attempt_sums"
        ),
    )
    op.create_index("ix_budget_attempt_sums_day", "budget_attempt_sums", ["day_key"])
    op.create_table(
        "budget_event_sums",
        sa.Column("day_key", sa.String(16), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("reason", sa.String(32), nullable=False),
        sa.Column("events", BIG, nullable=False),
        sa.PrimaryKeyConstraint("day_key", "kind", "reason", name="pk_budget_event_sums"),
    )
    op.create_table(
        "budget_retention",
        sa.Column("job", sa.String(32), primary_key=True),
        sa.Column("day_key", sa.String(16), nullable=False),
        sa.Column("process_id", sa.String(32), nullable=False),
        sa.Column("claimed_at", sa.Float(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("budget_retention")
    op.drop_table("budget_event_sums")
    op.drop_index("ix_budget_attempt_sums_day", table_name="budget_attempt_sums")
    op.drop_table("budget_attempt_sums")
