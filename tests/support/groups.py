"""Helpers of the group-chat end-to-end tests: the bot's username, a mention entity and
a barrier that waits until the bot has handled everything injected before."""

from __future__ import annotations

import asyncio
from typing import Any

from tests.support.telegram import FakeTelegram, SentMessage

__all__ = ["BOT", "drain", "mention"]

#: The fake Bot API's ``getMe`` username.
BOT = "kopek_test_bot"


def mention(text: str) -> list[dict[str, Any]]:
    """The ``mention`` entity of ``@<bot>`` at the start of ``text`` (as clients send it)."""
    assert text.startswith(f"@{BOT}")
    return [{"type": "mention", "offset": 0, "length": len(BOT) + 1}]


async def drain(tg: FakeTelegram, sentinel_chat: int, *, timeout: float = 20.0) -> SentMessage:  # noqa: ASYNC109 - test deadline
    """Wait until every queued update was fetched, then send ``/help@<bot>`` to
    ``sentinel_chat`` and return its one reply: a cheap barrier after which the bot has
    handled (or ignored) everything injected before.

    Raises:
        TimeoutError: the updates were not fetched, or no reply came, within ``timeout`` s.
    """
    await tg.wait_until(lambda: None if tg.pending_updates() else True, timeout)
    mark = tg.mark()
    tg.inject_message(7777, f"/help@{BOT}", chat_id=sentinel_chat, chat_type="supergroup")
    [reply] = await tg.wait_sent(sentinel_chat, since=mark, timeout=timeout)
    await asyncio.sleep(0.3)  # handlers of earlier updates finish their (cheap) work
    return reply
