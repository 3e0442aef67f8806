"""operator notices told once: alerts before the caps and spend reports

``ops_notices``: one row per notice that must be sent once across restarts and replicas
(a threshold of a limit in one window, the spend report of one period); the process
whose insert creates the row sends it. See
``docs/decisions/074-alerts-before-the-caps.md`` and ``075-spend-reports.md``.

Revision ID: 0032_ops_notices
Revises: 0023_digest_restarts
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0032_ops_notices"
down_revision: str | None = "0023_digest_restarts"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "ops_notices",
        sa.Column("key", sa.String(length=200), primary_key=True),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("sent_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("ops_notices")
