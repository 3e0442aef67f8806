"""A PostgreSQL ledger process's lease: its heartbeat in ``budget_processes``, and its
fencing once another process declared it dead (:class:`ProcessLease`, a base of
:class:`budget.storage.postgres.store.PgStore`).

Another process declares a process dead — no heartbeat for ``process_dead_after_s``
seconds — by deleting its row (:data:`budget.storage.postgres.ends.DECLARE_DEAD`), then takes over
its work. A live process stalled that long is then *fenced* when it wakes: its beat
finds its row gone and does not register it again, it logs one ERROR, runs its
``on_fenced`` callbacks once (the bot stops taking work and exits), and its store
grants nothing more; :meth:`ProcessLease.confirm_lease` tells callers before they act.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

from budget.config import LedgerConfig
from budget.errors import LedgerUnavailable
from budget.kernel.clock import Clock
from budget.kernel.failure_log import FailureLog
from budget.storage.postgres.runner import STORAGE

__all__ = ["ProcessLease"]

log = logging.getLogger(
    "budget.storage.postgres.store"
)  # the name before the split: log lines unchanged


class ProcessLease(abc.ABC):
    """The heartbeat and the fence of one process (module docstring). The store
    provides ``clock``, ``config``, ``process_id`` and the heartbeat's own connection
    (``_beat_connection``, ``_drop_beat_connection``).

    Attributes:
        lost: ``"fenced"`` once another process declared this one dead.
        on_fenced: called once, synchronously, when this process is fenced.
    """

    clock: Clock
    config: LedgerConfig
    process_id: str

    def _init_lease(self) -> None:
        self._lost = ""
        self.on_fenced: list[Callable[[], None]] = []
        #: the ledger clock's monotonic time at the start of the last beat that landed
        self._beat_at: float | None = None
        self._lease_lock = asyncio.Lock()
        self._beat_lock = asyncio.Lock()

    @abc.abstractmethod
    async def _beat_connection(self) -> Any:
        """This process's own connection for its beats (not one of the pool's)."""

    @abc.abstractmethod
    async def _drop_beat_connection(self) -> None:
        """Close that connection (the next beat opens a new one)."""

    @property
    def lost(self) -> str:
        """``"fenced"`` once another process declared this one dead, else ``""``."""
        return self._lost

    @property
    def fenced(self) -> bool:
        """True once another process declared this one dead (its row deleted)."""
        return self._lost == "fenced"

    async def beat(self) -> None:
        """Record this process as alive now (ledger clock): the first beat registers
        it, each later one updates its row — and finds it gone when another process
        declared this one dead (no heartbeat for ``process_dead_after_s``): then this
        process is fenced (:meth:`_fence`) and never registers again.

        Raises:
            LedgerUnavailable: the server cannot be reached, or this process is fenced.
        """
        async with self._beat_lock:
            if self.fenced:
                raise LedgerUnavailable()
            # its own connection, stamped once it is ready: a beat never waits behind a
            # burst for one of the pool's connections with a time taken before it waited
            # (docs/decisions/012-heartbeat-on-its-own-connection.md)
            conn = await self._beat_connection()
            at, t = self.clock.monotonic(), self.clock.now().timestamp()
            try:
                if self._beat_at is None:
                    await conn.execute(
                        "INSERT INTO budget_processes (process_id, started_at, heartbeat_at)"
                        " VALUES ($1, $2, $2) ON CONFLICT (process_id) DO UPDATE SET"
                        " heartbeat_at = excluded.heartbeat_at",
                        self.process_id,
                        t,
                    )
                    registered = True
                else:
                    registered = bool(
                        await conn.fetchval(
                            "UPDATE budget_processes SET heartbeat_at = $2"
                            " WHERE process_id = $1 RETURNING 1",
                            self.process_id,
                            t,
                        )
                    )
            except STORAGE as exc:
                await self._drop_beat_connection()
                raise LedgerUnavailable() from exc
            if not registered:
                self._fence(at)
                raise LedgerUnavailable()
            self._beat_at = at

    def _fence(self, at: float) -> None:
        """Another process deleted this one's row: it was taken for dead, its holds
        booked at their ceilings and its messages' users asked to resend. Logged
        once; the callbacks (the bot stops taking work and exits) run once."""
        if self.fenced:
            return
        self._lost = "fenced"
        silent = at - self._beat_at if self._beat_at is not None else 0.0
        log.error(
            "this process was taken for dead by another (no heartbeat for %.0f s, more than"
            " PROCESS_DEAD_AFTER_SECONDS=%s): it stops taking work and exits so its"
            " supervisor restarts it",
            silent,
            self.config.process_dead_after_s,
        )
        for callback in self.on_fenced:
            callback()

    def lease_left(self) -> float:
        """Seconds (ledger clock) until another process may take this one for dead,
        counted from the start of its last beat that landed (0 when fenced)."""
        if self.fenced or self._beat_at is None:
            return 0.0
        return self.config.process_dead_after_s - (self.clock.monotonic() - self._beat_at)

    async def confirm_lease(self) -> bool:
        """False when this process was taken for dead; asks the database (one beat)
        only when less than one heartbeat of its lease is left (a stall: a live
        process's beats keep it longer), so an action after a long stall — a Bot
        API call of an answer whose message another process has asked to resend —
        is not made. A database that cannot be reached confirms nothing and
        denies nothing: True (no other process can declare this one dead then)."""
        if self.lease_left() > self.config.process_heartbeat_s:
            return True
        async with self._lease_lock:
            if self.lease_left() > self.config.process_heartbeat_s:
                return True
            with contextlib.suppress(LedgerUnavailable):
                await self.beat()
        return not self.fenced

    async def _beat_loop(self) -> None:
        failures = FailureLog(log, "ledger heartbeat", logging.WARNING)  # one line per kind
        while True:
            await self.clock.sleep(self.config.process_heartbeat_s)
            try:
                await self.beat()
            except LedgerUnavailable as exc:
                if self.fenced:
                    return
                failures.failed(exc)
            else:
                failures.ok()
