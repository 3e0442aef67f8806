"""A group's rows follow it to its supergroup even while the message path's writes are
still queued on the ledger's writer (a SQLite file): the re-keying waits for them."""

from __future__ import annotations

import asyncio
import threading
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import async_sessionmaker

from bot.storage.migrate import migrate
from bot.storage.moves import ChatMoves
from bot.storage.repos import Conversation, History
from bot.storage.sqlite_hot import SqliteHotPath
from bot.storage.tables import ChatTurn
from bot.storage.values import Turn
from budget.errors import LedgerUnavailable
from budget.kernel.db import create_engine
from budget.kernel.sqlite_writer import SqliteWriter
from llm.types import Message

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
OLD, NEW, USER = -400000001, -1001000000002, 30


async def test_a_turn_queued_under_the_old_id_moves_with_the_chat(tmp_path: Path) -> None:
    """A history turn posted under the group's id while the writer is busy (as the answer
    whose send then meets "group chat was migrated" left it), then the move: once the
    move returns, no turn is left under the old id — they are the supergroup's. Before,
    the move's ``UPDATE`` ran on another connection ahead of the queued insert, which
    then committed the turns under the old id (the next question lost them)."""
    path = tmp_path / "kopek.db"
    url = f"sqlite+aiosqlite:///{path}"
    await asyncio.to_thread(migrate, url)
    engine = create_engine(url)
    sessions = async_sessionmaker(engine, expire_on_commit=False)
    writer = SqliteWriter(path, "FULL", unavailable=LedgerUnavailable)
    writer.open()
    try:
        hot = SqliteHotPath(writer)
        moves = ChatMoves(sessions, hot)
        history = History(sessions, hot, moves)
        gate = threading.Event()
        busy = asyncio.ensure_future(writer.call(gate.wait))
        await asyncio.sleep(0)  # the call is queued: the writer is busy with it
        turns = [
            Turn(Message("user", "Remember that."), 5, 4),
            Turn(Message("assistant", "Noted."), 4, 3),
        ]
        await history.append(Conversation(OLD, None, USER), turns, T0)  # queued, not committed
        move = asyncio.ensure_future(moves.moved(OLD, NEW))
        # the move may not finish before the queued turns are committed: give it the chance
        done, _ = await asyncio.wait({move}, timeout=1.0)
        assert not done, "the move returned while a turn of the old id was still queued"
        gate.set()
        await busy
        await move
        async with sessions() as session:
            counts = dict(
                (
                    await session.execute(
                        select(ChatTurn.chat_id, func.count()).group_by(ChatTurn.chat_id)
                    )
                ).all()
            )
        assert counts == {NEW: 2}
        loaded = await history.load(Conversation(NEW, None, USER), 1000)
        assert [m.content for m in loaded] == ["Remember that.", "Noted."]
    finally:
        gate.set()
        writer.close()
        await engine.dispose()
