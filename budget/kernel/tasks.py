"""Background tasks' end: one way to stop a loop the process started (a sweeper, a
heartbeat, a watcher, a worker).

Here, the lowest layer, so that ``budget/``, ``llm/``, ``scheduler/`` and ``bot/`` share it.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

__all__ = ["cancel_and_wait"]


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
