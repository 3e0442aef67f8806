"""getUpdates asks for small batches (bot/session/updates.py), and confirms a batch
only once its updates are taken in (else a crash between the two loses them); other
requests pass."""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import pytest
from aiogram import Bot
from aiogram.methods import GetUpdates, SendMessage, TelegramMethod
from aiogram.types import TelegramObject, Update

from bot.session.updates import (
    POLL_BATCH,
    ConfirmWhenTakenIn,
    EndOfUpdate,
    IntakeBarrier,
    PollInSmallBatches,
)


async def test_get_updates_without_a_limit_asks_for_a_small_batch() -> None:
    """A getUpdates without a limit asks for POLL_BATCH; an explicit limit and other
    methods are left alone."""
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


class HeldClock:
    """A clock whose ``sleep`` returns only once the test moved ``monotonic`` past its
    end (:meth:`advance`): time passes when the test says so, and not before."""

    def __init__(self) -> None:
        self._mono = 100.0
        self._moved = asyncio.Event()

    def now(self) -> datetime:
        return datetime(2026, 12, 1, tzinfo=UTC) + timedelta(seconds=self._mono)

    def monotonic(self) -> float:
        return self._mono

    async def sleep(self, seconds: float) -> None:
        end = self._mono + seconds
        while self._mono < end:
            await self._moved.wait()

    def advance(self, seconds: float) -> None:
        self._mono += seconds
        moved, self._moved = self._moved, asyncio.Event()
        moved.set()


async def settle() -> None:
    """Let every ready task run until none is left to start (no time passes)."""
    for _ in range(10):
        await asyncio.sleep(0)


async def test_a_wait_holds_until_every_update_below_the_offset_is_taken_in() -> None:
    """Ids at or above the offset are not waited for; ids taken in twice, or never
    fetched, change nothing; the wait ends without the clock moving."""
    clock = HeldClock()
    barrier = IntakeBarrier(clock, wait_s=5.0)
    await barrier.wait(None)  # the first poll confirms nothing
    await barrier.wait(10**9)  # nothing fetched: nothing to wait for
    barrier.fetched([11, 12, 13])
    barrier.taken_in(99)  # never fetched
    waiting = asyncio.ensure_future(barrier.wait(13))  # confirms 11 and 12, not 13
    await settle()
    assert not waiting.done()
    barrier.taken_in(11)
    barrier.taken_in(11)
    await settle()
    assert not waiting.done()
    barrier.taken_in(12)
    await waiting
    assert barrier.pending == [13]
    assert clock.monotonic() == 100.0


async def test_a_wait_runs_out_after_wait_s_with_one_warning_naming_the_ids(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A stuck intake does not stop polling: after ``wait_s`` the poll goes on, one
    WARNING names the ids not taken in, and they are not waited for again."""
    clock = HeldClock()
    barrier = IntakeBarrier(clock, wait_s=5.0)
    barrier.fetched([21, 22, 23])
    barrier.taken_in(22)
    with caplog.at_level(logging.DEBUG, logger="bot.session.updates"):
        waiting = asyncio.ensure_future(barrier.wait(24))
        await settle()
        clock.advance(4.9)
        await settle()
        assert not waiting.done()
        clock.advance(0.1)
        await waiting
        assert barrier.pending == []
        await barrier.wait(24)  # forgotten: no second wait, no second warning
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [
        "polling goes on after 5.0 s although updates 21, 23 are not taken in yet"
        " (no intake record): a crash before their intake loses them"
    ]


async def test_a_cancelled_wait_keeps_the_ids() -> None:
    """Polling stopped while it waited: the ids stay (nothing was confirmed)."""
    barrier = IntakeBarrier(HeldClock(), wait_s=5.0)
    barrier.fetched([31])
    waiting = asyncio.ensure_future(barrier.wait(32))
    await settle()
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert barrier.pending == [31]


def _update(update_id: int) -> Update:
    return Update.model_validate(
        {
            "update_id": update_id,
            "message": {
                "message_id": update_id,
                "date": 1_780_000_000,
                "chat": {"id": 5, "type": "private"},
                "from": {"id": 5, "is_bot": False, "first_name": "U"},
                "text": "hi",
            },
        }
    )


async def test_get_updates_confirming_a_batch_goes_out_once_the_batch_is_taken_in() -> None:
    """The session middleware: the batch a getUpdates returns is held against the next
    getUpdates whose offset confirms it; other requests never wait."""
    sent: list[TelegramMethod[Any]] = []
    batches = [[_update(41), _update(42)], []]

    async def make_request(_bot: Bot, method: TelegramMethod[Any]) -> Any:
        sent.append(method)
        return batches.pop(0) if isinstance(method, GetUpdates) else True

    nxt = cast(Any, make_request)
    barrier = IntakeBarrier(HeldClock(), wait_s=5.0)
    confirm = ConfirmWhenTakenIn(barrier)
    bot = Bot("42:TEST")
    try:
        first = await confirm(nxt, bot, GetUpdates(timeout=30))
        assert [u.update_id for u in cast(Any, first)] == [41, 42]
        assert barrier.pending == [41, 42]
        polling = asyncio.ensure_future(confirm(nxt, bot, GetUpdates(offset=43, timeout=30)))
        await settle()
        assert len(sent) == 1  # held: 41 and 42 are not taken in
        await confirm(nxt, bot, SendMessage(chat_id=5, text="an answer"))  # not held
        barrier.taken_in(41)
        barrier.taken_in(42)
        await polling
    finally:
        await bot.session.close()
    assert [type(m).__name__ for m in sent] == ["GetUpdates", "SendMessage", "GetUpdates"]


async def test_the_end_of_an_update_takes_it_in_also_when_its_handler_fails() -> None:
    """EndOfUpdate: an update that never gets an intake record (not a message, dropped,
    refused, failed) stops holding the poll when its handling ends."""
    barrier = IntakeBarrier(HeldClock(), wait_s=5.0)
    barrier.fetched([51, 52])
    end = EndOfUpdate(barrier)

    async def fine(_event: TelegramObject, _data: dict[str, Any]) -> str:
        return "done"

    async def failing(_event: TelegramObject, _data: dict[str, Any]) -> None:
        raise RuntimeError("handler failed")

    assert await end(fine, _update(51), {}) == "done"
    with pytest.raises(RuntimeError):
        await end(failing, _update(52), {})
    assert barrier.pending == []


def _press(update_id: int) -> Update:
    message = _update(update_id).message
    assert message is not None
    return Update.model_validate(
        {
            "update_id": update_id,
            "callback_query": {
                "id": str(update_id),
                "from": {"id": 5, "is_bot": False, "first_name": "U"},
                "chat_instance": "5",
                "data": "go",
                "message": message.model_dump(mode="json", by_alias=True, exclude_none=True),
            },
        }
    )


async def test_an_update_without_an_intake_record_is_taken_in_as_its_handling_starts() -> None:
    """A callback press keeps no intake record: its handler may run as long as it likes
    (a held answer) while the poll confirming it goes out; a message is waited for until
    its intake says so or its handling ends."""
    barrier = IntakeBarrier(HeldClock(), wait_s=5.0)
    barrier.fetched([61, 62])
    end = EndOfUpdate(barrier)
    answer = asyncio.Event()

    async def long_answer(_event: TelegramObject, _data: dict[str, Any]) -> str:
        await answer.wait()
        return "answered"

    press = asyncio.ensure_future(end(long_answer, _press(61), {}))
    message = asyncio.ensure_future(end(long_answer, _update(62), {}))
    await settle()
    assert barrier.pending == [62]
    waiting = asyncio.ensure_future(barrier.wait(62))  # confirms the press only
    await settle()
    assert waiting.done() and not press.done()
    answer.set()
    assert await press == "answered" and await message == "answered"
    assert barrier.pending == []
