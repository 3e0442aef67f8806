"""Groups upgraded to supergroups: where a chat went, and its rows moved with it.

When a basic group becomes a supergroup, Telegram gives it a new id and refuses every
call for the old one with ``400 Bad Request: group chat was migrated to a supergroup
chat`` and ``parameters.migrate_to_chat_id`` (Bot API, ResponseParameters); the bot
also gets two service messages, ``migrate_to_chat_id`` in the old group and
``migrate_from_chat_id`` in the new supergroup. Either tells :class:`ChatMoves`, which
remembers the move (so an answer still being written for the old id lands in the new
chat, and its history turn with it) and re-keys the rows that belong to the chat: its
conversation history (its summaries too), its persona and model, and the answers the
outbox still has to deliver. The rows that name a message of the old chat
(``seen_messages``: message ids are per chat) stay as they are. Moving is idempotent:
the second service message, or a send refused after the move, moves nothing more.

The re-keying waits for the message path's queued writes first
(:meth:`bot.storage.hot.HotPath.written`): on a SQLite file a history turn is posted to
the ledger's writer and committed after the answer is sent, so an answer whose send met
the move had its turn still queued under the old id; the ``UPDATE`` on another
connection did not see it, and the turn was committed under the old id after the move —
the chat's next question in the supergroup was asked without it.
"""

from __future__ import annotations

import logging
from collections import OrderedDict

from sqlalchemy import update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from bot.storage.hot import HotPath
from bot.storage.tables import ChatPrefsRow, ChatSummary, ChatTurn, PendingAnswer

__all__ = ["MAX_REMEMBERED_MOVES", "ChatMoves"]

log = logging.getLogger(__name__)

#: Moves kept in memory (oldest forgotten first): a move matters for the answers in
#: flight when it happens; the rows are re-keyed in the database for good.
MAX_REMEMBERED_MOVES = 10_000


class ChatMoves:
    """Old chat id -> new chat id, and the re-keying of the chat's rows.

    Args:
        sessions: the bot's database.
        hot: the message path's statements (:mod:`bot.storage.hot`), whose queued
            writes are committed before the rows are re-keyed; ``None``: none.
    """

    __slots__ = ("_hot", "_moved", "_sessions")

    def __init__(
        self, sessions: async_sessionmaker[AsyncSession], hot: HotPath | None = None
    ) -> None:
        self._sessions = sessions
        self._hot = hot
        self._moved: OrderedDict[int, int] = OrderedDict()

    def __repr__(self) -> str:
        return f"ChatMoves(remembered={len(self._moved)})"

    def current(self, chat_id: int) -> int:
        """The id ``chat_id`` has now (itself when it never moved)."""
        return self._moved.get(chat_id, chat_id)

    async def moved(self, old_id: int, new_id: int) -> int:
        """``old_id`` became ``new_id``: remember it and re-key the chat's history and
        outbox rows. Returns the number of rows moved (0 when already moved).

        Raises:
            sqlalchemy.exc.SQLAlchemyError: the database refused the update (the move
                stays remembered: answers in flight still reach the new chat).
            budget.errors.LedgerUnavailable: the queued writes could not be committed
                (the move stays remembered as well).
        """
        if old_id == new_id:
            return 0
        first = self._moved.get(old_id) != new_id
        self._moved[old_id] = new_id
        self._moved.move_to_end(old_id)
        while len(self._moved) > MAX_REMEMBERED_MOVES:
            self._moved.popitem(last=False)
        if self._hot is not None:  # turns written under the old id before the move
            await self._hot.written()
        async with self._sessions() as session:
            turns = await session.execute(
                update(ChatTurn).where(ChatTurn.chat_id == old_id).values(chat_id=new_id)
            )
            kept = await session.execute(
                update(PendingAnswer).where(PendingAnswer.chat_id == old_id).values(chat_id=new_id)
            )
            # the conversations' running summaries go with their turns
            await session.execute(
                update(ChatSummary).where(ChatSummary.chat_id == old_id).values(chat_id=new_id)
            )
            # the persona and model go with the chat, unless the new one chose its own
            if await session.get(ChatPrefsRow, new_id) is None:
                await session.execute(
                    update(ChatPrefsRow)
                    .where(ChatPrefsRow.chat_id == old_id)
                    .values(chat_id=new_id)
                )
            await session.commit()
        rows = int(getattr(turns, "rowcount", 0) or 0) + int(getattr(kept, "rowcount", 0) or 0)
        if first:
            log.info(
                "chat %s moved to %s (upgraded to a supergroup): %d rows", old_id, new_id, rows
            )
        return rows
