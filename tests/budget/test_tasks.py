"""budget.kernel.tasks.cancel_and_wait: the one way background loops are stopped."""

from __future__ import annotations

import asyncio

import pytest

from budget.kernel.tasks import cancel_and_wait


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
