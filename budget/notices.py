"""What the ledger tells its owner, each in a task of its own: the automatic kill switch
tripping, and storage failing (logged and told once per reason).

:class:`LedgerNotices` belongs to one :class:`budget.ledger.Ledger`; the listeners are the
bot's (admin notices).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Coroutine
from typing import Any

from budget.status import KillState

__all__ = ["KillListener", "LedgerNotices", "LostListener"]

log = logging.getLogger("budget.ledger")  # the ledger's own lines

#: Called (as a task) when the automatic trigger trips the kill switch.
KillListener = Callable[[KillState], Coroutine[Any, Any, None]]
#: Called (as a task) once per reason when storage fails: ``"deleted"``/``"replaced"``
#: (the database path no longer names the open file), ``"storage"`` (read-only,
#: full disk, I/O error), ``"server"`` (PostgreSQL cannot be reached or refuses) or
#: ``"timeout"`` (PostgreSQL: a lock held by another session past the lock timeout, or no
#: pool connection within the pool timeout).
LostListener = Callable[[str], Coroutine[Any, Any, None]]


class LedgerNotices:
    """Tells the owner of a ledger what happened to it (module docstring).

    Args:
        on_auto_kill: awaited in a task each time the burn-rate trigger trips.
        on_unavailable: awaited in a task once per reason storage failed.
    """

    __slots__ = ("_tasks", "_told", "on_auto_kill", "on_unavailable")

    def __init__(
        self, on_auto_kill: KillListener | None, on_unavailable: LostListener | None
    ) -> None:
        self.on_auto_kill = on_auto_kill
        self.on_unavailable = on_unavailable
        self._told: set[str] = set()
        self._tasks: set[asyncio.Task[None]] = set()

    def __repr__(self) -> str:
        return f"LedgerNotices(told={sorted(self._told)}, running={len(self._tasks)})"

    def tripped(self, state: KillState | None) -> None:
        """The automatic trigger tripped the kill switch (``None``: it did not)."""
        if state is None:
            return
        log.error("ledger kill switch tripped: %s", state.reason)
        if self.on_auto_kill is not None:
            self._run(self.on_auto_kill(state))

    def unavailable(self, reason: str, location: str) -> None:
        """Storage failed for ``reason`` (``location``: what the store opened, for the
        log); a process fenced by another was logged by its store already."""
        if reason in self._told or reason == "fenced":
            return
        self._told.add(reason)
        if reason == "storage":
            log.error("ledger storage failed (read-only, full or broken): failing closed")
        elif reason == "timeout":
            log.error(
                "ledger database %s: the ledger's queries time out (a lock held by another"
                " session, e.g. a long transaction or a manual query, or no connection free"
                " in time): failing closed until they pass",
                location,
            )
        elif reason == "server":
            log.error(
                "ledger database server %s cannot be reached or refused the ledger's"
                " queries: failing closed until it answers",
                location,
            )
        else:
            log.error(
                "ledger database file %s was %s while open: failing closed, no new holds",
                location,
                reason,
            )
        if self.on_unavailable is not None:
            self._run(self.on_unavailable(reason))

    def _run(self, told: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(told)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def drain(self) -> None:
        """Wait for the listeners still running (their failures are theirs)."""
        for task in list(self._tasks):
            with contextlib.suppress(Exception):
                await task
