"""The fence gate (``bot.session.fence.FencedSession``): no Bot API call leaves a process taken
for dead; a recording transport in place of aiogram's session."""

from __future__ import annotations

from typing import Any

import pytest
from aiogram import Bot
from aiogram.methods import SendMessage, TelegramMethod

from bot.session.fence import FencedSession, FencedTelegramAPIError

TOKEN = "123456789:TEST-fake-token-AAAAAAAAAAAAAAAAAAAA"


class Lease:
    """Stands for the ledger store's lease: confirmed until ``alive`` is False."""

    def __init__(self) -> None:
        self.alive = True
        self.asked = 0

    async def confirm_lease(self) -> bool:
        self.asked += 1
        return self.alive


async def test_no_call_leaves_once_the_lease_is_lost() -> None:
    """Calls pass while the lease is confirmed; once it is not (taken for dead), each
    call raises FencedTelegramAPIError (a TelegramAPIError: callers log it) and reaches nothing."""
    lease = Lease()
    gate = FencedSession(lease)
    calls: list[TelegramMethod[Any]] = []

    async def transport(bot: Bot, method: TelegramMethod[Any]) -> Any:
        calls.append(method)
        return True

    bot = Bot(TOKEN)
    result: object = await gate(transport, bot, SendMessage(chat_id=1, text="a"))
    assert result is True
    lease.alive = False
    with pytest.raises(FencedTelegramAPIError):
        await gate(transport, bot, SendMessage(chat_id=1, text="late answer"))
    assert [getattr(m, "text", None) for m in calls] == ["a"]
    assert lease.asked == 2
    await bot.session.close()
