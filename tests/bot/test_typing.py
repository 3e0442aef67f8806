"""The "typing…" indicator (:mod:`bot.chat.typing`): a timer until it is due, then a
sender that renews it; an answer that comes first costs no task and no Bot API call."""

from __future__ import annotations

import asyncio
from typing import Any, cast

from aiogram import Bot

from bot.chat.typing import Typing


class _Bot:
    def __init__(self, fail: bool = False) -> None:
        self.sent: list[tuple[int, str, int | None]] = []
        self.fail = fail
        self.sending = asyncio.Event()

    async def send_chat_action(self, *, chat_id: int, action: str, message_thread_id: Any) -> bool:
        self.sent.append((chat_id, action, message_thread_id))
        self.sending.set()
        if self.fail:
            raise RuntimeError("chat refuses it")
        return True


def _tasks_made(loop: asyncio.AbstractEventLoop) -> list[object]:
    made: list[object] = []

    def factory(loop: asyncio.AbstractEventLoop, coro: Any, **kw: Any) -> asyncio.Task[Any]:
        made.append(coro)
        return asyncio.Task(coro, loop=loop, **kw)

    loop.set_task_factory(factory)
    return made


async def test_an_answer_before_the_delay_makes_no_task_and_no_call() -> None:
    bot = _Bot()
    loop = asyncio.get_running_loop()
    made = _tasks_made(loop)
    try:
        async with Typing(cast(Bot, bot), 5, None, delay_s=3600, interval_s=4):
            await asyncio.sleep(0)
    finally:
        loop.set_task_factory(None)
    assert bot.sent == [] and made == []


async def test_past_the_delay_it_is_sent_in_the_topic_then_stops_with_the_block() -> None:
    bot = _Bot()
    async with Typing(cast(Bot, bot), 5, 7, delay_s=0, interval_s=3600):
        await bot.sending.wait()
    assert bot.sent == [(5, "typing", 7)]
    await asyncio.sleep(0)
    assert bot.sent == [(5, "typing", 7)]  # its renewal was cancelled with the block


async def test_a_refused_send_ends_the_indicator_not_the_block() -> None:
    bot = _Bot(fail=True)
    async with Typing(cast(Bot, bot), 5, None, delay_s=0, interval_s=0):
        await bot.sending.wait()
        for _ in range(3):
            await asyncio.sleep(0)
    assert bot.sent == [(5, "typing", None)]
