"""a process's liveness lock: ``budget_processes.locked_on``

Each process holds a session-level advisory lock on its own id on its heartbeat's
connection (:mod:`budget.storage.postgres.lease`); PostgreSQL releases it the moment that
connection ends, so a sweeper that can take it knows the owner's connection is gone.
``locked_on`` is the server's ``pg_postmaster_startTIME`` when the process last beat
holding its lock (``NULL``: it did not hold it, or an older version beat): the lock's
absence says something only on that same server lifetime — after a restart or a failover
every lock is gone with every connection, and a process is judged by its heartbeat alone
until it beats again. Unused on SQLite (REAL there, like the other times of the table).
See ``docs/decisions/100-process-liveness-lock.md``.

Revision ID: 0024_process_liveness_lock
Revises: 0036_chat_summaries
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from bot.migrations.columns import TIME

revision: str = "0024_process_liveness_lock"
down_revision: str | None = "0036_chat_summaries"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("budget_processes") as batch:
        batch.add_column(sa.Column("locked_on", TIME, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("budget_processes") as batch:
        batch.drop_column("locked_on")
