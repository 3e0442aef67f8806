"""The books router's admin gate and argument parsing."""

from __future__ import annotations

from typing import Any

from aiogram.types import Message

from bot.handlers.books import IsBooksAdmin
from bot.handlers.books_args import EXPORT_USAGE, split_export_args

ADMIN = 1


def _message(sender_chat: dict[str, Any] | None = None, user_id: int = ADMIN) -> Message:
    data: dict[str, Any] = {
        "message_id": 1,
        "date": 0,
        "chat": {"id": -100, "type": "supergroup", "title": "g"},
        "from": {"id": user_id, "is_bot": False, "first_name": "A"},
        "text": "/budget export",
    }
    if sender_chat is not None:
        data["sender_chat"] = sender_chat
    return Message.model_validate(data)


async def test_admin_gate_refuses_sender_chat_and_strangers() -> None:
    """An admin writing as themselves passes; the same id on a message sent on behalf
    of a chat, and any other user, do not."""
    gate = IsBooksAdmin(frozenset({ADMIN}))
    assert await gate(_message()) is True
    assert await gate(_message({"id": -100, "type": "supergroup", "title": "g"})) is False
    assert await gate(_message(user_id=2)) is False


def test_export_arguments() -> None:
    """Period and zone in either order, both optional; two periods or two zones: usage;
    a period-looking word that is no day or month: the line naming the forms."""
    assert split_export_args([], "UTC") == (None, "UTC")
    assert split_export_args(["2026-01"], "UTC") == ("2026-01", "UTC")
    assert split_export_args(["Asia/Tokyo", "2026-01-14"], "UTC") == ("2026-01-14", "Asia/Tokyo")
    assert split_export_args(["2026-01", "2026-02"], "UTC") == EXPORT_USAGE
    assert split_export_args(["Asia/Tokyo", "Europe/Berlin"], "UTC") == EXPORT_USAGE
    refused = split_export_args(["2026-01..2026-03"], "UTC")
    assert isinstance(refused, str) and refused.startswith("Period '2026-01..2026-03'")
