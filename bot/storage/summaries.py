"""The running history summaries and the turns after them (``chat_summaries``,
``chat_turns``), and who asked for the cost footer (``chat_cost_footers``): portable
SQLAlchemy, one short session each; on a SQLite file the message path's reads (the
summary, the turns after it, the footer's preference) are plain ``sqlite3`` steps on
the ledger's writer instead (:mod:`bot.storage.sqlite_hot`), and on PostgreSQL single
statements on the ledger's pool (:mod:`bot.storage.pg_hot`): through an ORM session and
aiosqlite's thread they were measured at about half of a burst message's CPU time
(docs/benchmarks.md, the message path beside a bare echo bot)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import ColumnElement, and_, delete, select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from bot.storage.hot import HotPath
from bot.storage.moves import ChatMoves
from bot.storage.repos import Conversation
from bot.storage.tables import ChatSummary, ChatTurn, CostFooter
from bot.storage.values import NumberedTurn, StoredSummary, Turn
from llm.types import Message

__all__ = ["CostFooters", "NumberedTurn", "StoredSummary", "Summaries"]

#: The most turns read after a summary (newest first). A conversation folds long
#: before this many pile up (a turn costs at least a few tokens); older ones past it
#: are dropped by the next fold, as the cut-oldest-first rule did.
TURNS_READ_MAX = 400


class Summaries:
    """Load and replace the summary of a :class:`Conversation` (``History.clear``
    forgets it with the turns).

    Args:
        sessions: the bot's database.
        moves: groups upgraded to supergroups: a conversation of the old id is read and
            written under the new one (:class:`bot.storage.moves.ChatMoves`).
        hot: the message path's statements for :meth:`load`, :meth:`turns_after` and
            :meth:`conversation` (:mod:`bot.storage.hot`); ``None``: through
            ``sessions``.
    """

    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        moves: ChatMoves | None = None,
        hot: HotPath | None = None,
    ) -> None:
        self._sessions = sessions
        self._moves = moves
        self._hot = hot

    def _here(self, where: Conversation) -> Conversation:
        if self._moves is None:
            return where
        return Conversation(self._moves.current(where.chat_id), where.thread_id, where.user_id)

    async def load(self, where: Conversation) -> StoredSummary | None:
        """``where``'s summary, ``None`` when it has none."""
        where = self._here(where)
        if self._hot is not None:
            return await self._hot.load_summary(where.user_id, where.chat_id, where.thread_id)
        async with self._sessions() as session:
            row = (
                await session.execute(
                    select(ChatSummary).where(_summary_of(where)).order_by(ChatSummary.id.desc())
                )
            ).scalar()
            if row is None:
                return None
            return StoredSummary(
                row.through_turn_id,
                row.content,
                row.tokens,
                row.raw_tokens,
                row.summarised_turns,
                row.dropped_turns,
            )

    async def turns_after(self, where: Conversation, after_id: int) -> list[NumberedTurn]:
        """``where``'s turns stored after turn ``after_id``, oldest first (the newest
        :data:`TURNS_READ_MAX` of them)."""
        where = self._here(where)
        if self._hot is not None:
            return await self._hot.turns_after(
                where.user_id, where.chat_id, where.thread_id, after_id, TURNS_READ_MAX
            )
        thread = (
            ChatTurn.thread_id.is_(None)
            if where.thread_id is None
            else ChatTurn.thread_id == where.thread_id
        )
        async with self._sessions() as session:
            rows = (
                await session.execute(
                    select(ChatTurn)
                    .where(
                        ChatTurn.user_id == where.user_id,
                        ChatTurn.chat_id == where.chat_id,
                        thread,
                        ChatTurn.id > after_id,
                    )
                    .order_by(ChatTurn.id.desc())
                    .limit(TURNS_READ_MAX)
                )
            ).scalars()
            out = [
                NumberedTurn(
                    row.id,
                    Turn(
                        Message("assistant" if row.role == "assistant" else "user", row.content),
                        row.tokens,
                        row.raw_tokens,
                    ),
                )
                for row in rows
            ]
        out.reverse()
        return out

    async def conversation(
        self, where: Conversation
    ) -> tuple[StoredSummary | None, list[NumberedTurn]]:
        """``where``'s summary (``None``: none) and the turns after it, as :meth:`load`
        and :meth:`turns_after` give them; on SQLite one read of one snapshot (a
        message's history costs one step on the writer, not two)."""
        if self._hot is not None:
            here = self._here(where)
            return await self._hot.load_conversation(
                here.user_id, here.chat_id, here.thread_id, TURNS_READ_MAX
            )
        stored = await self.load(where)
        after = stored.through_turn_id if stored is not None else 0
        return stored, await self.turns_after(where, after)

    async def save(self, where: Conversation, summary: StoredSummary, now: datetime) -> None:
        """Replace ``where``'s summary by ``summary`` (one transaction)."""
        where = self._here(where)
        async with self._sessions() as session:
            await session.execute(delete(ChatSummary).where(_summary_of(where)))
            session.add(
                ChatSummary(
                    user_id=where.user_id,
                    chat_id=where.chat_id,
                    thread_id=where.thread_id,
                    through_turn_id=summary.through_turn_id,
                    content=summary.content,
                    tokens=summary.tokens,
                    raw_tokens=summary.raw_tokens,
                    summarised_turns=summary.summarised_turns,
                    dropped_turns=summary.dropped_turns,
                    created_at=now,
                )
            )
            await session.commit()


class CostFooters:
    """Who wants the cost footer (``/cost on|off``).

    Args:
        sessions: the bot's database.
        hot: the message path's statements for :meth:`wanted`, read for every answer
            (:mod:`bot.storage.hot`); ``None``: through ``sessions``.
    """

    def __init__(
        self, sessions: async_sessionmaker[AsyncSession], hot: HotPath | None = None
    ) -> None:
        self._sessions = sessions
        self._hot = hot

    async def wanted(self, user_id: int) -> bool:
        """True when ``user_id`` turned the footer on."""
        if self._hot is not None:
            return await self._hot.footer_wanted(user_id)
        async with self._sessions() as session:
            return (await session.get(CostFooter, user_id)) is not None

    async def set(self, user_id: int, on: bool, now: datetime) -> None:
        """Turn ``user_id``'s footer on or off."""
        async with self._sessions() as session:
            await session.execute(delete(CostFooter).where(CostFooter.user_id == user_id))
            if on:
                session.add(CostFooter(user_id=user_id, changed_at=now))
            await session.commit()


def _summary_of(where: Conversation) -> ColumnElement[bool]:
    """The summary rows of ``where`` (``thread_id`` ``None`` matches NULL only)."""
    thread = (
        ChatSummary.thread_id.is_(None)
        if where.thread_id is None
        else ChatSummary.thread_id == where.thread_id
    )
    return and_(ChatSummary.user_id == where.user_id, ChatSummary.chat_id == where.chat_id, thread)
