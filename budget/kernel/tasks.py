"""Tasks' end: one way to stop a loop the process started (a sweeper, a heartbeat, a
watcher, a worker), and one way to give running tasks a grace on the injected clock.

Here, the lowest layer, so that ``budget/``, ``llm/``, ``scheduler/`` and ``bot/`` share it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Collection
from typing import Any, TypeVar

from budget.kernel.clock import Clock

__all__ = ["cancel_and_wait", "ended_within"]

_Task = TypeVar("_Task", bound=asyncio.Future[Any])


async def cancel_and_wait(task: asyncio.Task[Any] | None) -> None:
    """Cancel ``task`` and wait until it has ended; ``None`` or a finished task is fine.

    Its :class:`asyncio.CancelledError` is swallowed; any other exception it ended with is
    raised here (a loop that crashed is not hidden by being stopped).
    """
    if task is None:
        return
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


async def ended_within(tasks: Collection[_Task], seconds: float, clock: Clock) -> set[_Task]:
    """Wait until every task of ``tasks`` has ended or ``clock`` slept ``seconds``.

    A grace is policy, so it runs on the injected clock, not the loop's
    (``docs/decisions/020-clock-rule.md``): the tasks race one ``clock.sleep``. No task
    is cancelled here.

    Returns:
        the tasks still running then (empty when all ended in time).
    """
    pending = {task for task in tasks if not task.done()}
    if not pending:
        return set()
    ended = asyncio.ensure_future(asyncio.wait(pending))
    pause = asyncio.ensure_future(clock.sleep(seconds))
    try:
        await asyncio.wait({ended, pause}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in (ended, pause):
            waiter.cancel()
        await asyncio.gather(ended, pause, return_exceptions=True)
    return {task for task in pending if not task.done()}
