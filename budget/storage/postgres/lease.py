"""A PostgreSQL ledger process's lease: its heartbeat in ``budget_processes``, its liveness
lock, and its fencing once another process declared it dead (:class:`ProcessLease`, a
base of :class:`budget.storage.postgres.store.PgStore`).

Two ways for another process to know this one is dead, both acted on by its sweep
(:data:`budget.storage.postgres.ends.DECLARE_DEAD`, which deletes the row: that is the
declaration), then it takes over the work:

* **its connection is gone**: each process holds a session-level advisory lock on its
  own id (:data:`LIVENESS_KEY`) on its heartbeat's own connection, taken before it
  first registers and again whenever that connection is opened anew. PostgreSQL
  releases it the moment the connection ends — the process was killed, crashed, or
  its host died. A sweeper that can take it, on the same server lifetime as the
  owner's last beat (``locked_on``: the lock's absence says nothing after a restart or
  a failover, when every lock went with every connection), and finds the owner's
  heartbeat older than :data:`budget.config.GONE_AFTER_HEARTBEATS` heartbeats (a live
  process whose connection was cut opens a new one and beats at once, and in any case
  within a heartbeat: it is never taken for dead in between) declares it dead: seconds
  after a SIGKILL, not a minute;
* **its heartbeat stopped** for ``process_dead_after_s`` seconds while its connection
  stays open: a stall (an overloaded machine, a paused VM) or a partition.

A live process stalled that long is then *fenced* when it wakes: its beat finds its
row gone and does not register it again, it logs one ERROR, runs its ``on_fenced``
callbacks once (the bot stops taking work and exits), and its store grants nothing
more; :meth:`ProcessLease.confirm_lease` tells callers before they act. See
``docs/decisions/100-process-liveness-lock.md``.
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

__all__ = ["LIVENESS_KEY", "RETRY_BEAT_S", "ProcessLease"]

#: The advisory lock key of a process's liveness (SQL; ``{}`` is its id): the one
#: bigint key space of the project's other advisory locks, a prefix of its own.
LIVENESS_KEY = "hashtextextended('kopek-process:' || {}, 0)"
#: Takes this process's liveness lock ($1: its id) on the connection, if free.
_TAKE_LOCK = f"SELECT pg_try_advisory_lock({LIVENESS_KEY.format('$1')})"
#: ``locked_on`` as a beat writes it ($3: whether the beat's connection holds the lock).
_LOCKED_ON = "CASE WHEN $3 THEN pg_postmaster_start_time() END"
_REGISTER = (
    "INSERT INTO budget_processes (process_id, started_at, heartbeat_at, locked_on)"  # noqa: S608 - fixed fragments
    f" VALUES ($1, $2, $2, {_LOCKED_ON}) ON CONFLICT (process_id) DO UPDATE SET"
    " heartbeat_at = excluded.heartbeat_at, locked_on = excluded.locked_on"
)
_BEAT = (
    f"UPDATE budget_processes SET heartbeat_at = $2, locked_on = {_LOCKED_ON}"  # noqa: S608 - fixed fragments
    " WHERE process_id = $1 RETURNING 1"
)
#: Seconds before a failed beat is tried again (at most one heartbeat): a process whose
#: connection was cut is back, lock and heartbeat, soon after the server answers again.
RETRY_BEAT_S = 1.0

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
        #: the heartbeat connection that holds this process's liveness lock (or None)
        self._locked_conn: Any = None
        #: set when the heartbeat's connection ended: the beat loop beats at once
        self.connection_lost = asyncio.Event()

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
                locked = await self._hold_lock(conn)
                if self._beat_at is None:
                    await conn.execute(_REGISTER, self.process_id, t, locked)
                    registered = True
                else:
                    registered = bool(await conn.fetchval(_BEAT, self.process_id, t, locked))
            except STORAGE as exc:
                await self._drop_beat_connection()
                raise LedgerUnavailable() from exc
            if not registered:
                self._fence(at)
                raise LedgerUnavailable()
            self._beat_at = at

    async def _hold_lock(self, conn: Any) -> bool:
        """Whether ``conn`` holds this process's liveness lock, taking it if it is free
        (a new connection; or the old one's backend, not yet gone, still held it)."""
        if self._locked_conn is not conn:
            if not await conn.fetchval(_TAKE_LOCK, self.process_id):
                return False
            self._locked_conn = conn
        return True

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
        """Beat every heartbeat, at once when the heartbeat's connection ended (a new
        one takes the lock back), and :data:`RETRY_BEAT_S` after a failed beat."""
        failures = FailureLog(log, "ledger heartbeat", logging.WARNING)  # one line per kind
        pause, wake = self.config.process_heartbeat_s, True
        while True:
            await self._pause(pause, wake)
            try:
                await self.beat()
            except LedgerUnavailable as exc:
                if self.fenced:
                    return
                failures.failed(exc)
                pause, wake = min(RETRY_BEAT_S, self.config.process_heartbeat_s), False
            else:
                failures.ok()
                pause, wake = self.config.process_heartbeat_s, True

    async def _pause(self, seconds: float, wake: bool) -> None:
        """Sleep ``seconds`` on the ledger clock; ``wake``: or until the heartbeat's
        connection ends (a failed beat drops it itself: then no early wake)."""
        lost = self.connection_lost
        if not wake:
            await self.clock.sleep(seconds)
            lost.clear()
            return
        sleeper = asyncio.ensure_future(self.clock.sleep(seconds))
        waiter = asyncio.ensure_future(lost.wait())
        try:
            await asyncio.wait({sleeper, waiter}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (sleeper, waiter):
                task.cancel()
            await asyncio.gather(sleeper, waiter, return_exceptions=True)
        lost.clear()
