"""budget.kernel.tasks: cancel_and_wait (the one way background loops are stopped) and
ended_within (a grace for running tasks, on the injected clock)."""

from __future__ import annotations

import asyncio

import pytest

from budget.kernel.tasks import cancel_and_wait, ended_within
from tests.support.clocks import ManualClock


async def test_a_running_loop_is_cancelled_and_awaited() -> None:
    started = asyncio.Event()
    ended: list[str] = []

    async def loop() -> None:
        started.set()
        try:
            await asyncio.Event().wait()
        finally:
            ended.append("cleaned up")

    task = asyncio.create_task(loop())
    await started.wait()
    await cancel_and_wait(task)
    assert task.cancelled()
    assert ended == ["cleaned up"]


async def test_none_and_a_finished_task_are_fine() -> None:
    await cancel_and_wait(None)
    task = asyncio.create_task(asyncio.sleep(0))
    await task
    await cancel_and_wait(task)
    assert task.done() and not task.cancelled()


async def test_a_loop_that_crashed_is_not_hidden() -> None:
    async def crash() -> None:
        raise RuntimeError("sweeper broke")

    task = asyncio.create_task(crash())
    await asyncio.sleep(0)
    with pytest.raises(RuntimeError, match="sweeper broke"):
        await cancel_and_wait(task)


async def test_a_grace_runs_on_the_injected_clock_not_the_loops() -> None:
    """A task that never ends is still running once the manual clock slept the grace
    (which takes no real time); it is not cancelled."""
    clock = ManualClock()
    stuck = asyncio.create_task(asyncio.Event().wait())
    start = clock.monotonic()
    assert await ended_within([stuck], 3600.0, clock) == {stuck}
    assert clock.monotonic() - start == 3600.0
    assert not stuck.done()
    await cancel_and_wait(stuck)


async def test_tasks_that_end_in_time_are_not_returned() -> None:
    clock = ManualClock()
    gate = asyncio.Event()

    async def finishes() -> None:
        await gate.wait()

    task = asyncio.create_task(finishes())
    asyncio.get_running_loop().call_soon(gate.set)
    assert await ended_within([task], 3600.0, clock) == set()
    assert task.done()
    before = clock.monotonic()
    assert await ended_within([task], 5.0, clock) == set()
    assert clock.monotonic() == before  # every task had ended: no grace slept at all
