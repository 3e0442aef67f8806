"""the user budget level is stored as 'user' (was 'personal'): one term for one thing

Settings (BUDGET_USER_*), the kill scope ("user"), ``/limit user …`` and the docs
already said "user"; only the ledger's stored level value said "personal".

Revision ID: 0010_level_user
Revises: 0009_outbox_topic
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0010_level_user"
down_revision: str | None = "0009_outbox_topic"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _rename(old: str, new: str) -> None:
    for table in ("budget_buckets", "budget_limits", "budget_events"):
        op.execute(f"UPDATE {table} SET level = '{new}' WHERE level = '{old}'")  # noqa: S608 - constants
    # a hold's scopes are JSON [[level, scope], …] as written by budget.policy.rules.dump_scopes
    op.execute(
        f"UPDATE budget_holds SET scopes = REPLACE(scopes, '[\"{old}\", ', '[\"{new}\", ')"  # noqa: S608 - constants
        f" WHERE scopes LIKE '%\"{old}\"%'"
    )


def upgrade() -> None:
    _rename("personal", "user")


def downgrade() -> None:
    _rename("user", "personal")
