"""A chat's persona and model (``/persona``, ``/model``), one row per chat
(:class:`bot.storage.tables.ChatPrefsRow`).

Read on every chat message (one primary-key lookup: through the hot path when there is
one, :mod:`bot.storage.hot`), written only by the two commands. Writes go through the
bot's sessions (not the hot path: they are rare); two changes of one chat at once end
as the later of them.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from bot.storage.hot import HotPath
from bot.storage.tables import ChatPrefsRow

__all__ = ["DEFAULT_PREFS", "ChatPrefs", "ChatPrefsStore"]


@dataclass(frozen=True, slots=True)
class ChatPrefs:
    """What a chat chose.

    Attributes:
        persona: a built-in persona's key (:mod:`bot.text.personas`), ``custom`` (then
            ``persona_text`` holds it) or ``""`` (the default persona).
        persona_text: the custom persona's text (``None`` unless ``custom``).
        model: the model id chosen with ``/model`` (``None``: automatic).
    """

    persona: str = ""
    persona_text: str | None = None
    model: str | None = None


DEFAULT_PREFS = ChatPrefs()


class ChatPrefsStore:
    """The ``chat_prefs`` rows.

    Args:
        sessions: the bot's database.
        hot: the message path's statements (:mod:`bot.storage.hot`) for :meth:`get`;
            ``None``: through ``sessions``.
    """

    def __init__(
        self, sessions: async_sessionmaker[AsyncSession], hot: HotPath | None = None
    ) -> None:
        self._sessions = sessions
        self._hot = hot

    def __repr__(self) -> str:
        return "ChatPrefsStore()"

    async def get(self, chat_id: int) -> ChatPrefs:
        """The chat's choices (:data:`DEFAULT_PREFS` when it made none)."""
        if self._hot is not None:
            found = await self._hot.chat_prefs(chat_id)
            return DEFAULT_PREFS if found is None else ChatPrefs(*found)
        async with self._sessions() as session:
            row = await session.get(ChatPrefsRow, chat_id)
            if row is None:
                return DEFAULT_PREFS
            return ChatPrefs(row.persona, row.persona_text, row.model)

    async def set_persona(
        self, chat_id: int, persona: str, text: str | None, *, by: int, now: datetime
    ) -> None:
        """Store the chat's persona (``""``: back to the default)."""
        await self._write(chat_id, by, now, persona=persona, persona_text=text)

    async def set_model(self, chat_id: int, model: str | None, *, by: int, now: datetime) -> None:
        """Store the chat's model (``None``: automatic)."""
        await self._write(chat_id, by, now, model=model)

    async def _write(self, chat_id: int, by: int, now: datetime, **fields: str | None) -> None:
        for attempt in (1, 2):  # a concurrent first write of the same chat: update it
            try:
                async with self._sessions() as session:
                    row = await session.scalar(
                        select(ChatPrefsRow).where(ChatPrefsRow.chat_id == chat_id)
                    )
                    if row is None:
                        row = ChatPrefsRow(chat_id=chat_id, persona="", persona_text=None)
                        session.add(row)
                    for name, value in fields.items():
                        setattr(row, name, value)
                    row.changed_by = by
                    row.changed_at = now
                    await session.commit()
                    return
            except IntegrityError:
                if attempt == 2:
                    raise
