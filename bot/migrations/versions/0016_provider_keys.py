"""provider keys' circuits and paced windows shared by replicas on one PostgreSQL

Each provider key's breaker state (cooldown end, reason, half-open trial lease), its
rate-limit windows read from headers (remaining tokens/requests and their resets, the
last headers) and a disable after an auth or balance failure, so that N replicas do
not multiply 429s (``llm.keys.admission``, ``llm.keys.postgres``). The table is created on both
engines to keep one schema; only PostgreSQL deployments use it.

Revision ID: 0016_provider_keys
Revises: 0015_digest_claims
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from bot.migrations.columns import BIG

revision: str = "0016_provider_keys"
down_revision: str | None = "0015_digest_claims"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "provider_keys",
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("open_until", sa.Float(), nullable=True),
        sa.Column("open_reason", sa.String(32), nullable=False),
        sa.Column("trial_until", sa.Float(), nullable=True),
        sa.Column("remaining_tokens", BIG, nullable=True),
        sa.Column("tokens_reset_at", sa.Float(), nullable=True),
        sa.Column("limit_tokens", BIG, nullable=True),
        sa.Column("remaining_requests", BIG, nullable=True),
        sa.Column("requests_reset_at", sa.Float(), nullable=True),
        sa.Column("headers", sa.Text(), nullable=False),
        sa.Column("disabled", sa.String(16), nullable=False),
        sa.Column("updated_at", sa.Float(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("provider_keys")
