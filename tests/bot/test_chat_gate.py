"""bot.chat.streaming.EditPacer: one streaming draft/edit per chat per interval, shared by the
chat's answers, which take turns."""

from __future__ import annotations

import asyncio
from typing import Any, cast

from aiogram import Bot

from bot.chat.streaming import EditPacer, _Throttled
from llm.stream import StreamControl

CHAT = -100


async def test_answers_take_turns_in_arrival_order_and_a_rejoin_goes_last() -> None:
    """A, B, C want the chat at once: A first; B only after A is done, then C; A,
    joining again meanwhile, comes after C (round robin, nobody starves)."""
    gate = EditPacer()
    loop = asyncio.get_running_loop()
    order: list[str] = []

    async def one(who: str) -> None:
        await gate.turn(CHAT, who)
        order.append(who)

    await gate.turn(CHAT, "A")
    waiting = [asyncio.create_task(one("B")), asyncio.create_task(one("C"))]
    await asyncio.sleep(0)
    assert order == []  # A holds the turn while its call is in flight
    gate.done(CHAT, "A", loop.time())
    rejoin = asyncio.create_task(one("A"))
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert order == ["B"]
    gate.done(CHAT, "B", loop.time())
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert order == ["B", "C"]
    gate.done(CHAT, "C", loop.time())
    await asyncio.wait_for(rejoin, 1)
    assert order == ["B", "C", "A"]
    await asyncio.gather(*waiting)


async def test_next_turn_waits_for_the_interval_and_other_chats_do_not() -> None:
    """After a call the chat's next turn waits until the ``next_at`` given to done();
    another chat's turn is not held up by it."""
    gate = EditPacer()
    loop = asyncio.get_running_loop()
    await gate.turn(CHAT, "A")
    gate.done(CHAT, "A", loop.time() + 0.05)
    start = loop.time()
    await asyncio.wait_for(gate.turn(CHAT + 1, "X"), 0.01)  # another chat: at once
    await gate.turn(CHAT, "B")
    assert loop.time() - start >= 0.05 - 0.005


async def test_a_cancelled_waiter_leaves_and_idle_chats_are_forgotten() -> None:
    """A display closed while waiting leaves the queue (the next one gets the turn);
    forget_idle drops only chats nobody waits in whose last call is older than given."""
    gate = EditPacer()
    loop = asyncio.get_running_loop()
    await gate.turn(CHAT, "A")
    b = asyncio.create_task(gate.turn(CHAT, "B"))
    c = asyncio.create_task(gate.turn(CHAT, "C"))
    await asyncio.sleep(0)
    b.cancel()
    await asyncio.gather(b, return_exceptions=True)
    gate.done(CHAT, "A", loop.time())
    await asyncio.wait_for(c, 1)  # C, not the cancelled B
    gate.forget_idle(loop.time() + 1)
    assert repr(gate) == "EditPacer(chats=1)"  # C still holds the turn
    gate.done(CHAT, "C", loop.time())
    gate.forget_idle(loop.time() - 1)
    assert repr(gate) == "EditPacer(chats=1)"  # its last call is recent
    gate.forget_idle(loop.time() + 1)
    assert repr(gate) == "EditPacer(chats=0)"


async def test_a_display_closed_during_its_call_still_spaces_the_chats_next_call() -> None:
    """An answer's final message closes its display while that display's edit is at
    Telegram; the call reached Telegram, so the chat's next streamed call (another
    answer's) still waits the interval. Before, the closed display only left the queue
    and the next answer's edit followed at once (two edits 25 ms apart under load)."""
    interval = 0.2
    gate = EditPacer()
    loop = asyncio.get_running_loop()
    at_telegram = asyncio.Event()
    calls: list[float] = []

    class Slow(_Throttled):
        __slots__ = ()

        async def _show(self, text: str) -> bool:
            calls.append(loop.time())
            at_telegram.set()
            await asyncio.sleep(10)  # Telegram has not answered yet
            return True

    no_bot = cast(Bot, cast(Any, None))
    control = StreamControl(lambda _t: None)
    first = Slow(no_bot, CHAT, interval, control, on_shown=None, metrics=None, gate=gate)
    first.on_text("partial answer")
    await asyncio.wait_for(at_telegram.wait(), 1)
    await first.close()  # the final answer arrived while the edit was in flight
    await gate.turn(CHAT, "next answer")
    assert loop.time() - calls[0] >= interval - 0.01
