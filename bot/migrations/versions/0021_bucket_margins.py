"""outstanding holds' margins kept in their bucket rows (PostgreSQL ledger)

``budget_buckets.margin_musd``: Σ ``margin_musd`` of the held holds whose margin is
counted there (µUSD); ``budget_holds.margin_booked``: 1 when that hold's margin is in
its buckets' ``margin_musd``. The PostgreSQL ledger keeps both so that a hold's check
reads its buckets only and its bucket upsert can be its last statement before COMMIT
(``budget.storage.postgres.holds``). On SQLite both stay 0 (its one writer reads the margins from
the held holds); they are created on both engines to keep one schema.

Upgrade on PostgreSQL: the margins of the holds held at that moment are added to their
buckets and those holds marked booked, in the migration's transaction (the ALTERs lock
both tables, holds first as the ledger does, so no step runs in between). A hold an
older process grants afterwards (a rolling deploy) is unbooked: its settle or expiry
takes nothing out, and the next sweep of a newer process adds its margin
(``budget.storage.postgres.ends.sweep``). Downgrade drops both columns: the older code reads the
margins from ``budget_holds.margin_musd``, which stays.

Revision ID: 0021_bucket_margins
Revises: 0020_runtime_signals
"""

import json
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from bot.migrations.columns import BIG

revision: str = "0021_bucket_margins"
down_revision: str | None = "0020_runtime_signals"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _booked_margins() -> None:
    """Add each held hold's margin to its buckets (PostgreSQL). A hold's buckets: each
    of its scopes ``[[level, scope], …]`` (``budget.policy.rules.dump_scopes``) in the day
    window, and in the hour window too except the provider level
    (``budget.policy.rules.windows_for``)."""
    conn = op.get_bind()
    rows = conn.execute(
        sa.text(
            "SELECT scopes, hour_key, day_key, margin_musd FROM budget_holds"
            " WHERE state = 'held' AND margin_musd > 0"
        )
    ).all()
    sums: dict[tuple[str, str, str, str], int] = {}
    for scopes, hour_key, day_key, margin in rows:
        for level, scope in json.loads(scopes):
            windows = [("day", day_key)] + ([] if level == "provider" else [("hour", hour_key)])
            for win, wkey in windows:
                key = (level, scope, win, wkey)
                sums[key] = sums.get(key, 0) + int(margin)
    for (level, scope, win, wkey), margin in sorted(sums.items()):
        conn.execute(
            sa.text(
                "INSERT INTO budget_buckets (level, scope, win, wkey, margin_musd)"
                " VALUES (:level, :scope, :win, :wkey, :m) ON CONFLICT (level, scope, win, wkey)"
                " DO UPDATE SET margin_musd = budget_buckets.margin_musd + excluded.margin_musd"
            ),
            {"level": level, "scope": scope, "win": win, "wkey": wkey, "m": margin},
        )
    conn.execute(
        sa.text("UPDATE budget_holds SET margin_booked = 1 WHERE state = 'held' AND margin_musd > 0")
    )


def upgrade() -> None:
    with op.batch_alter_table("budget_holds") as batch:
        batch.add_column(sa.Column("margin_booked", sa.Integer(), nullable=False, server_default="0"))
    with op.batch_alter_table("budget_buckets") as batch:
        batch.add_column(sa.Column("margin_musd", BIG, nullable=False, server_default="0"))
    if op.get_bind().dialect.name == "postgresql":
        _booked_margins()


def downgrade() -> None:
    with op.batch_alter_table("budget_buckets") as batch:
        batch.drop_column("margin_musd")
    with op.batch_alter_table("budget_holds") as batch:
        batch.drop_column("margin_booked")
