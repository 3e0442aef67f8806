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

The same table keeps the bot's first start (:meth:`NoticeBook.first_start`, the row
:data:`FIRST_START`): inserted once, never replaced, so a restart does not move it
(docs/decisions/260-photo-bytes-periods-admin-rate-first-start.md).
"""

from __future__ import annotations

from datetime import UTC, datetime

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from bot.storage.tables import OpsNotice
from budget.kernel.clock import Clock
from scheduler.claims import insert_ignore

__all__ = ["FIRST_START", "MAX_KEY_LENGTH", "NoticeBook"]

#: The longest key (the column's width).
MAX_KEY_LENGTH = 200
#: The key of the row whose ``sent_at`` is the bot's first start.
FIRST_START = "first-start"


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

    async def first_start(self) -> datetime:
        """When the bot first started on this database (aware UTC): recorded by the first
        call — now, or the oldest notice's time if an older version already sent some
        (the bot existed then) — and read back unchanged by every later one.

        Raises:
            sqlalchemy.exc.SQLAlchemyError: the database cannot be read or written.
        """
        table = OpsNotice.__table__
        async with self._sessions() as session, session.begin():
            dialect = (await session.connection()).dialect.name
            oldest = _utc(await session.scalar(sa.select(sa.func.min(table.c.sent_at))))
            now = self._clock.now()
            at = now if oldest is None else min(oldest, now)
            await session.execute(
                insert_ignore(dialect, table).values(key=FIRST_START, kind="start", sent_at=at)
            )
            first = await session.scalar(
                sa.select(table.c.sent_at).where(table.c.key == FIRST_START)
            )
        found = _utc(first)
        assert found is not None  # inserted above unless it was there
        return found


def _utc(at: object) -> datetime | None:
    """An aware UTC datetime of a ``sent_at`` read back (SQLite's ``min()`` and its
    ``DateTime`` columns give naive UTC); ``None`` for no row."""
    if not isinstance(at, datetime):
        return None
    return at.replace(tzinfo=UTC) if at.tzinfo is None else at.astimezone(UTC)
