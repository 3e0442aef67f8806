"""alert types the admins muted with /alerts

``ops_alert_mutes``: one row per muted alert type (``limits``, ``loop``, ``quota``,
``cost``, ``forecast``), who muted it and when; a type with no row is told. See
``docs/decisions/181-alerts-can-be-muted.md``.

Revision ID: 0043_alert_mutes
Revises: 0050_wallet
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0043_alert_mutes"
down_revision: str | None = "0050_wallet"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "ops_alert_mutes",
        sa.Column("alert_type", sa.String(length=16), primary_key=True),
        sa.Column("muted_by", sa.BigInteger(), nullable=False),
        sa.Column("muted_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("ops_alert_mutes")
