"""the ledger's times are timestamptz on PostgreSQL

The sixteen time columns of the ledger's tables (``budget_*``: holds, operations,
requests, runtime limits, kill switches, team members, events, corrections,
calibration, processes) were epoch seconds in ``double precision``; on PostgreSQL
they become ``timestamptz`` (``to_timestamp``: the same instant, to the microsecond),
like the bot's and the scheduler's datetimes. The code still handles epoch seconds:
the ledger's asyncpg pool converts with a codec (``budget.storage.postgres.timestamps``), SQLAlchemy with
``budget.storage.tables.EpochSeconds``. Indexes on these columns are rebuilt by the ALTERs
and keep their order (an instant's order is its epoch's). One ALTER per table (each
table is rewritten once), in the migration's one transaction: they lock the tables
until it commits.

A process of an older version still serving while this runs (a rolling deploy) sends
epoch seconds where a ``timestamptz`` is now expected: its ledger steps fail closed
(``LedgerUnavailable``: no provider call, nothing booked) and its SQLAlchemy reads of
heartbeats (digest claims, lost messages) fail, until it is replaced — so replace the
older processes promptly, or stop them first (README, PostgreSQL). Versions since
``budget.storage.postgres.timestamps`` (the codec, landed before this revision) keep their ledger steps
working.

SQLite: nothing changes (its times stay REAL epoch seconds).

Downgrade (PostgreSQL): back to ``double precision`` epoch seconds
(``extract(epoch from …)``: exact, PostgreSQL's numeric, then the nearest double — the
float the clock gave).

Revision ID: 0022_ledger_timestamptz
Revises: 0021_bucket_margins
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0022_ledger_timestamptz"
down_revision: str | None = "0021_bucket_margins"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

#: Every time column of the ledger's tables (``budget.storage.tables``), holds first as the
#: ledger locks them.
COLUMNS: dict[str, tuple[str, ...]] = {
    "budget_holds": ("granted_at", "expires_at", "ended_at"),
    "budget_operations": ("started_at", "expires_at", "ended_at"),
    "budget_requests": ("created_at",),
    "budget_limits": ("updated_at",),
    "budget_kill": ("changed_at", "unkilled_at"),
    "budget_team_members": ("added_at",),
    "budget_events": ("at",),
    "budget_corrections": ("at",),
    "budget_calibration": ("updated_at",),
    "budget_processes": ("started_at", "heartbeat_at"),
}


def _alter(kind: str, using: str) -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    for table, columns in COLUMNS.items():
        changes = ", ".join(
            f"ALTER COLUMN {c} TYPE {kind} USING {using.format(c=c)}" for c in columns
        )
        op.execute(f"ALTER TABLE {table} {changes}")


def upgrade() -> None:
    _alter("timestamptz", "to_timestamp({c})")


def downgrade() -> None:
    _alter("double precision", "extract(epoch FROM {c})")
