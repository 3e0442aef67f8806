"""Repositories over the bot's tables (portable SQLAlchemy; no SQLite specifics)."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import sqlite3
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

import asyncpg
from sqlalchemy import ColumnElement, and_, delete, func, or_, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.exc import DBAPIError, OperationalError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from bot.storage.hot import HotPath
from bot.storage.moves import ChatMoves
from bot.storage.tables import ChatSummary, ChatTurn, SeenMessage
from bot.storage.values import Turn
from budget.errors import LedgerUnavailable
from budget.kernel.clock import Clock
from budget.kernel.tasks import ended_within
from budget.storage.tables import processes
from llm.types import Message

__all__ = [
    "Conversation",
    "History",
    "Intake",
    "LostMessage",
    "SharedIntake",
    "is_storage_failure",
]


#: SQLSTATE classes of PostgreSQL that mean the database, not the statement, failed:
#: connection exception, insufficient resources (disk full, too many connections),
#: operator intervention (shutdown, cancel, cannot connect now), system error.
_PG_STORAGE_CLASSES = frozenset({"08", "53", "57", "58"})
#: Single SQLSTATEs that do too: a read-only transaction (a hot standby, a read-only
#: database).
_PG_STORAGE_STATES = frozenset({"25006"})


def _causes(exc: BaseException) -> list[BaseException]:
    """``exc``, SQLAlchemy's ``orig`` and the ``__cause__`` chain (a few links)."""
    out: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and len(out) < 6 and current not in out:
        out.append(current)
        orig = getattr(current, "orig", None)
        current = orig if isinstance(orig, BaseException) else current.__cause__
    return out


def is_storage_failure(exc: BaseException) -> bool:
    """True for a failure of the database itself, as opposed to a bug.

    SQLite: read-only, full disk, I/O error, file gone — the ledger's
    ``LedgerUnavailable`` or SQLAlchemy's/sqlite3's ``OperationalError``. PostgreSQL
    (asyncpg): the server cannot be reached (refused, unknown host, timeout — raised
    as ``OSError``), the connection was lost or closed (SQLAlchemy marks it
    ``connection_invalidated``; asyncpg's ``InterfaceError``/``PostgresConnectionError``),
    or the server answers with a SQLSTATE of a failing database (classes 08, 53, 57,
    58; 25006 read-only). A constraint violation or a syntax error is not one."""
    if isinstance(exc, LedgerUnavailable | OperationalError | sqlite3.OperationalError):
        return True
    if isinstance(exc, DBAPIError) and exc.connection_invalidated:
        return True
    for link in _causes(exc):
        if isinstance(
            link,
            ConnectionError
            | TimeoutError
            | socket.gaierror
            | asyncpg.InterfaceError
            | asyncpg.PostgresConnectionError,
        ):
            return True
        state = getattr(link, "sqlstate", None)
        if isinstance(state, str) and (
            state[:2] in _PG_STORAGE_CLASSES or state in _PG_STORAGE_STATES
        ):
            return True
    return False


@dataclass(frozen=True, slots=True)
class SharedIntake:
    """The intake of a process that shares its database with others (PostgreSQL).

    Attributes:
        process_id: this process's id in ``budget_processes``, recorded with each message.
        dead_after_s: PROCESS_DEAD_AFTER_SECONDS: :meth:`Intake.take_lost` takes only the
            messages of processes silent that long.
    """

    process_id: str
    dead_after_s: float


@dataclass(frozen=True, slots=True)
class LostMessage:
    """A message taken in by a previous process and never answered."""

    chat_id: int
    message_id: int
    user_id: int
    language: str
    thread_id: int | None = None


class Intake:
    """Exactly-once intake of chat messages, keyed by Telegram's (chat_id, message_id).

    The unique key decides: one ``INSERT … ON CONFLICT DO NOTHING`` per message, so of
    two processes taking in the same update at once (a webhook retried, or delivered to
    two replicas) exactly one gets ``True``.

    Args:
        sessions: the bot's database.
        hot: the message path's statements (:mod:`bot.storage.hot`: the ledger's writer
            on a SQLite file, one statement on its pool on PostgreSQL) for :meth:`record`
            and :meth:`finish`, one step each instead of an ORM session;
            ``None``: through ``sessions``.
        shared: on a database several processes share (PostgreSQL), this process's id
            and PROCESS_DEAD_AFTER_SECONDS (:class:`SharedIntake`): :meth:`take_lost`
            then takes only the messages of processes silent that long. ``None``: one
            process per database (SQLite), every message left ``received`` is a
            previous process's.
    """

    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        hot: HotPath | None = None,
        *,
        shared: SharedIntake | None = None,
    ) -> None:
        self._sessions = sessions
        self._hot = hot
        self._shared = shared
        self._open: set[asyncio.Task[object]] = set()

    @contextlib.contextmanager
    def open_message(self) -> Iterator[None]:
        """Mark the current task as handling a recorded message until its outcome is
        written (:class:`bot.middlewares.intake.IntakeMiddleware` wraps the handler and the
        outcome in it), so that :meth:`wait_open` can let it finish before storage is
        closed at shutdown."""
        task = asyncio.current_task()
        if task is None:
            yield
            return
        self._open.add(task)
        try:
            yield
        finally:
            self._open.discard(task)

    async def wait_open(self, timeout_s: float, clock: Clock) -> int:
        """Wait up to ``timeout_s`` seconds of ``clock`` (a grace: the injected clock,
        ``docs/decisions/020-clock-rule.md``) for the messages being handled (see
        :meth:`open_message`) to write their outcomes; returns how many were still open
        then. Called at shutdown after the chat drained and before storage closes: an
        answer delivered after the chat's part ended (its send, a flood wait's outbox
        row) still records its outcome, instead of being taken for lost at the next
        start."""
        pending = {t for t in self._open if t is not asyncio.current_task()}
        return len(await ended_within(pending, timeout_s, clock))

    @property
    def shared(self) -> bool:
        """True when several processes share the database (see :meth:`take_lost`)."""
        return self._shared is not None

    async def record(
        self,
        *,
        chat_id: int,
        message_id: int,
        user_id: int,
        language: str,
        now: datetime,
        status: str = "received",
        thread_id: int | None = None,
    ) -> bool:
        """Record a message before handling it (``status``: ``received`` for chat
        messages, ``command`` for commands — those need no resend notice after a crash;
        ``thread_id``: the forum topic, so that notice goes to the right topic).

        Returns:
            ``True`` the first time; ``False`` when Telegram delivers it again
            (after a crash before the offset was confirmed; a webhook retried or
            delivered to another replica) — it must then be dropped.
        """
        if self._hot is not None:
            return await self._hot.record_intake(
                chat_id=chat_id,
                message_id=message_id,
                user_id=user_id,
                status=status,
                language=language,
                thread_id=thread_id,
                now=now,
            )
        values = {
            "chat_id": chat_id,
            "message_id": message_id,
            "user_id": user_id,
            "status": status,
            "language": language,
            "thread_id": thread_id,
            "received_at": now,
            "process_id": None if self._shared is None else self._shared.process_id,
        }
        async with self._sessions() as session:
            dialect = session.get_bind().dialect.name
            insert = pg_insert if dialect == "postgresql" else sqlite_insert
            statement = (
                insert(SeenMessage)
                .values(**values)
                .on_conflict_do_nothing(index_elements=["chat_id", "message_id"])
                .returning(SeenMessage.id)
            )
            inserted = (await session.execute(statement)).scalar_one_or_none()
            await session.commit()
        return inserted is not None

    async def relabel(self, *, chat_id: int, message_id: int, language: str) -> None:
        """Set the language a recorded message's "please resend" notice would use."""
        async with self._sessions() as session:
            await session.execute(
                update(SeenMessage)
                .where(SeenMessage.chat_id == chat_id, SeenMessage.message_id == message_id)
                .values(language=language)
            )
            await session.commit()

    async def finish(self, *, chat_id: int, message_id: int, status: str, now: datetime) -> None:
        """Mark a recorded message answered/refused/failed/stale."""
        if self._hot is not None:
            await self._hot.finish_intake(
                chat_id=chat_id, message_id=message_id, status=status, now=now
            )
            return
        async with self._sessions() as session:
            await session.execute(
                update(SeenMessage)
                .where(SeenMessage.chat_id == chat_id, SeenMessage.message_id == message_id)
                .values(status=status, finished_at=now)
            )
            await session.commit()

    async def take_lost(self, now: datetime) -> list[LostMessage]:
        """Messages left ``received`` by a process that died; marks them ``lost``.

        One process per database (SQLite): every such message is a previous process's;
        call once at start-up, before updates are taken. Shared (PostgreSQL): only those
        of processes without a heartbeat for ``dead_after_s`` (and those recorded without
        a process — by an older version — that long ago), whose rows in
        ``budget_processes`` are deleted first in the same transaction (declared dead:
        such a process that wakes is fenced, :class:`budget.storage.postgres.store.PgStore`); call
        at
        start and then periodically. One ``UPDATE … RETURNING``: of several processes
        asking at once, each message goes to one, so its user is asked to resend once.
        """
        lost = SeenMessage.status == "received"
        if self._shared is not None:
            process_id, dead_after_s = self._shared.process_id, self._shared.dead_after_s
            dead_before = now.timestamp() - dead_after_s
            live = select(processes.c.process_id).where(processes.c.heartbeat_at > dead_before)
            lost = and_(
                lost,
                or_(
                    and_(
                        SeenMessage.process_id.is_not(None),
                        SeenMessage.process_id != process_id,
                        SeenMessage.process_id.not_in(live),
                    ),
                    and_(
                        SeenMessage.process_id.is_(None),
                        SeenMessage.received_at < now - timedelta(seconds=dead_after_s),
                    ),
                ),
            )
        async with self._sessions() as session:
            if self._shared is not None:
                # declared dead first (their rows deleted, as the ledger's sweep does:
                # :data:`budget.storage.postgres.holds.DECLARE_DEAD`): one that wakes is fenced and
                # never answers a message its user is asked here to resend
                stale = (
                    select(processes.c.process_id)
                    .where(
                        processes.c.heartbeat_at <= dead_before,
                        processes.c.process_id != process_id,
                    )
                    .order_by(processes.c.process_id)
                    .with_for_update()
                )
                await session.execute(delete(processes).where(processes.c.process_id.in_(stale)))
            rows = (
                await session.execute(
                    update(SeenMessage)
                    .where(lost)
                    .values(status="lost", finished_at=now)
                    .returning(
                        SeenMessage.chat_id,
                        SeenMessage.message_id,
                        SeenMessage.user_id,
                        SeenMessage.language,
                        SeenMessage.thread_id,
                    )
                )
            ).all()
            await session.commit()
        return [LostMessage(c, m, u, lang, t) for c, m, u, lang, t in rows]

    async def count_today(self, since: datetime) -> int:
        """Chat messages (not commands, not those dropped before a handler) taken in
        since ``since`` — the denominator of 'LLM requests per incoming message' in
        /budget."""
        async with self._sessions() as session:
            count = await session.scalar(
                select(func.count(SeenMessage.id)).where(
                    SeenMessage.received_at >= since,
                    SeenMessage.status.not_in(("command", "dropped")),
                )
            )
            return int(count or 0)

    async def count_refused_today(self, since: datetime) -> int:
        """Messages taken in since ``since`` and answered with a refusal template (status
        ``refused``): the ledger's, and those said before any hold (a file or recording
        that cannot be read, an input too long) — /budget's "Messages refused today"."""
        async with self._sessions() as session:
            count = await session.scalar(
                select(func.count(SeenMessage.id)).where(
                    SeenMessage.received_at >= since, SeenMessage.status == "refused"
                )
            )
            return int(count or 0)


@dataclass(frozen=True, slots=True)
class Conversation:
    """One context of history: a user's turns in one chat, in one forum topic of it.

    A user's private chat, each group and each forum topic are separate contexts;
    nothing of one is ever sent as history in another (a private secret never reaches
    a group's prompt).

    Attributes:
        chat_id: the Telegram chat (a private chat's id equals its user's id).
        thread_id: the forum topic (``bot.middlewares.topics.topic_of``); ``None`` outside topics
            (private chats, plain groups, a forum's General).
        user_id: the Telegram user whose turns these are.
    """

    chat_id: int
    thread_id: int | None
    user_id: int


class History:
    """Conversation history per :class:`Conversation`, trimmed oldest-first to a token
    budget.

    Args:
        sessions: the bot's database.
        hot: the message path's statements for the load and the append
            (:mod:`bot.storage.hot`); ``None``: through ``sessions``.
        moves: groups upgraded to supergroups: a conversation of the old id is read and
            written under the new one (an answer in flight when its group moved keeps
            its turn with the rest of the chat's history).
    """

    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        hot: HotPath | None = None,
        moves: ChatMoves | None = None,
    ) -> None:
        self._sessions = sessions
        self._hot = hot
        self._moves = moves

    def _here(self, where: Conversation) -> Conversation:
        if self._moves is None:
            return where
        chat_id = self._moves.current(where.chat_id)
        return where if chat_id == where.chat_id else replace(where, chat_id=chat_id)

    async def load(self, where: Conversation, max_tokens: int) -> list[Message]:
        """The newest turns of ``where`` whose token counts sum to at most
        ``max_tokens``, oldest first."""
        return [turn.message for turn in await self.load_turns(where, max_tokens)]

    async def load_turns(self, where: Conversation, max_tokens: int) -> list[Turn]:
        """As :meth:`load`, each message with its stored counts (:class:`Turn`)."""
        where = self._here(where)
        if self._hot is not None:
            return await self._hot.load_turns(
                where.user_id, where.chat_id, where.thread_id, max_tokens
            )
        async with self._sessions() as session:
            rows = (
                await session.execute(
                    select(ChatTurn).where(_in(where)).order_by(ChatTurn.id.desc()).limit(200)
                )
            ).scalars()
            kept: list[Turn] = []
            total = 0
            for row in rows:
                if total + row.tokens > max_tokens:
                    break
                total += row.tokens
                message = (
                    Message("assistant", row.content)
                    if row.role == "assistant"
                    else Message("user", row.content)
                )
                kept.append(Turn(message, row.tokens, row.raw_tokens))
        kept.reverse()
        return kept

    async def append(
        self,
        where: Conversation,
        turns: Sequence[Turn],
        now: datetime,
    ) -> None:
        """Append ``turns`` to ``where``, stored at ``now``."""
        where = self._here(where)
        if self._hot is not None:
            await self._hot.append_turns(where.user_id, where.chat_id, where.thread_id, turns, now)
            return
        async with self._sessions() as session:
            for turn in turns:
                session.add(
                    ChatTurn(
                        user_id=where.user_id,
                        chat_id=where.chat_id,
                        thread_id=where.thread_id,
                        role=turn.message.role,
                        content=turn.message.content,
                        tokens=turn.tokens,
                        raw_tokens=turn.raw_tokens,
                        created_at=now,
                    )
                )
            await session.commit()

    async def clear(self, where: Conversation) -> int:
        """Forget the user's history in that chat and topic only (/reset), their other
        chats untouched, and the running summary of those turns with them. Returns the
        number of turns removed."""
        where = self._here(where)
        async with self._sessions() as session:
            await session.execute(
                delete(ChatSummary).where(
                    ChatSummary.user_id == where.user_id,
                    ChatSummary.chat_id == where.chat_id,
                    ChatSummary.thread_id.is_(None)
                    if where.thread_id is None
                    else ChatSummary.thread_id == where.thread_id,
                )
            )
            result = await session.execute(delete(ChatTurn).where(_in(where)))
            await session.commit()
            return int(getattr(result, "rowcount", 0) or 0)


def _in(where: Conversation) -> ColumnElement[bool]:
    """The turns of ``where`` (``thread_id`` ``None`` matches NULL, not any topic)."""
    thread = (
        ChatTurn.thread_id.is_(None)
        if where.thread_id is None
        else ChatTurn.thread_id == where.thread_id
    )
    return and_(ChatTurn.user_id == where.user_id, ChatTurn.chat_id == where.chat_id, thread)
