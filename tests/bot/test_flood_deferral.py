"""The deferral rule on the real FloodWaits gate and a ManualClock: a 43,838-second wait
(a real report) defers every message with one notice; a short wait defers none."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, cast

from bot.chat.deferral import FloodDeferral
from bot.chat.outbox import Outbox
from bot.session.flood_waits import FloodWaits
from tests.support.clocks import ManualClock


@dataclass
class _Kept:
    """The outbox's keep(), recorded (the worker that sends is tested end to end)."""

    rows: list[dict[str, Any]] = field(default_factory=list)

    async def keep(self, chat_id: int, markdown: str, **kwargs: Any) -> None:
        self.rows.append({"chat_id": chat_id, "text": markdown, **kwargs})


def _deferral(
    clock: ManualClock, kept: _Kept, bound_s: float = 600
) -> tuple[FloodWaits, FloodDeferral]:
    waits = FloodWaits(clock)
    return waits, FloodDeferral(waits, cast(Outbox, kept), clock, bound_s)


def _notice(seconds: float) -> str:
    return f"paused {seconds:.0f} s"


async def test_a_wait_of_hours_defers_every_message_with_one_notice_at_its_end() -> None:
    clock, kept = ManualClock(), _Kept()
    waits, deferral = _deferral(clock, kept)
    waits.close(7, 43_838)
    assert await deferral.defer(7, _notice)
    clock.advance(3_600)
    assert await deferral.defer(7, _notice)
    assert kept.rows == [
        {
            "chat_id": 7,
            "text": "paused 43838 s",
            "reply_to": None,
            "parts_sent": 0,
            "wait_s": 43_838,
        }
    ]
    assert not await deferral.defer(8, _notice)  # another chat is open
    clock.advance(43_838 - 3_600)
    assert not await deferral.defer(7, _notice)  # the wait is over: answered again
    waits.close(7, 1_000)
    assert await deferral.defer(7, _notice)  # a new long wait: a new notice
    assert len(kept.rows) == 2


async def test_a_wait_within_the_bound_is_answered_and_kept_as_before() -> None:
    clock, kept = ManualClock(), _Kept()
    waits, deferral = _deferral(clock, kept, bound_s=600)
    waits.close(7, 600)
    assert not await deferral.defer(7, _notice)
    assert kept.rows == []
