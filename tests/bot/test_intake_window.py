"""The intake window: the AIMD policy on fake lag samples, the FIFO gate, the probe on an
injected clock (the burst through the real bot: tests/e2e/test_intake_window.py)."""

from __future__ import annotations

import asyncio

import pytest

from bot.app.intake_window import (
    BUSY,
    FLOOR,
    PERIOD_S,
    PROBE_S,
    IntakeWindow,
    LagProbe,
    LagWindow,
    intake_window_of,
)
from tests.support.clocks import ManualClock

TARGET_S = 0.004
SAMPLES = 10  # samples per period, PERIOD_S / SAMPLES apart


class Feed:
    """Fake probe samples for a policy: whole periods of one lag, a busy or idle loop."""

    def __init__(self, policy: LagWindow) -> None:
        self.policy = policy
        self.now = 100.0
        self.cpu = 0.0
        policy.observe(self.now, 0.0, cpu_s=0.0, full=False)  # opens the first period

    def period(self, lag_s: float, *, busy: bool = True, full: bool = True) -> int:
        """One period's samples; the size decided at its last one."""
        step = PERIOD_S / SAMPLES * 1.001
        limit = self.policy.limit
        for _ in range(SAMPLES):
            self.now += step
            self.cpu += step * (0.9 if busy else BUSY / 2)
            limit = self.policy.observe(self.now, lag_s, cpu_s=self.cpu, full=full)
        return limit


def policy(floor: int = 4, ceiling: int = 50) -> LagWindow:
    return LagWindow(floor=floor, ceiling=ceiling, target_s=TARGET_S)


def test_starts_at_the_floor_doubles_then_grows_by_one_after_a_halving() -> None:
    feed = Feed(policy(floor=4, ceiling=50))
    assert feed.policy.limit == 4
    assert [feed.period(0.001) for _ in range(3)] == [8, 16, 32]
    assert feed.period(0.010) == 16
    feed.period(0.001)  # skipped after the halving
    assert [feed.period(0.001) for _ in range(3)] == [17, 18, 19]


def test_does_not_grow_when_the_window_was_never_full() -> None:
    feed = Feed(policy())
    sizes = [feed.period(0.0, full=False) for _ in range(5)]
    assert sizes == [4] * 5


def test_halves_when_the_lag_is_above_the_target_then_skips_a_period() -> None:
    feed = Feed(policy(ceiling=40))
    for _ in range(60):
        feed.period(0.001)
    assert feed.policy.limit == 40  # the ceiling
    assert feed.period(0.010) == 20
    assert feed.period(0.010) == 20  # the period after a halving is not judged
    assert feed.period(0.010) == 10
    feed.period(0.010)
    assert feed.period(0.010) == 5
    feed.period(0.010)
    assert feed.period(0.010) == 4  # the floor
    feed.period(0.010)
    assert feed.period(0.010) == 4


def test_one_late_sample_in_a_hundred_is_the_p99() -> None:
    feed = Feed(policy())
    for _ in range(20):
        feed.period(0.001)
    before = feed.policy.limit
    # 10 samples a period: one late sample is its p99 (nearest rank)
    step = PERIOD_S / SAMPLES * 1.001
    limits = []
    for i in range(SAMPLES):
        feed.now += step
        feed.cpu += step
        lag = 0.020 if i == 3 else 0.001
        limits.append(feed.policy.observe(feed.now, lag, cpu_s=feed.cpu, full=True))
    assert limits[-1] == (before + 1) // 2


def test_a_late_loop_that_was_idle_is_not_cut() -> None:
    """The process descheduled on a loaded machine (or a clock jump): fewer updates in
    flight would not help, the window stays."""
    feed = Feed(policy())
    for _ in range(10):
        feed.period(0.001)
    size = feed.policy.limit
    assert [feed.period(0.050, busy=False) for _ in range(3)] == [size] * 3


def test_floor_and_ceiling_are_checked() -> None:
    with pytest.raises(ValueError, match="floor"):
        LagWindow(floor=0, ceiling=5, target_s=TARGET_S)
    with pytest.raises(ValueError, match="floor"):
        LagWindow(floor=6, ceiling=5, target_s=TARGET_S)


def test_the_setting_zero_is_a_fixed_window_without_a_probe() -> None:
    window, probe = intake_window_of(50, 0, ManualClock())
    assert probe is None and window.limit == 50
    window, probe = intake_window_of(2, 4, ManualClock())
    assert probe is not None and window.limit == 2  # the floor is the ceiling when lower
    window, probe = intake_window_of(50, 4, ManualClock())
    assert probe is not None and window.limit == FLOOR


async def test_waiters_leave_in_arrival_order_and_newcomers_do_not_overtake() -> None:
    window = IntakeWindow(1)
    order: list[int] = []

    async def one(i: int) -> None:
        async with window.slot():
            order.append(i)
            await asyncio.sleep(0)

    tasks = [asyncio.create_task(one(i)) for i in range(6)]
    await asyncio.sleep(0)
    # a newcomer while a woken waiter has not resumed yet queues behind it
    tasks.append(asyncio.create_task(one(6)))
    await asyncio.gather(*tasks)
    assert order == list(range(7))
    assert window.active == 0 and window.waiting == 0 and window.waited == 6


async def test_a_cancelled_waiter_gives_its_turn_on() -> None:
    window = IntakeWindow(1)
    await window.acquire()
    first = asyncio.create_task(window.acquire())
    second = asyncio.create_task(window.acquire())
    await asyncio.sleep(0)
    first.cancel()
    window.release()  # granted to `first`, which is cancelled before it resumes
    with pytest.raises(asyncio.CancelledError):
        await first
    await asyncio.wait_for(second, 1)
    assert window.active == 1 and window.waiting == 0


async def test_a_larger_size_wakes_waiters_a_smaller_one_lets_holders_finish() -> None:
    policy = LagWindow(floor=1, ceiling=4, target_s=TARGET_S)
    window = IntakeWindow(4, policy)
    await window.acquire()
    waiting = [asyncio.create_task(window.acquire()) for _ in range(2)]
    await asyncio.sleep(0)
    now = cpu = 0.0
    while window.limit < 3:  # full, within the target: one more each period
        now += PERIOD_S / 2
        cpu += PERIOD_S / 2
        window.observe(now, 0.0, cpu)
    await asyncio.wait_for(asyncio.gather(*waiting), 1)
    assert window.active == 3
    while window.limit > 1:
        now += PERIOD_S / 2
        cpu += PERIOD_S / 2
        window.observe(now, 0.050, cpu)
    assert window.active == 3  # the holders keep their slots
    window.release()
    window.release()
    late = asyncio.create_task(window.acquire())
    await asyncio.sleep(0)
    assert not late.done()  # 1 held of 1
    window.release()
    await asyncio.wait_for(late, 1)


class LateClock(ManualClock):
    """Each sleep ends ``lag_s`` late (virtual time)."""

    lag_s = 0.0

    async def sleep(self, seconds: float) -> None:
        await super().sleep(seconds + self.lag_s)


async def test_the_probe_feeds_the_lateness_of_its_sleeps_to_the_window() -> None:
    clock = LateClock()
    window, _ = intake_window_of(50, 4, clock)
    used = [0.0]

    def cpu() -> float:  # the loop thread busy all the time
        used[0] += PROBE_S
        return used[0]

    probe = LagProbe(window, clock, cpu)
    for _ in range(FLOOR):
        await window.acquire()  # full
    probe.start()

    async def run(seconds: float) -> None:
        end = clock.monotonic() + seconds
        while clock.monotonic() < end:  # noqa: ASYNC110 - the probe moves this clock
            await asyncio.sleep(0)

    await run(PERIOD_S * 1.5)
    assert window.limit == 2 * FLOOR  # a full period within the target
    await run(PERIOD_S * 5)
    assert window.limit == 2 * FLOOR  # no longer full: no growth
    clock.lag_s = 0.010
    await run(PERIOD_S * 3)
    assert window.limit == FLOOR  # halved, not below the floor
    await probe.stop()
