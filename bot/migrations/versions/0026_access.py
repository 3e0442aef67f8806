"""who may use the bot: runtime allow and ban entries, pending @username allows, invites
and their uses, notices and wrong-code tries

See ``bot/storage/tables.py`` (``AccessEntry`` … ``AccessNotice``) and ``docs/access.md``.
Only an invite code's SHA-256 is stored. Downgrade drops the tables: an older version
has no access control (every user may write to it), so close the bot another way first.

Revision ID: 0026_access
Revises: 0025_ledger_levels
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0026_access"
down_revision: str | None = "0025_ledger_levels"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _when() -> sa.DateTime:
    return sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "access_entries",
        sa.Column("subject_id", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("allowed", sa.Integer(), nullable=False),
        sa.Column("banned", sa.Integer(), nullable=False),
        sa.Column("source", sa.String(16), nullable=False),
        sa.Column("reason", sa.String(200), nullable=True),
        sa.Column("updated_at", _when(), nullable=False),
        sa.Column("updated_by", sa.BigInteger(), nullable=True),
        sa.PrimaryKeyConstraint("subject_id"),
    )
    op.create_table(
        "access_pending",
        sa.Column("username", sa.String(32), nullable=False),
        sa.Column("created_at", _when(), nullable=False),
        sa.Column("created_by", sa.BigInteger(), nullable=True),
        sa.PrimaryKeyConstraint("username"),
    )
    op.create_table(
        "access_invites",
        sa.Column("code_sha256", sa.String(64), nullable=False),
        sa.Column("plan", sa.String(64), nullable=True),
        sa.Column("max_uses", sa.Integer(), nullable=False),
        sa.Column("uses_left", sa.Integer(), nullable=False),
        sa.Column("expires_at", _when(), nullable=False),
        sa.Column("created_at", _when(), nullable=False),
        sa.Column("created_by", sa.BigInteger(), nullable=True),
        sa.PrimaryKeyConstraint("code_sha256"),
    )
    op.create_table(
        "access_invite_uses",
        sa.Column("code_sha256", sa.String(64), nullable=False),
        sa.Column("user_id", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("used_at", _when(), nullable=False),
        sa.PrimaryKeyConstraint("code_sha256", "user_id"),
    )
    op.create_table(
        "access_notices",
        sa.Column("subject_id", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("noticed_at", _when(), nullable=True),
        sa.Column("tries", sa.Integer(), nullable=False),
        sa.Column("tries_since", _when(), nullable=True),
        sa.PrimaryKeyConstraint("subject_id"),
    )


def downgrade() -> None:
    for table in (
        "access_notices",
        "access_invite_uses",
        "access_invites",
        "access_pending",
        "access_entries",
    ):
        op.drop_table(table)
