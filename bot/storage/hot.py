"""What the message path asks of the bot's tables in few steps (:class:`HotPath`): on a
SQLite file the ledger's one writer (:class:`bot.storage.sqlite_hot.SqliteHotPath`), on
PostgreSQL single statements on the ledger's pool (:class:`bot.storage.pg_hot.PgHotPath`),
chosen by the composition root's replicas part (:func:`bot.app.replicas.replicas_of`).
The stores (:mod:`bot.storage.repos`, :mod:`bot.storage.summaries`, the profile adapter)
take one and use it instead of an ORM session for these reads and writes; everything
else about those tables stays portable SQLAlchemy.

Errors: :class:`~budget.errors.LedgerUnavailable` for any storage failure
(``bot.storage.repos.is_storage_failure`` recognises it).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Protocol

from bot.storage.values import NumberedTurn, Preferences, StoredSummary, TouchedIntake, Turn

__all__ = ["HotPath"]


class HotPath(Protocol):
    """The message path's statements on the bot's tables (each method's meaning is the
    store method it stands for, named in the implementations' docstrings)."""

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
    ) -> bool: ...

    async def finish_intake(
        self, *, chat_id: int, message_id: int, status: str, now: datetime
    ) -> None: ...

    async def load_turns(
        self, user_id: int, chat_id: int, thread_id: int | None, max_tokens: int
    ) -> list[Turn]: ...

    async def load_summary(
        self, user_id: int, chat_id: int, thread_id: int | None
    ) -> StoredSummary | None: ...

    async def turns_after(
        self, user_id: int, chat_id: int, thread_id: int | None, after_id: int, limit: int
    ) -> list[NumberedTurn]: ...

    async def load_conversation(
        self, user_id: int, chat_id: int, thread_id: int | None, limit: int
    ) -> tuple[StoredSummary | None, list[NumberedTurn]]: ...

    async def footer_wanted(self, user_id: int) -> bool: ...

    async def chat_prefs(self, chat_id: int) -> tuple[str, str | None, str | None] | None: ...

    async def append_turns(
        self,
        user_id: int,
        chat_id: int,
        thread_id: int | None,
        turns: Sequence[Turn],
        now: datetime,
    ) -> None: ...

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
    ) -> TouchedIntake: ...

    async def touch_profile(
        self, user_id: int, chat_id: int, language: str, digest_time: str, now: datetime
    ) -> Preferences: ...

    async def written(self) -> None:
        """Returns once every write queued before it is committed (a write another
        connection must see: a chat's rows re-keyed by :class:`bot.storage.moves.ChatMoves`)."""
        ...
