"""Notices told once across restarts and replicas: a claim row per notice.

An alert of one threshold in one window, or the spend report of one period, must reach
the admins once, whichever process (replicas on one PostgreSQL) or run (a restart)
notices it first. :meth:`NoticeBook.claim` inserts the notice's key into
``ops_notices`` with ``INSERT … ON CONFLICT DO NOTHING``: the one insert that creates
the row wins and its process sends; every other gets rowcount 0 and sends nothing
(PostgreSQL's unique index decides between concurrent inserts; SQLite has one process
per file). The claim comes before the send: a process that dies between the two loses
that notice (logged by whoever fails) rather than sending it twice
(docs/decisions/076-notices-are-claimed-before-they-are-sent.md).
"""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from bot.storage.tables import OpsNotice
from budget.kernel.clock import Clock
from scheduler.claims import insert_ignore

__all__ = ["MAX_KEY_LENGTH", "NoticeBook"]

#: The longest key (the column's width).
MAX_KEY_LENGTH = 200


class NoticeBook:
    """Claims of the notices told once.

    Args:
        sessions: async sessions on the bot's engine.
        clock: the one clock (``sent_at``).
    """

    __slots__ = ("_clock", "_sessions")

    def __init__(self, sessions: async_sessionmaker[AsyncSession], clock: Clock) -> None:
        self._sessions = sessions
        self._clock = clock

    def __repr__(self) -> str:
        return "NoticeBook()"

    async def claim(self, key: str, kind: str) -> bool:
        """Take the notice ``key`` (``kind``: ``alert`` or ``report``) for this process.

        Returns:
            True when this call created the row (send it), False when it was taken.

        Raises:
            ValueError: a key longer than :data:`MAX_KEY_LENGTH`.
            sqlalchemy.exc.SQLAlchemyError: the database cannot be written.
        """
        if len(key) > MAX_KEY_LENGTH:
            raise ValueError(f"notice key over {MAX_KEY_LENGTH} characters")
        async with self._sessions() as session, session.begin():
            dialect = (await session.connection()).dialect.name
            stmt = insert_ignore(dialect, OpsNotice.__table__).values(
                key=key, kind=kind, sent_at=self._clock.now()
            )
            result = await session.execute(stmt)
        return bool(result.rowcount)  # type: ignore[attr-defined]
