"""Claims that make several processes on one database do each digest and summary once.

Every bot process runs the digest scheduler. A (user, local date) run is made by the
process that *claims* it (``digest_runs.claimed_by``), and a summary by the process that
holds its pending row (``summary_pending.owner``). A claim is taken with ONE conditional
statement whose ``WHERE`` says who may take it: nobody holds it, this process holds it,
or its holder is *dead* — no row in ``budget_processes`` with a heartbeat newer than
``dead_after_s`` seconds (PROCESS_DEAD_AFTER_SECONDS; the PostgreSQL ledger beats every
PROCESS_HEARTBEAT_SECONDS, :mod:`budget.storage.postgres.store`). On PostgreSQL a second ``UPDATE``
of the same row waits for the first's commit and then re-checks its ``WHERE`` against
the committed row (``READ COMMITTED``), so two processes never both win; SQLite runs one
writer at a time.

SQLite has one process per file (the instance lock): the bot claims nothing there (no
claimant). Were claims used on SQLite, which has no heartbeats, a claim left by an
earlier process of the file (a crash) would name a process with no heartbeat and be
taken over at once — as the single-process runner resumes runs at start.

Heartbeat times are epoch seconds of the injected clock (the ledger's clock is the
app's one clock), as the ledger's sweep reads them.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import ColumnElement, Select, or_, select
from sqlalchemy.orm import InstrumentedAttribute
from sqlalchemy.sql.dml import Insert

from budget.storage.tables import processes

__all__ = ["Claimant", "insert_ignore"]


@dataclass(frozen=True, slots=True)
class Claimant:
    """Who claims: this process's id and when another process counts as dead.

    Attributes:
        process_id: this process's ``budget_processes`` id (the ledger store's
            ``process_id``; 32 characters at most).
        dead_after_s: a holder whose last heartbeat is older than this many seconds is
            dead and its claims may be taken over (PROCESS_DEAD_AFTER_SECONDS).
    """

    process_id: str
    dead_after_s: float = 60.0

    def alive(self, now: datetime) -> Select[tuple[str]]:
        """The ids of the processes alive at ``now`` (heartbeat within ``dead_after_s``)."""
        dead_before = now.timestamp() - self.dead_after_s
        return select(processes.c.process_id).where(processes.c.heartbeat_at > dead_before)

    def may_take(
        self, holder: InstrumentedAttribute[str | None] | InstrumentedAttribute[str], now: datetime
    ) -> ColumnElement[bool]:
        """SQL: the claim in column ``holder`` is free, ours, or its holder is dead at ``now``."""
        return or_(
            holder.is_(None),
            holder == self.process_id,
            holder.not_in(self.alive(now).scalar_subquery()),
        )


def insert_ignore(dialect: str, table: object) -> Insert:
    """``INSERT … ON CONFLICT DO NOTHING`` into ``table`` on SQLite or PostgreSQL
    (the statement's rowcount says whether the row was inserted)."""
    if dialect == "postgresql":
        from sqlalchemy.dialects.postgresql import insert as pg_insert

        return pg_insert(table).on_conflict_do_nothing()  # type: ignore[arg-type]
    from sqlalchemy.dialects.sqlite import insert as sqlite_insert

    return sqlite_insert(table).on_conflict_do_nothing()  # type: ignore[arg-type]
