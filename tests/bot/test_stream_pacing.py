"""bot.chat.streaming.pacing: one streaming draft/edit per chat per interval, shared by the
chat's answers, which take turns; the pace is the injected clock's (a manual clock here,
so no test waits in real time for an interval)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any, cast

from aiogram import Bot

from bot.chat.streaming.pacing import EditPacer, PacedDisplay
from bot.chat.streaming.registry import LiveStream, StreamRegistry
from llm.stream import StreamControl
from tests.support.clocks import ManualClock, VirtualClock

CHAT = -100


async def test_answers_take_turns_in_arrival_order_and_a_rejoin_goes_last() -> None:
    """A, B, C want the chat at once: A first; B only after A is done, then C; A,
    joining again meanwhile, comes after C (round robin, nobody starves)."""
    clock = ManualClock()
    gate = EditPacer(clock)
    order: list[str] = []

    async def one(who: str) -> None:
        await gate.turn(CHAT, who)
        order.append(who)

    await gate.turn(CHAT, "A")
    waiting = [asyncio.create_task(one("B")), asyncio.create_task(one("C"))]
    await asyncio.sleep(0)
    assert order == []  # A holds the turn while its call is in flight
    gate.done(CHAT, "A", clock.monotonic())
    rejoin = asyncio.create_task(one("A"))
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert order == ["B"]
    gate.done(CHAT, "B", clock.monotonic())
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert order == ["B", "C"]
    gate.done(CHAT, "C", clock.monotonic())
    await asyncio.wait_for(rejoin, 1)
    assert order == ["B", "C", "A"]
    await asyncio.gather(*waiting)


async def test_next_turn_waits_for_the_interval_and_other_chats_do_not() -> None:
    """After a call the chat's next turn waits until the ``next_at`` given to done();
    another chat's turn is not held up by it."""
    clock = ManualClock()
    gate = EditPacer(clock)
    await gate.turn(CHAT, "A")
    next_at = clock.monotonic() + 0.05
    gate.done(CHAT, "A", next_at)
    start = clock.monotonic()
    await gate.turn(CHAT + 1, "X")  # another chat: at once
    assert clock.monotonic() == start
    await gate.turn(CHAT, "B")
    assert clock.monotonic() >= next_at


async def test_a_cancelled_waiter_leaves_and_idle_chats_are_forgotten() -> None:
    """A display closed while waiting leaves the queue (the next one gets the turn);
    forget_idle drops only chats nobody waits in whose last call is older than given."""
    clock = ManualClock()
    gate = EditPacer(clock)
    await gate.turn(CHAT, "A")
    b = asyncio.create_task(gate.turn(CHAT, "B"))
    c = asyncio.create_task(gate.turn(CHAT, "C"))
    await asyncio.sleep(0)
    b.cancel()
    await asyncio.gather(b, return_exceptions=True)
    gate.done(CHAT, "A", clock.monotonic())
    await asyncio.wait_for(c, 1)  # C, not the cancelled B
    gate.forget_idle(clock.monotonic() + 1)
    assert repr(gate) == "EditPacer(chats=1)"  # C still holds the turn
    gate.done(CHAT, "C", clock.monotonic())
    gate.forget_idle(clock.monotonic() - 1)
    assert repr(gate) == "EditPacer(chats=1)"  # its last call is recent
    gate.forget_idle(clock.monotonic() + 1)
    assert repr(gate) == "EditPacer(chats=0)"


async def test_a_display_closed_during_its_call_still_spaces_the_chats_next_call() -> None:
    """An answer's final message closes its display while that display's edit is at
    Telegram; the call reached Telegram, so the chat's next streamed call (another
    answer's) still waits the interval. Before, the closed display only left the queue
    and the next answer's edit followed at once (two edits 25 ms apart under load)."""
    interval = 0.2
    clock = ManualClock()
    gate = EditPacer(clock)
    at_telegram = asyncio.Event()
    calls: list[float] = []

    class Slow(PacedDisplay):
        __slots__ = ()

        async def _show(self, text: str) -> bool:
            calls.append(clock.monotonic())
            at_telegram.set()
            await asyncio.sleep(10)  # Telegram has not answered yet
            return True

    no_bot = cast(Bot, cast(Any, None))
    control = StreamControl(lambda _t: None)
    control.reading = True  # the provider's stream is still being read
    first = Slow(no_bot, CHAT, interval, control, clock, on_shown=None, metrics=None, pacer=gate)
    first.on_text("partial answer")
    await asyncio.wait_for(at_telegram.wait(), 1)
    await first.close()  # the final answer arrived while the edit was in flight
    await gate.turn(CHAT, "next answer")
    assert clock.monotonic() >= calls[0] + interval


async def test_waiting_for_stopped_streams_is_bounded_by_the_clock() -> None:
    """/kill hard waits for the streams it cut to settle for at most its timeout on the
    injected clock: a stream that never leaves is counted once the clock has moved past
    the timeout (no real wait)."""
    clock = ManualClock()
    registry = StreamRegistry(clock)
    stuck = LiveStream(StreamControl(), CHAT, owner_id=1)
    registry.add(stuck)
    assert registry.stop_all("kill") == 1
    start = clock.monotonic()
    assert await registry.wait_stopped(5.0) == 1
    assert clock.monotonic() - start >= 5.0


async def test_a_stopped_stream_leaving_ends_the_wait_before_the_timeout() -> None:
    """The stream leaving (its attempt settled) ends the wait at once, while the
    clock has not moved at all (a virtual clock: its sleep ends only when advanced)."""
    clock = VirtualClock(datetime(2026, 1, 1, tzinfo=UTC))
    registry = StreamRegistry(clock)
    leaving = LiveStream(StreamControl(), CHAT, owner_id=2)
    registry.add(leaving)
    registry.stop_all("kill")
    waiting = asyncio.create_task(registry.wait_stopped(5.0))
    await asyncio.sleep(0)
    assert not waiting.done()
    registry.remove(leaving)
    assert await asyncio.wait_for(waiting, 1) == 0
    assert clock.monotonic() == 1000.0


async def test_a_stream_read_to_its_end_before_the_turn_shows_no_draft() -> None:
    """A provider that answers at once: the whole stream has been read by the time the
    display's turn comes, so nothing is shown (the final answer goes out at once; no Bot
    API call for a draft); while the stream is read, the turn shows the text."""
    clock = ManualClock()
    shown: list[str] = []

    class Recording(PacedDisplay):
        __slots__ = ()

        async def _show(self, text: str) -> bool:
            shown.append(text)
            return True

    no_bot = cast(Bot, cast(Any, None))
    control = StreamControl(lambda _t: None)
    display = Recording(no_bot, CHAT, 1.0, control, clock, on_shown=None, metrics=None, pacer=None)
    display.on_text("the whole answer")  # read to its end already: reading is False
    for _ in range(5):
        await asyncio.sleep(0)
    assert shown == []
    control.reading = True  # a stream being read (e.g. the next attempt's)
    display.on_text("a part")
    for _ in range(5):
        await asyncio.sleep(0)
    await display.close()
    assert shown == ["a part"]
