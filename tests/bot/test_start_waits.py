"""Flood waits on the start-up calls (``bot/app/start_waits.py``): waited out within one
budget for the whole start, never begun when they would pass it. The clock is a
:class:`~tests.support.clocks.ManualClock`: nothing sleeps."""

from __future__ import annotations

import logging

import pytest
from aiogram.exceptions import TelegramRetryAfter
from aiogram.methods import SetWebhook

from bot.app.start_waits import START_WAIT_S, StartFloodWait, StartWaits
from tests.support.clocks import ManualClock


class _Telegram:
    """Answers 429 with each ``retry_after`` of ``waits`` in turn, then ``True``; records
    the clock's monotonic time of every call."""

    def __init__(self, clock: ManualClock, *waits: int) -> None:
        self._clock = clock
        self._waits = list(waits)
        self.calls: list[float] = []

    async def __call__(self) -> bool:
        self.calls.append(self._clock.monotonic())
        if self._waits:
            wait = self._waits.pop(0)
            raise TelegramRetryAfter(
                method=SetWebhook(url="https://kopek.example.org/hook"),
                message=f"Too Many Requests: retry after {wait}",
                retry_after=wait,
            )
        return True


async def test_each_retry_after_is_waited_out_then_the_call_made_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = ManualClock()
    telegram = _Telegram(clock, 2, 5)
    waits = StartWaits(clock)
    with caplog.at_level(logging.WARNING):
        assert await waits.call("setWebhook", telegram) is True
    start = telegram.calls[0]
    assert [t - start for t in telegram.calls] == [0, 2, 7]
    assert waits.waited_s == 7
    lines = [r.getMessage() for r in caplog.records]
    assert [line.split(" (")[0] for line in lines] == [
        "Telegram asked to wait 2 s before setWebhook",
        "Telegram asked to wait 5 s before setWebhook",
    ]


async def test_the_budget_is_shared_by_the_calls_of_one_start_and_never_overslept() -> None:
    """25 s then 25 s are waited (50 of 60); the next call's 25 s would pass the
    budget: raised at once, naming the call and both figures."""
    clock = ManualClock()
    waits = StartWaits(clock)
    assert await waits.call("setWebhook", _Telegram(clock, 25, 25)) is True
    before = clock.monotonic()
    with pytest.raises(StartFloodWait) as refused:
        await waits.call("setMyCommands", _Telegram(clock, 25))
    assert clock.monotonic() == before  # not slept
    assert (refused.value.method, refused.value.retry_after) == ("setMyCommands", 25)
    assert refused.value.waited_s == 50 == START_WAIT_S - 10
    assert "before setMyCommands" in str(refused.value) and "60 s" in str(refused.value)


async def test_a_retry_after_beyond_the_budget_is_not_slept_at_all() -> None:
    clock = ManualClock()
    before = clock.monotonic()
    with pytest.raises(StartFloodWait, match="wait 3600 s before setWebhook"):
        await StartWaits(clock).call("setWebhook", _Telegram(clock, 3600))
    assert clock.monotonic() == before
