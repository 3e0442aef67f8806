"""The per-chat flood gate (``bot.session.flood_waits.FloodWaits``) on a manual clock, with a
recording transport in place of aiogram's session."""

from __future__ import annotations

from typing import Any

import pytest
from aiogram import Bot
from aiogram.exceptions import TelegramForbiddenError, TelegramRetryAfter
from aiogram.methods import SendChatAction, SendMessage, TelegramMethod

from bot.session.flood_waits import FloodWaits
from tests.support.clocks import ManualClock

TOKEN = "123456789:TEST-fake-token-AAAAAAAAAAAAAAAAAAAA"


class Transport:
    """Stands for the session's make_request: records calls, answers 429 when told."""

    def __init__(self) -> None:
        self.calls: list[TelegramMethod[Any]] = []
        self.retry_after: int | None = None

    async def __call__(self, bot: Bot, method: TelegramMethod[Any]) -> Any:
        self.calls.append(method)
        if self.retry_after is not None:
            wait, self.retry_after = self.retry_after, None
            raise TelegramRetryAfter(method=method, message="Too Many Requests", retry_after=wait)
        return True


async def send(gate: FloodWaits, transport: Transport, bot: Bot, method: Any) -> object:
    """One call through the gate; returns what the session would hand back."""
    result: object = await gate(transport, bot, method)
    return result


async def test_no_call_leaves_for_a_chat_during_its_flood_wait() -> None:
    """After a 429 retry_after=40 for chat 1: sends to chat 1 raise locally with the
    seconds left and reach no transport, its chat actions are dropped as done, chat 2 is
    not affected; at t=40 chat 1 is open again."""
    clock = ManualClock()
    gate = FloodWaits(clock)
    transport = Transport()
    bot = Bot(TOKEN)
    transport.retry_after = 40
    with pytest.raises(TelegramRetryAfter):
        await send(gate, transport, bot, SendMessage(chat_id=1, text="a"))
    clock.advance(10)
    with pytest.raises(TelegramRetryAfter) as refused:
        await send(gate, transport, bot, SendMessage(chat_id=1, text="b"))
    assert refused.value.retry_after == 30
    assert await send(gate, transport, bot, SendChatAction(chat_id=1, action="typing")) is True
    assert await send(gate, transport, bot, SendMessage(chat_id=2, text="c")) is True
    assert [getattr(m, "chat_id", None) for m in transport.calls] == [1, 2]
    clock.advance(30)
    assert await send(gate, transport, bot, SendMessage(chat_id=1, text="d")) is True
    assert len(transport.calls) == 3
    await bot.session.close()


async def test_a_later_429_never_shortens_a_wait() -> None:
    """close(40) then close(5): the chat stays closed for 40 s."""
    clock = ManualClock()
    gate = FloodWaits(clock)
    gate.close(7, 40)
    gate.close(7, 5)
    clock.advance(20)
    assert gate.wait_left(7) == pytest.approx(20)


class Refusing(Transport):
    """A chat that refuses everything: 403, bot blocked."""

    async def __call__(self, bot: Bot, method: TelegramMethod[Any]) -> Any:
        self.calls.append(method)
        raise TelegramForbiddenError(
            method=method, message="Forbidden: bot was blocked by the user"
        )


async def test_a_refused_chat_action_is_answered_as_done_and_a_send_still_raises() -> None:
    """A blocked chat: "typing…" comes back as done (cosmetic; aiogram's ChatActionSender
    must not die with an unretrieved exception), while a message to it still raises the
    403 its caller records as undeliverable."""
    gate = FloodWaits(ManualClock())
    transport = Refusing()
    bot = Bot(TOKEN)
    assert await send(gate, transport, bot, SendChatAction(chat_id=5, action="typing")) is True
    with pytest.raises(TelegramForbiddenError):
        await send(gate, transport, bot, SendMessage(chat_id=5, text="a"))
    assert len(transport.calls) == 2
