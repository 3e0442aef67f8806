"""What every admin command shares: who may use them, what they show of the settings,
the arguments naming a user or a team, and the plain reply (admin reports are in
English)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from aiogram import Bot
from aiogram.filters import Filter
from aiogram.types import Message

from bot.chat.delivery import send_text
from bot.chat.payer import is_on_behalf_of_chat
from bot.settings import Settings
from budget.kernel.clock import Clock

__all__ = [
    "TEAM_NAME_RULE",
    "USER_ID_RULE",
    "AdminView",
    "IsAdmin",
    "parse_user_id",
    "reply",
    "valid_team_name",
]

TEAM_NAME_RULE = "Team names are 1-32 letters, digits, _ or - (and not 'list')."
USER_ID_RULE = "The user id must be a positive Telegram user id."

#: Telegram user ids are positive and fit a signed 64-bit integer (Bot API: "User.id").
MAX_USER_ID = 2**63 - 1
_TEAM_NAME = re.compile(r"[A-Za-z0-9_-]{1,32}")


def parse_user_id(text: str) -> int | None:
    """A Telegram user id, or ``None`` for anything else (junk, 0, out of range)."""
    if not text.isascii() or not text.isdigit():
        return None
    value = int(text)
    return value if 0 < value <= MAX_USER_ID else None


def valid_team_name(name: str) -> bool:
    """Team names: ASCII letters, digits, ``_`` and ``-``, 1–32 long, not ``list``."""
    return bool(_TEAM_NAME.fullmatch(name)) and name != "list"


@dataclass(frozen=True, slots=True)
class AdminView:
    """What admin reports show of the settings (no secrets)."""

    tz: str
    has_paid_anchor: bool

    def __init__(self, settings: Settings) -> None:
        object.__setattr__(self, "tz", settings.budget_tz)
        object.__setattr__(self, "has_paid_anchor", "deepseek" in settings.provider_keys())


class IsAdmin(Filter):
    """True only for a person in ADMIN_IDS writing as themselves.

    A message with ``sender_chat`` set (an anonymous group admin, a channel, a linked
    channel's post) never passes, whatever its ``from`` says: Telegram shows all of
    them under shared service ids (see :mod:`bot.chat.payer`).
    """

    def __init__(self, admin_ids: frozenset[int]) -> None:
        self._ids = admin_ids

    async def __call__(self, message: Message) -> bool:
        if is_on_behalf_of_chat(message) or message.from_user is None:
            return False
        return not message.from_user.is_bot and message.from_user.id in self._ids


async def reply(bot: Bot, message: Message, text: str, clock: Clock) -> None:
    """Answer an admin command in its chat (plain text)."""
    await send_text(bot, message.chat.id, text, clock=clock)
