"""The message path's writes to the bot's tables on a SQLite file, through the ledger's
one writer (``docs/decisions/061-one-writer-per-sqlite-file.md``): intake record and
outcome, history load and append, the profile's ``last_seen_at``; and the message path's
reads of the history summary, the turns after it, the cost footer's preference and the
chat's persona and model.

Why not the ORM here: through SQLAlchemy's ORM and aiosqlite each of these is a session
(unit of work, identity map), several thread hops (BEGIN, statement, COMMIT) and its own
commit — measured, a third of the bot's CPU time per message in a burst. Here each is
one step of the ledger's writer (:class:`budget.kernel.sqlite_writer.SqliteWriter`):
plain ``sqlite3`` on its thread, one hop, and a *grouped* step (``durable=False``) that
shares the commit of the group it lands in — one writer per database file, so a
burst's intake records, holds and history share their commits.

Durability: a grouped step is committed (in the WAL) before it is answered,
so it survives a process crash; the next durable group (a hold) fsyncs it with every
frame before it — a message's intake record is committed before its first hold is
queued, so it is on disk no later than that hold (the durability rules are in the
decision above).

Values are written exactly as SQLAlchemy writes them (each column's own bind processor
for the SQLite dialect: datetimes as naive-UTC text), so the ORM code that reads these
tables elsewhere (lost messages, /budget, digests) reads the same rows. Only SQLite:
on PostgreSQL the stores keep their SQLAlchemy path.

Errors: the writer's — :class:`~budget.errors.LedgerUnavailable` for any storage
failure (``bot.storage.repos.is_storage_failure`` recognises it).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from datetime import datetime
from functools import partial
from typing import Any

from sqlalchemy import Column
from sqlalchemy.dialects import sqlite

from bot.storage.tables import ChatTurn, SeenMessage
from bot.storage.values import NumberedTurn, Preferences, StoredSummary, TouchedIntake, Turn
from budget.kernel.sqlite_writer import SqliteWriter
from llm.types import Message
from scheduler.tables import UserProfile

__all__ = ["SqliteHotPath"]

_DIALECT = sqlite.dialect()


def _nothing() -> None:
    """A writer call that does nothing: what was queued before it is committed first."""


def _binder(column: Any) -> Callable[[Any], Any]:
    """The value SQLAlchemy would bind for ``column`` on SQLite (its type's processor)."""
    col: Column[Any] = column.property.columns[0]
    process = col.type.dialect_impl(_DIALECT).bind_processor(_DIALECT)
    return process if process is not None else (lambda value: value)


_SEEN_AT = _binder(SeenMessage.received_at)
_FINISHED_AT = _binder(SeenMessage.finished_at)
_TURN_AT = _binder(ChatTurn.created_at)
_PROFILE_AT = _binder(UserProfile.last_seen_at)

_INSERT_SEEN = (
    "INSERT INTO seen_messages (chat_id, message_id, user_id, status, language, thread_id,"
    " received_at) VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (chat_id, message_id) DO NOTHING"
)
_FINISH_SEEN = (
    "UPDATE seen_messages SET status = ?, finished_at = ? WHERE chat_id = ? AND message_id = ?"
)
_LOAD_TURNS = (
    "SELECT role, content, tokens, raw_tokens FROM chat_turns"
    " WHERE user_id = ? AND chat_id = ? AND thread_id IS ? ORDER BY id DESC LIMIT 200"
)
_INSERT_TURN = (
    "INSERT INTO chat_turns (user_id, chat_id, thread_id, role, content, tokens, raw_tokens,"
    " created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
)
_LOAD_SUMMARY = (
    "SELECT through_turn_id, content, tokens, raw_tokens, summarised_turns, dropped_turns"
    " FROM chat_summaries WHERE user_id = ? AND chat_id = ? AND thread_id IS ?"
    " ORDER BY id DESC LIMIT 1"
)
_TURNS_AFTER = (
    "SELECT id, role, content, tokens, raw_tokens FROM chat_turns"
    " WHERE user_id = ? AND chat_id = ? AND thread_id IS ? AND id > ? ORDER BY id DESC LIMIT ?"
)
_FOOTER_WANTED = "SELECT 1 FROM chat_cost_footers WHERE user_id = ?"
_CHAT_PREFS = "SELECT persona, persona_text, model FROM chat_prefs WHERE chat_id = ?"
_GET_PROFILE = "SELECT language, tz, active FROM user_profiles WHERE user_id = ?"
_SEE_PROFILE = (
    "UPDATE user_profiles SET last_seen_at = ?, chat_id = ?, active = 1 WHERE user_id = ?"
)
_INSERT_PROFILE = (
    "INSERT INTO user_profiles (user_id, chat_id, language, tz, digest_time, digest_enabled,"
    " active, created_at, last_seen_at) VALUES (?, ?, ?, NULL, ?, 1, 1, ?, ?)"
)


def _record(cur: sqlite3.Cursor, values: tuple[Any, ...]) -> bool:
    cur.execute(_INSERT_SEEN, values)
    return cur.rowcount == 1


def _finish(cur: sqlite3.Cursor, values: tuple[Any, ...]) -> None:
    cur.execute(_FINISH_SEEN, values)


def _load(cur: sqlite3.Cursor, key: tuple[int, int, int | None], max_tokens: int) -> list[Turn]:
    kept: list[Turn] = []
    total = 0
    for role, content, tokens, raw in cur.execute(_LOAD_TURNS, key):
        if total + tokens > max_tokens:
            break
        total += tokens
        message = Message("assistant" if role == "assistant" else "user", content)
        kept.append(Turn(message, tokens, raw))
    kept.reverse()
    return kept


def _summary(cur: sqlite3.Cursor, key: tuple[int, int, int | None]) -> StoredSummary | None:
    row = cur.execute(_LOAD_SUMMARY, key).fetchone()
    return None if row is None else StoredSummary(*row)


def _turns_after(cur: sqlite3.Cursor, values: tuple[Any, ...]) -> list[NumberedTurn]:
    out = [
        NumberedTurn(
            turn_id,
            Turn(Message("assistant" if role == "assistant" else "user", content), tokens, raw),
        )
        for turn_id, role, content, tokens, raw in cur.execute(_TURNS_AFTER, values)
    ]
    out.reverse()
    return out


def _conversation(
    cur: sqlite3.Cursor, key: tuple[int, int, int | None], limit: int
) -> tuple[StoredSummary | None, list[NumberedTurn]]:
    stored = _summary(cur, key)
    after = stored.through_turn_id if stored is not None else 0
    return stored, _turns_after(cur, (*key, after, limit))


def _footer_wanted(cur: sqlite3.Cursor, user_id: int) -> bool:
    return cur.execute(_FOOTER_WANTED, (user_id,)).fetchone() is not None


def _chat_prefs(cur: sqlite3.Cursor, chat_id: int) -> tuple[str, str | None, str | None] | None:
    row = cur.execute(_CHAT_PREFS, (chat_id,)).fetchone()
    return None if row is None else (row[0], row[1], row[2])


def _append(cur: sqlite3.Cursor, rows: list[tuple[Any, ...]]) -> None:
    cur.executemany(_INSERT_TURN, rows)


def _touch(
    cur: sqlite3.Cursor, user_id: int, chat_id: int, language: str, digest_time: str, at: Any
) -> Preferences:
    row = cur.execute(_GET_PROFILE, (user_id,)).fetchone()
    if row is not None:
        cur.execute(_SEE_PROFILE, (at, chat_id, user_id))
        return Preferences(row[0], row[1])
    cur.execute(_INSERT_PROFILE, (user_id, chat_id, language, digest_time, at, at))
    return Preferences(language, None)


def _touch_and_record(
    cur: sqlite3.Cursor,
    touch: Callable[[sqlite3.Cursor], Preferences],
    intake: Callable[[str], tuple[Any, ...]],
    pick: Callable[[str | None], str],
) -> TouchedIntake:
    """``touch``, then the intake row ``intake`` gives for the language ``pick`` chose
    from the stored one."""
    preferences = touch(cur)
    first = _record(cur, intake(pick(preferences.language)))
    return TouchedIntake(preferences, first)


class SqliteHotPath:
    """The message path's statements on the bot's tables, run on the ledger's writer.

    Args:
        writer: the ledger's writer (:attr:`budget.storage.sqlite.store.SqliteStore.writer`),
            open while the bot polls.

    Every method is one grouped step (committed before it returns, fsync'd by the next
    durable group) or one read; see the module docstring.
    """

    __slots__ = ("_writer",)

    def __init__(self, writer: SqliteWriter) -> None:
        self._writer = writer

    def __repr__(self) -> str:
        return f"SqliteHotPath({self._writer!r})"

    async def record_intake(
        self,
        *,
        chat_id: int,
        message_id: int,
        user_id: int,
        status: str,
        language: str,
        thread_id: int | None,
        now: datetime,
    ) -> bool:
        """See :meth:`bot.storage.repos.Intake.record`: ``False`` when already recorded."""
        values = (chat_id, message_id, user_id, status, language, thread_id, _SEEN_AT(now))
        return await self._writer.txn(partial(_record, values=values), durable=False)

    async def finish_intake(
        self, *, chat_id: int, message_id: int, status: str, now: datetime
    ) -> None:
        """See :meth:`bot.storage.repos.Intake.finish`."""
        values = (status, _FINISHED_AT(now), chat_id, message_id)
        await self._writer.txn(partial(_finish, values=values), durable=False)

    async def load_turns(
        self, user_id: int, chat_id: int, thread_id: int | None, max_tokens: int
    ) -> list[Turn]:
        """See :meth:`bot.storage.repos.History.load_turns`."""
        key = (user_id, chat_id, thread_id)
        return await self._writer.read(partial(_load, key=key, max_tokens=max_tokens))

    async def load_summary(
        self, user_id: int, chat_id: int, thread_id: int | None
    ) -> StoredSummary | None:
        """See :meth:`bot.storage.summaries.Summaries.load`."""
        return await self._writer.read(partial(_summary, key=(user_id, chat_id, thread_id)))

    async def turns_after(
        self, user_id: int, chat_id: int, thread_id: int | None, after_id: int, limit: int
    ) -> list[NumberedTurn]:
        """See :meth:`bot.storage.summaries.Summaries.turns_after` (``limit``: the most
        turns read, the newest). Queued after every posted append, so it sees them."""
        values = (user_id, chat_id, thread_id, after_id, limit)
        return await self._writer.read(partial(_turns_after, values=values))

    async def load_conversation(
        self, user_id: int, chat_id: int, thread_id: int | None, limit: int
    ) -> tuple[StoredSummary | None, list[NumberedTurn]]:
        """See :meth:`bot.storage.summaries.Summaries.conversation`: the summary and the
        turns after it (the newest ``limit``) in one read, one snapshot."""
        key = (user_id, chat_id, thread_id)
        return await self._writer.read(partial(_conversation, key=key, limit=limit))

    async def footer_wanted(self, user_id: int) -> bool:
        """See :meth:`bot.storage.summaries.CostFooters.wanted`."""
        return await self._writer.read(partial(_footer_wanted, user_id=user_id))

    async def chat_prefs(self, chat_id: int) -> tuple[str, str | None, str | None] | None:
        """See :meth:`bot.storage.chat_prefs.ChatPrefsStore.get`: (persona, persona_text,
        model), ``None`` when the chat chose nothing."""
        return await self._writer.read(partial(_chat_prefs, chat_id=chat_id))

    async def append_turns(
        self,
        user_id: int,
        chat_id: int,
        thread_id: int | None,
        turns: Sequence[Turn],
        now: datetime,
    ) -> None:
        """See :meth:`bot.storage.repos.History.append`. Posted (:meth:`SqliteWriter.post`):
        queued before this returns — so the next load of this conversation, queued
        later, sees the turns — and committed with the next group, not waited for: the
        answer is sent meanwhile (a lost turn costs no money)."""
        at = _TURN_AT(now)
        where = (user_id, chat_id, thread_id)
        rows = [
            (*where, t.message.role, t.message.content, t.tokens, t.raw_tokens, at) for t in turns
        ]
        self._writer.post(partial(_append, rows=rows), "history turns")

    async def written(self) -> None:
        """See :meth:`bot.storage.hot.HotPath.written`: a writer call, queued after every
        posted step, which commits their group before it runs.

        Raises:
            budget.errors.LedgerUnavailable: the writer is closed or storage failed.
        """
        await self._writer.call(_nothing)

    async def touch_and_record(
        self,
        *,
        user_id: int,
        language: str,
        digest_time: str,
        chat_id: int,
        message_id: int,
        payer: int,
        status: str,
        thread_id: int | None,
        pick: Callable[[str | None], str],
        now: datetime,
    ) -> TouchedIntake:
        """:meth:`touch_profile` and :meth:`record_intake` in ONE step (one hop, one
        commit for the two writes every message makes first): the message is recorded
        in the language ``pick`` gives for the stored one. Returns the preferences as
        stored and whether the message was recorded for the first time."""
        seen_at = _SEEN_AT(now)
        touch = partial(
            _touch,
            user_id=user_id,
            chat_id=user_id,  # a user's private chat id equals their user id
            language=language,
            digest_time=digest_time,
            at=_PROFILE_AT(now),
        )

        def intake(recorded_language: str) -> tuple[Any, ...]:
            return (chat_id, message_id, payer, status, recorded_language, thread_id, seen_at)

        body = partial(_touch_and_record, touch=touch, intake=intake, pick=pick)
        return await self._writer.txn(body, durable=False)

    async def touch_profile(
        self, user_id: int, chat_id: int, language: str, digest_time: str, now: datetime
    ) -> Preferences:
        """Refresh the profile's ``last_seen_at`` and ``chat_id`` and mark it active, or
        create it (``language``, ``digest_time``, no zone): the preferences as stored.
        One step, so a profile created by a concurrent update is simply read."""
        body = partial(
            _touch,
            user_id=user_id,
            chat_id=chat_id,
            language=language,
            digest_time=digest_time,
            at=_PROFILE_AT(now),
        )
        return await self._writer.txn(body, durable=False)
