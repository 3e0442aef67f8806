"""getUpdates asks for small batches (bot/updates.py, issue 10); other requests pass."""

from __future__ import annotations

from typing import Any, cast

from aiogram import Bot
from aiogram.methods import GetUpdates, SendMessage, TelegramMethod

from bot.updates import POLL_BATCH, PollInSmallBatches


async def test_get_updates_without_a_limit_asks_for_a_small_batch() -> None:
    seen: list[TelegramMethod[Any]] = []

    async def make_request(_bot: Bot, method: TelegramMethod[Any]) -> Any:
        seen.append(method)
        return []

    nxt = cast(Any, make_request)
    gate = PollInSmallBatches()
    bot = Bot("42:TEST")
    try:
        await gate(nxt, bot, GetUpdates(timeout=30))
        await gate(nxt, bot, GetUpdates(timeout=30, limit=3))
        await gate(nxt, bot, SendMessage(chat_id=1, text="hi"))
    finally:
        await bot.session.close()
    first, second, third = seen
    assert isinstance(first, GetUpdates) and first.limit == POLL_BATCH
    assert isinstance(second, GetUpdates) and second.limit == 3
    assert isinstance(third, SendMessage) and third.text == "hi"
