"""Typed data that reaches handlers (aiogram workflow data + middleware data)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

__all__ = ["ProfileStore", "UserContext"]


@dataclass(frozen=True, slots=True)
class UserContext:
    """Who is writing, in which language and timezone (set by the profile middleware).

    Attributes:
        user_id: Telegram user id.
        chat_id: chat the update came from.
        language: ``en`` or ``ru``.
        tz: the user's IANA timezone (their /tz, else DEFAULT_USER_TZ).
        is_admin: the user id is in ADMIN_IDS.
    """

    user_id: int
    chat_id: int
    language: str
    tz: str
    is_admin: bool


class ProfileStore(Protocol):
    """User preferences the bot needs on every update."""

    async def touch(
        self, user_id: int, chat_id: int, telegram_language: str | None
    ) -> tuple[str | None, str | None]:
        """Create/refresh the profile (marks the user active again); returns (language, tz)
        as stored — ``None`` where the user has not chosen."""
        ...

    async def set_tz(self, user_id: int, tz: str) -> None: ...

    async def set_language(self, user_id: int, language: str) -> None: ...
