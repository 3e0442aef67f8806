"""ledger levels and windows: the month window, group chats and plans as payers

``budget_holds.month_key``: the month (or billing cycle) the hold was granted in
(``budget.policy.windows.month_bounds``); ``NULL`` for the holds granted before it, which
book no month bucket at their end either. ``budget_operations.chat_id`` (the group or
supergroup an operation's message came from, ``NULL`` for a private chat or a digest)
and ``budget_operations.plan`` (its user's plan at admission): with the user and the team
they fix the levels of every hold of the operation. ``budget_user_plans``: each user's
plan (until an optional end, epoch seconds of the ledger clock; ``timestamptz`` on
PostgreSQL like the ledger's other times); a user without a row is on the default plan.
``budget_events.plan``: the refused user's plan on a refusal event (refusal metrics by
plan).
See ``docs/decisions/110-ledger-levels-and-months.md``.

Downgrade drops them: the month buckets and the chat and plan buckets stay as rows an
older version never reads.

Revision ID: 0025_ledger_levels
Revises: 0034_retention
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from bot.migrations.columns import BIG, TIME

revision: str = "0025_ledger_levels"
down_revision: str | None = "0034_retention"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("budget_holds") as batch:
        batch.add_column(sa.Column("month_key", sa.String(16), nullable=True))
    with op.batch_alter_table("budget_operations") as batch:
        batch.add_column(sa.Column("chat_id", BIG, nullable=True))
        batch.add_column(sa.Column("plan", sa.String(64), nullable=True))
    with op.batch_alter_table("budget_events") as batch:
        batch.add_column(sa.Column("plan", sa.String(64), nullable=True))
    op.create_table(
        "budget_user_plans",
        sa.Column("user_id", BIG, autoincrement=False, nullable=False),
        sa.Column("plan", sa.String(64), nullable=False),
        sa.Column("until", TIME, nullable=True),
        sa.Column("set_at", TIME, nullable=False),
        sa.Column("set_by", BIG, nullable=True),
        sa.PrimaryKeyConstraint("user_id", name="pk_budget_user_plans"),
    )
    op.create_index("ix_budget_user_plans_plan", "budget_user_plans", ["plan"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_budget_user_plans_plan", table_name="budget_user_plans")
    op.drop_table("budget_user_plans")
    with op.batch_alter_table("budget_events") as batch:
        batch.drop_column("plan")
    with op.batch_alter_table("budget_operations") as batch:
        batch.drop_column("plan")
        batch.drop_column("chat_id")
    with op.batch_alter_table("budget_holds") as batch:
        batch.drop_column("month_key")
