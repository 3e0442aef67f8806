"""The running history summaries and the turns after them (``chat_summaries``,
``chat_turns``), and who asked for the cost footer (``chat_cost_footers``): portable
SQLAlchemy, one short session each."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import ColumnElement, and_, delete, select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from bot.storage.moves import ChatMoves
from bot.storage.repos import Conversation
from bot.storage.tables import ChatSummary, ChatTurn, CostFooter
from bot.storage.values import Turn
from llm.types import Message

__all__ = ["CostFooters", "NumberedTurn", "StoredSummary", "Summaries"]

#: The most turns read after a summary (newest first). A conversation folds long
#: before this many pile up (a turn costs at least a few tokens); older ones past it
#: are dropped by the next fold, as the cut-oldest-first rule did.
TURNS_READ_MAX = 400


@dataclass(frozen=True, slots=True)
class StoredSummary:
    """A conversation's running summary (see :class:`bot.storage.tables.ChatSummary`)."""

    through_turn_id: int
    content: str
    tokens: int
    raw_tokens: int
    summarised_turns: int
    dropped_turns: int


@dataclass(frozen=True, slots=True)
class NumberedTurn:
    """A stored turn with its ``chat_turns.id``."""

    turn_id: int
    turn: Turn


class Summaries:
    """Load and replace the summary of a :class:`Conversation` (``History.clear``
    forgets it with the turns).

    Args:
        sessions: the bot's database.
        moves: groups upgraded to supergroups: a conversation of the old id is read and
            written under the new one (:class:`bot.storage.moves.ChatMoves`).
    """

    def __init__(
        self, sessions: async_sessionmaker[AsyncSession], moves: ChatMoves | None = None
    ) -> None:
        self._sessions = sessions
        self._moves = moves

    def _here(self, where: Conversation) -> Conversation:
        if self._moves is None:
            return where
        return Conversation(self._moves.current(where.chat_id), where.thread_id, where.user_id)

    async def load(self, where: Conversation) -> StoredSummary | None:
        """``where``'s summary, ``None`` when it has none."""
        where = self._here(where)
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
    """Who wants the cost footer (``/cost on|off``)."""

    def __init__(self, sessions: async_sessionmaker[AsyncSession]) -> None:
        self._sessions = sessions

    async def wanted(self, user_id: int) -> bool:
        """True when ``user_id`` turned the footer on."""
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
