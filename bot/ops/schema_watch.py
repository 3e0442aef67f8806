"""The database schema against this code's, at start and while the bot runs.

At start the migrations bring the database to this code's head, or refuse a database a
newer version migrated (:mod:`bot.storage.migrate`). Processes sharing one PostgreSQL database
are not started together, though: between this process's migration and its start, or
at any time while it runs, a newer version starting beside it (a rolling deploy) may
migrate the database past this code.

:meth:`SchemaWatch.check` reads ``alembic_version`` (one row) through the app's engine.
The composition root calls it first thing at start: a schema that is not this code's
head then ends the start (exit 2, one line, as at migration time). While running, it
checks every ``interval_s`` seconds; a schema that moved is logged once (WARNING, with
both revisions) and kept in :attr:`SchemaWatch.problem` — the process goes on serving
(migrations add; they do not take away what the previous version uses), and any
restart of this version refuses to start.
"""

from __future__ import annotations

import asyncio
import logging

from alembic.script import ScriptDirectory
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncEngine

from budget.kernel.clock import Clock
from budget.kernel.schema import SchemaMismatch, alembic_config, known_revision, read_heads
from budget.kernel.tasks import cancel_and_wait

__all__ = ["SchemaWatch"]

log = logging.getLogger(__name__)


class SchemaWatch:
    """Compares the database's revision with this code's head.

    Args:
        engine: the app's engine.
        clock: the one clock (the interval between checks).
        interval_s: seconds between checks while running.
    """

    __slots__ = ("_clock", "_engine", "_head", "_interval_s", "_script", "_task", "problem")

    def __init__(self, engine: AsyncEngine, clock: Clock, *, interval_s: float = 60.0) -> None:
        self._engine = engine
        self._clock = clock
        self._interval_s = interval_s
        self._script = ScriptDirectory.from_config(alembic_config("sqlite://"))
        head = self._script.get_current_head()
        assert head is not None, "the migration chain is empty"
        self._head = head
        self._task: asyncio.Task[None] | None = None
        #: the last mismatch seen (``None``: the schema is this code's head)
        self.problem: SchemaMismatch | None = None

    def __repr__(self) -> str:
        return f"SchemaWatch(head={self._head!r}, problem={self.problem is not None})"

    async def check(self) -> SchemaMismatch | None:
        """Read the database's revision now; returns (and keeps) the mismatch, if any.

        Raises:
            OSError, sqlalchemy.exc.SQLAlchemyError: the database cannot be read.
        """
        async with self._engine.connect() as conn:
            current = tuple(await conn.run_sync(read_heads))
        if current == (self._head,):
            self.problem = None
            return None
        ahead = any(not known_revision(self._script, rev) for rev in current)
        self.problem = SchemaMismatch(current, self._head, ahead=ahead)
        return self.problem

    def start(self) -> None:
        """Check every ``interval_s`` seconds until :meth:`stop` (idempotent)."""
        if self._task is None:
            self._task = asyncio.create_task(self._watch(), name="schema-watch")

    async def stop(self) -> None:
        """Stop checking (idempotent)."""
        await cancel_and_wait(self._task)
        self._task = None

    async def _watch(self) -> None:
        told: tuple[str, ...] | None = None
        while True:
            await self._clock.sleep(self._interval_s)
            try:
                problem = await self.check()
            except (OSError, SQLAlchemyError):
                continue  # the stores report an unreachable database themselves
            if problem is None:
                told = None
                continue
            if problem.current == told:
                continue
            told = problem.current
            log.warning(
                "the database schema changed while this process runs: %s. This process "
                "goes on serving; a restart of this version will refuse to start",
                problem,
            )
