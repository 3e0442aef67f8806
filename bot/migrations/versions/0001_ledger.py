"""ledger: buckets, holds, operations, requests, limits, kill switch, teams, events, messages

Hand-written to match ``budget.storage.tables.metadata`` (portable types; checked by
``tests/budget/test_migration.py``). Times are REAL epoch seconds (UTC),
money INTEGER µUSD.

Revision ID: 0001_ledger
Revises:
Create Date: 2026-01-01
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from bot.migrations.columns import BIG

revision: str = "0001_ledger"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "budget_buckets",
        sa.Column("level", sa.String(16), nullable=False),
        sa.Column("scope", sa.String(128), nullable=False),
        sa.Column("win", sa.String(8), nullable=False),
        sa.Column("wkey", sa.String(32), nullable=False),
        sa.Column("settled_musd", BIG, nullable=False, server_default="0"),
        sa.Column("held_musd", BIG, nullable=False, server_default="0"),
        sa.Column("late_musd", BIG, nullable=False, server_default="0"),
        sa.PrimaryKeyConstraint("level", "scope", "win", "wkey", name="pk_budget_buckets"),
    )
    op.create_table(
        "budget_holds",
        sa.Column("hold_id", sa.String(32), primary_key=True),
        sa.Column("operation_id", sa.String(32), nullable=False),
        sa.Column("request_id", sa.String(32), nullable=False),
        sa.Column("user_id", BIG, nullable=False),
        sa.Column("team", sa.String(128), nullable=True),
        sa.Column("origin", sa.String(16), nullable=False),
        sa.Column("provider", sa.String(32), nullable=False),
        sa.Column("model", sa.String(128), nullable=False),
        sa.Column("input_tokens", sa.Integer(), nullable=False),
        sa.Column("max_tokens", sa.Integer(), nullable=False),
        sa.Column("ceiling_musd", BIG, nullable=False),
        sa.Column("list_ceiling_musd", BIG, nullable=True),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("granted_at", sa.Float(), nullable=False),
        sa.Column("expires_at", sa.Float(), nullable=False),
        sa.Column("tz", sa.String(64), nullable=False),
        sa.Column("hour_key", sa.String(32), nullable=False),
        sa.Column("day_key", sa.String(16), nullable=False),
        sa.Column("scopes", sa.Text(), nullable=False),
        sa.Column("process_id", sa.String(32), nullable=False),
        sa.Column("ended_at", sa.Float(), nullable=True),
        sa.Column("actual_musd", BIG, nullable=True),
        sa.Column("list_actual_musd", BIG, nullable=True),
        sa.Column("usage_input", sa.Integer(), nullable=True),
        sa.Column("usage_cached_input", sa.Integer(), nullable=True),
        sa.Column("usage_output", sa.Integer(), nullable=True),
        sa.Column("usage_reasoning", sa.Integer(), nullable=True),
        sa.Column("estimated", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("late", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("price_version", sa.String(128), nullable=True),
    )
    op.create_index("ix_budget_holds_state_expires", "budget_holds", ["state", "expires_at"])
    op.create_index("ix_budget_holds_ended", "budget_holds", ["ended_at"])
    op.create_index("ix_budget_holds_day", "budget_holds", ["day_key"])
    op.create_table(
        "budget_operations",
        sa.Column("operation_id", sa.String(32), primary_key=True),
        sa.Column("user_id", BIG, nullable=False),
        sa.Column("origin", sa.String(16), nullable=False),
        sa.Column("team", sa.String(128), nullable=True),
        sa.Column("started_at", sa.Float(), nullable=False),
        sa.Column("expires_at", sa.Float(), nullable=False),
        sa.Column("ended_at", sa.Float(), nullable=True),
        sa.Column("max_musd", BIG, nullable=False),
        sa.Column("max_requests", sa.Integer(), nullable=False),
        sa.Column("requests", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("committed_musd", BIG, nullable=False, server_default="0"),
        sa.Column("day_key", sa.String(16), nullable=False),
        sa.Column("process_id", sa.String(32), nullable=False),
    )
    op.create_index("ix_budget_operations_user_open", "budget_operations", ["user_id", "ended_at"])
    op.create_index(
        "ix_budget_operations_user_started", "budget_operations", ["user_id", "started_at"]
    )
    op.create_index("ix_budget_operations_day", "budget_operations", ["day_key"])
    op.create_table(
        "budget_requests",
        sa.Column("request_id", sa.String(32), primary_key=True),
        sa.Column("operation_id", sa.String(32), nullable=False),
        sa.Column("fingerprint", sa.String(128), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("day_key", sa.String(16), nullable=False),
        sa.UniqueConstraint("operation_id", "fingerprint", name="uq_budget_requests_op_fp"),
    )
    op.create_index("ix_budget_requests_day", "budget_requests", ["day_key"])
    op.create_table(
        "budget_limits",
        sa.Column("level", sa.String(16), nullable=False),
        sa.Column("scope", sa.String(128), nullable=False),
        sa.Column("win", sa.String(8), nullable=False),
        sa.Column("limit_musd", BIG, nullable=True),
        sa.Column("updated_at", sa.Float(), nullable=False),
        sa.Column("updated_by", BIG, nullable=True),
        sa.PrimaryKeyConstraint("level", "scope", "win", name="pk_budget_limits"),
    )
    op.create_table(
        "budget_kill",
        sa.Column("scope_kind", sa.String(8), nullable=False),
        sa.Column("scope", sa.String(128), nullable=False),
        sa.Column("killed", sa.Integer(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False, server_default=""),
        sa.Column("automatic", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("by_user", BIG, nullable=True),
        sa.Column("changed_at", sa.Float(), nullable=False),
        sa.Column("unkilled_at", sa.Float(), nullable=True),
        sa.PrimaryKeyConstraint("scope_kind", "scope", name="pk_budget_kill"),
    )
    op.create_table(
        "budget_team_members",
        sa.Column("user_id", BIG, primary_key=True, autoincrement=False),
        sa.Column("team", sa.String(128), nullable=False),
        sa.Column("added_at", sa.Float(), nullable=False),
    )
    op.create_index("ix_budget_team_members_team", "budget_team_members", ["team"])
    op.create_table(
        "budget_events",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("at", sa.Float(), nullable=False),
        sa.Column("day_key", sa.String(16), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("reason", sa.String(32), nullable=True),
        sa.Column("level", sa.String(16), nullable=True),
        sa.Column("win", sa.String(8), nullable=True),
        sa.Column("scope", sa.String(128), nullable=True),
        sa.Column("user_id", BIG, nullable=True),
        sa.Column("hold_id", sa.String(32), nullable=True),
        sa.Column("detail", sa.Text(), nullable=True),
    )
    op.create_index("ix_budget_events_day_kind", "budget_events", ["day_key", "kind"])
    op.create_table(
        "budget_messages",
        sa.Column("user_id", BIG, nullable=False),
        sa.Column("day_key", sa.String(16), nullable=False),
        sa.Column("count", sa.Integer(), nullable=False, server_default="0"),
        sa.PrimaryKeyConstraint("user_id", "day_key", name="pk_budget_messages"),
    )


def downgrade() -> None:
    op.drop_table("budget_messages")
    op.drop_index("ix_budget_events_day_kind", table_name="budget_events")
    op.drop_table("budget_events")
    op.drop_index("ix_budget_team_members_team", table_name="budget_team_members")
    op.drop_table("budget_team_members")
    op.drop_table("budget_kill")
    op.drop_table("budget_limits")
    op.drop_index("ix_budget_requests_day", table_name="budget_requests")
    op.drop_table("budget_requests")
    op.drop_index("ix_budget_operations_day", table_name="budget_operations")
    op.drop_index("ix_budget_operations_user_started", table_name="budget_operations")
    op.drop_index("ix_budget_operations_user_open", table_name="budget_operations")
    op.drop_table("budget_operations")
    op.drop_index("ix_budget_holds_day", table_name="budget_holds")
    op.drop_index("ix_budget_holds_ended", table_name="budget_holds")
    op.drop_index("ix_budget_holds_state_expires", table_name="budget_holds")
    op.drop_table("budget_holds")
    op.drop_table("budget_buckets")
