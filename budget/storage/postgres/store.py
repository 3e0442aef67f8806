"""The PostgreSQL ledger store: :class:`budget.storage.base.LedgerStore` shared by several
processes.

Same rules (:mod:`budget.policy.rules`, :mod:`budget.policy.steps`), same refusals and the same
statements where the engines agree (:mod:`budget.storage.sql.statements`) as the SQLite store.
Driver: asyncpg directly, one pool per process (SQLAlchemy's async layer added
~0.3 ms per statement on the hold path for nothing the ledger uses).

Atomicity across processes without a global lock: every writing step is ONE
``READ COMMITTED`` transaction that locks only the rows it touches, always in the
same order — hold rows, then bucket rows by key, then operation rows (details in
:mod:`budget.storage.postgres.rows`) — so no update is lost and ledger steps never deadlock each
other. The hot path (operations, requests, holds: :mod:`budget.storage.postgres.holds`; their ends
and the sweep: :mod:`budget.storage.postgres.ends`) is async SQL on the event loop, each statement
prepared once per connection; a refusal
rolls its transaction back (nothing held anywhere) and then records its event. A
settle or a release of a held hold is one statement that commits by itself, and
the burn-rate trigger runs after it committed
(:class:`budget.storage.postgres.burn.BurnCheckTimer`). A
serialization failure or a deadlock (from anything else touching the tables) is
retried up to :data:`RETRIES` attempts after a random pause (jitter, growing;
:class:`budget.storage.postgres.runner.PgRunner`, by stamina), then
:class:`~budget.errors.LedgerUnavailable` (fail closed: no provider call).

Reports and the rare admin steps are the base's, on the portable SQL
(:mod:`budget.storage.sql`, written in the common SQL subset), run by
:class:`budget.storage.postgres.runner.PgRunner`: their body in a worker thread, each
statement awaited on the loop; reads in a ``REPEATABLE READ READ ONLY`` snapshot, no
lock; admin steps that check then write first lock their rows in the order above.

Liveness: :meth:`PgStore.open` registers the process in ``budget_processes`` and
updates its heartbeat every ``process_heartbeat_s`` seconds of the ledger clock; a
sweep books (at the ceiling, estimated) only the holds past their TTL or of
processes whose heartbeat is older than ``process_dead_after_s`` — never those of a
live process. Declaring a process dead is deleting its row (the sweep, and the bot's
look for its messages, do it first in their transaction:
:data:`budget.storage.postgres.ends.DECLARE_DEAD`); a process whose row is gone is *fenced*
(:attr:`PgStore.lost` = ``"fenced"``): its heartbeat never registers it again, it is
granted no operation and no hold (the grant checks the row in the same statement),
and :meth:`PgStore.confirm_lease` tells its callers before they act.

Times are epoch seconds of the ledger clock in Python and in the SQL,
``timestamptz`` in the tables (the pool's codec converts:
:mod:`budget.storage.postgres.timestamps`);
money is integer µUSD (``BIGINT``).

Errors: asyncpg's exceptions and OS errors become ``LedgerUnavailable`` here.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
from collections.abc import Callable
from datetime import datetime
from functools import partial
from typing import Any, ClassVar, TypeVar

import asyncpg

from budget.config import LedgerConfig
from budget.errors import LedgerUnavailable
from budget.kernel.clock import Clock
from budget.kernel.db import location
from budget.kernel.tasks import cancel_and_wait
from budget.protocol import HoldTicket, OperationTicket
from budget.status import KillState
from budget.storage.base import LedgerStore
from budget.storage.postgres import admission as admitting
from budget.storage.postgres import ends, holds, single
from budget.storage.postgres.burn import BurnCheckTimer
from budget.storage.postgres.control import ControlLine, server_settings
from budget.storage.postgres.lease import ProcessLease
from budget.storage.postgres.rows import PgCursor, asyncpg_dsn, auto_kill, auto_kill_off, burn_rate
from budget.storage.postgres.runner import RETRIES, STORAGE, PgRunner
from budget.storage.postgres.timestamps import use_epoch_seconds
from budget.storage.store import (
    Admission,
    PricedHold,
    SettleOutcome,
    SettleRequest,
    SharedDatabase,
    SweepOutcome,
)

__all__ = ["RETRIES", "PgCursor", "PgStore", "asyncpg_dsn"]

log = logging.getLogger(__name__)

T = TypeVar("T")

#: Connections per process (and worker threads running synchronous step bodies).
POOL_SIZE = 8
#: First retry pause, seconds (random in [0, this × 2^attempt]).
RETRY_BACKOFF_S = 0.002


async def keep_session(conn: Any) -> None:
    """The pool's reset of a released connection: nothing beyond asyncpg's own
    rollback of an open transaction. The ledger sets no session state, opens no
    cursor, listens to nothing and takes only transaction-scoped locks, so asyncpg's
    default reset (``RESET ALL``, ``UNLISTEN *``… : one more round trip per step)
    has nothing to undo."""
    del conn


class PgStore(ProcessLease, ControlLine, PgRunner, LedgerStore):
    """The ledger on PostgreSQL (module docstring).

    Args:
        url: ``postgresql+asyncpg://user:pass@host/db`` (schema by Alembic).
        config: limits and knobs (``process_heartbeat_s``, ``process_dead_after_s``).
        process_id: this process's id (32 characters at most).
        clock: the ledger's clock (heartbeats are in its time, as sweeps are).
        run_heartbeat: start the heartbeat task at :meth:`open` (tests driving a
            manual clock pass ``False``; every sweep also refreshes the heartbeat).
        retry_backoff_s: first pause before retrying a conflicting step, seconds
            (this × 2^attempt, plus up to this of jitter; tests pass 0: no pause).
        durable_settle: settle and release wait for their commit to reach the disk.
            ``False`` (default): they commit without waiting for the WAL flush
            (``synchronous_commit = off`` for that transaction only), so the bucket
            rows they lock are free ~one fsync sooner. Safe for the money guarantee:
            a server crash may lose only the last such commits (PostgreSQL:
            at most 3 × ``wal_writer_delay``), and a lost settle or release leaves
            its hold held — booked at its ceiling, estimated, when it expires: never
            less than was spent. Holds and admissions always wait for the disk.
        quick_holds: a hold granted by its one statement commits without waiting for
            the WAL flush, then waits for the flush (:data:`budget.storage.postgres.holds.FLUSH`)
            before :meth:`reserve` returns, so the bucket rows are not locked across
            it; used only where the server allows it (PostgreSQL 17+, no synchronous
            standby: :data:`~budget.storage.postgres.holds.QUICK_HOLDS_OK`, read at
            :meth:`open`). ``False``: the hold's commit waits for the flush itself.
            Either way the hold is on disk before ``reserve`` returns
            (``docs/decisions/315-a-hold-flushes-after-its-locks.md``).
        full_pool: open all :data:`POOL_SIZE` connections at :meth:`open` and keep them
            (the bot's store, :func:`budget.storage.open_store`): a burst after the start
            or after five quiet minutes (asyncpg closes idle connections above the
            pool's minimum) does not open them, introspect the types and prepare every
            statement again inside it (decision 319). ``False`` (default): one at open,
            the others when needed (tests open many stores).
    """

    name: ClassVar[str] = "postgresql"

    def __init__(
        self,
        url: str,
        config: LedgerConfig,
        process_id: str,
        clock: Clock,
        *,
        run_heartbeat: bool = True,
        retry_backoff_s: float = RETRY_BACKOFF_S,
        durable_settle: bool = False,
        quick_holds: bool = True,
        full_pool: bool = False,
    ) -> None:
        self._run_heartbeat = run_heartbeat
        self._want_quick = quick_holds
        self._pool_min = POOL_SIZE if full_pool else 1
        #: quick holds asked for and allowed by the server (read at :meth:`open`)
        self.quick_holds = False
        #: admissions in two statements: the database has their functions (read at
        #: :meth:`open`; decision 318), else the locked transaction
        self.admission_at_once = False
        self._durable_settle = durable_settle
        self._backoff_s = retry_backoff_s
        self._url = url
        self._dsn = asyncpg_dsn(url)
        self.config = config
        self.process_id = process_id
        self.clock = clock
        self._pool: asyncpg.Pool | None = None
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        self._heartbeat: asyncio.Task[None] | None = None
        self._burn = BurnCheckTimer()
        #: what this process's holds and settles need not read back
        self._known = holds.Known()
        self._init_lease()
        self._init_control()
        self._beat_conn: Any = None  # asyncpg.Connection of the heartbeat (pg_lease)

    @property
    def location(self) -> str:
        """Host (or socket folder) and database, never the user or password
        (:func:`budget.kernel.db.location`)."""
        return location(self._url)

    async def open(self) -> None:
        """Connect, register this process, start its heartbeat (idempotent).

        Raises:
            LedgerUnavailable: the server cannot be reached.
        """
        if self._pool is not None:
            return
        try:
            self._pool = await asyncpg.create_pool(
                self._dsn,
                min_size=self._pool_min,
                max_size=POOL_SIZE,
                command_timeout=30,
                reset=keep_session,
                init=use_epoch_seconds,
                server_settings=server_settings(self.config),
            )
        except STORAGE as exc:
            raise LedgerUnavailable() from exc
        try:
            if self._want_quick:
                self.quick_holds = bool(await self._pool.fetchval(holds.QUICK_HOLDS_OK))
            self.admission_at_once = bool(await self._pool.fetchval(admitting.ADMISSION_AT_ONCE_OK))
        except STORAGE as exc:
            pool, self._pool = self._pool, None
            pool.terminate()
            raise LedgerUnavailable() from exc
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=POOL_SIZE, thread_name_prefix="ledger-pg"
        )
        await self.beat()
        if self._run_heartbeat:
            self._heartbeat = asyncio.create_task(self._beat_loop(), name="ledger-heartbeat")

    async def close(self) -> None:
        """Stop the heartbeat, deregister, disconnect (idempotent)."""
        await cancel_and_wait(self._heartbeat)
        self._heartbeat = None
        if self._pool is None:
            return
        with contextlib.suppress(LedgerUnavailable):
            await self._plain("DELETE FROM budget_processes WHERE process_id = $1", self.process_id)
        await self._drop_beat_connection()
        await self._close_control()
        pool, self._pool = self._pool, None
        await pool.close()
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None

    async def _plain(self, sql: str, *args: Any) -> None:
        if self._pool is None:
            raise LedgerUnavailable()
        try:
            await self._pool.execute(sql, *args)
        except STORAGE as exc:
            raise LedgerUnavailable() from exc

    async def _beat_connection(self) -> Any:
        """The heartbeat's own connection (opened on first use, again after a failure).

        Raises:
            LedgerUnavailable: the server cannot be reached.
        """
        if self._pool is None:
            raise LedgerUnavailable()
        if self._beat_conn is None or self._beat_conn.is_closed():
            try:
                conn = await asyncpg.connect(
                    self._dsn, command_timeout=30, server_settings=server_settings(self.config)
                )
                await use_epoch_seconds(conn)
            except STORAGE as exc:
                raise LedgerUnavailable() from exc
            conn.add_termination_listener(self._beat_connection_ended)
            self._beat_conn = conn
        return self._beat_conn

    def _beat_connection_ended(self, conn: Any) -> None:
        """The heartbeat's connection ended under it (the server closed it, the network
        cut it): its liveness lock went with it, so the beat loop beats at once with a
        new one (:mod:`budget.storage.postgres.lease`). Not for a close of our own."""
        if conn is self._beat_conn:
            self.connection_lost.set()

    async def _drop_beat_connection(self) -> None:
        self._locked_conn = None
        conn, self._beat_conn = self._beat_conn, None
        if conn is not None:
            with contextlib.suppress(*STORAGE):
                await asyncio.wait_for(conn.close(), 5)

    @property
    def shared(self) -> SharedDatabase:
        """This store itself: the database the replicas share (their shared state runs
        on :meth:`tx`)."""
        return self

    # -- one statement each, once per chat message (budget.storage.postgres.single) ------
    async def record_message(self, now: datetime, user_id: int) -> int:
        """See :meth:`budget.storage.base.LedgerStore.record_message`."""
        body = single.record_message(self.config, now, user_id)
        count: int = await self.tx(now, body, single=True)
        return count

    async def user_plan(self, now: datetime, user_id: int) -> str | None:
        """See :meth:`budget.storage.base.LedgerStore.user_plan` (no statement without plans)."""
        if not self.config.plans:
            return None
        body = single.user_plan(self.config, now, user_id)
        plan: str | None = await self.tx(now, body, single=True)
        return plan

    async def record_calibration(
        self, now: datetime, provider: str, model: str, ratio_ppm: int, samples: int
    ) -> None:
        """See :meth:`budget.storage.base.LedgerStore.record_calibration`."""
        body = single.record_calibration(now, provider, model, ratio_ppm, samples)
        await self.tx(now, body, single=True)

    # -- operations, requests, holds ---------------------------------------------------
    async def begin_operation(self, now: datetime, admission: Admission) -> OperationTicket:
        """See :meth:`budget.storage.base.LedgerStore.begin_operation` (none for a fenced
        process: its row is checked in the same transaction)."""
        if self.fenced:
            raise LedgerUnavailable()
        cfg, process = self.config, self.process_id
        quick = partial(admitting.begin_operation_at_once, cfg=cfg, process_id=process, now=now)
        ticket = None
        if self.admission_at_once:
            ticket = await self.tx(now, partial(quick, admission=admission), single=True)
        if ticket is None:  # a value it decided on changed meanwhile (decision 318)
            locked = partial(admitting.begin_operation, cfg=cfg, process_id=process, now=now)
            ticket = await self.tx(now, partial(locked, admission=admission))
        self._known.keep(self._known.ops, ticket.operation_id, ticket)
        return ticket

    async def end_operation(self, now: datetime, operation_id: str) -> None:
        """See :meth:`budget.storage.base.LedgerStore.end_operation`."""
        self._known.ops.pop(operation_id, None)
        body = partial(holds.end_operation, now=now, operation_id=operation_id)
        await self.tx(now, body, single=True)

    async def begin_request(self, now: datetime, operation_id: str, fingerprint: str) -> str:
        """See :meth:`budget.storage.base.LedgerStore.begin_request`."""
        step = partial(holds.begin_request, cfg=self.config, now=now)
        body = partial(step, operation_id=operation_id, fingerprint=fingerprint)
        return await self.tx(now, body, single=True)

    async def reserve(self, now: datetime, hold: PricedHold) -> HoldTicket:
        """See :meth:`budget.storage.base.LedgerStore.reserve` (its transactions are its
        own: :func:`budget.storage.postgres.holds.reserve`; none for a fenced process: the
        grant checks its row in the same statement)."""
        if self.fenced:
            raise LedgerUnavailable()
        body = partial(holds.reserve, cfg=self.config, process_id=self.process_id, now=now)
        body = partial(body, hold=hold, known=self._known, quick=self.quick_holds)
        return await self.tx(now, body, single=True)

    async def settle(self, now: datetime, request: SettleRequest) -> SettleOutcome:
        """See :meth:`budget.storage.base.LedgerStore.settle` (its transactions are its
        own: :func:`budget.storage.postgres.ends.settle`). The burn-rate trigger runs after
        the settle committed, when :class:`BurnCheckTimer` says it is due. The request's
        ``end_operation`` and ``calibration`` are written after it, each as on its own
        (a replica's settle is one self-committing statement: ``ends.settle``)."""
        outcome = await self._settle(now, request)
        if request.end_operation is not None:
            await self.end_operation(now, request.end_operation)
        sample = request.calibration
        if sample is not None:
            await self.record_calibration(
                now, sample.provider, sample.model, sample.ratio_ppm, sample.samples
            )
        return outcome

    async def _settle(self, now: datetime, request: SettleRequest) -> SettleOutcome:
        known = self._known.granted.pop(request.hold_id, None)
        body = partial(ends.settle, cfg=self.config, now=now, request=request)
        done = await self.tx(
            now, partial(body, durable=self._durable_settle, known=known), single=True
        )
        outcome = done.outcome
        if outcome.booked and outcome.actual_musd > 0:
            self._burn.pending += outcome.actual_musd
            if done.grew:
                outcome.auto_killed = await self._burn_check(
                    now, lambda: self._burn.due(self.clock.monotonic(), *done[2:])
                )
        return outcome

    async def _burn_check(self, now: datetime, due: Callable[[], bool]) -> KillState | None:
        """Run the burn-rate trigger if ``due()`` (asked again once this process's
        other check, if one is running, is done): read (:class:`BurnCheckTimer`), then trip
        in a transaction of its own when over; the tripped state or ``None``. A
        storage failure is logged and leaves the check due (the settle before it is
        committed: it is not failed for it)."""
        gate = self._burn
        if auto_kill_off(self.config) or not due():
            return None
        async with gate.lock:
            if not due():  # the check that ran meanwhile saw this spend
                return None
            taken, at = gate.pending, self.clock.monotonic()
            try:
                if self._pool is None:
                    raise LedgerUnavailable()
                async with self._pool.acquire() as conn:
                    seen = await burn_rate(conn, self.config, now)
                tripped = None
                if seen.threshold is not None and not seen.killed and seen.spent > seen.threshold:
                    tripped = await self.tx(now, partial(auto_kill, config=self.config, now=now))
            except (*STORAGE, LedgerUnavailable) as exc:
                gate.at = None
                log.warning("ledger burn-rate check failed (checked again later): %r", exc)
                return None
            gate.pending -= taken
            gate.at, gate.seen = at, seen
            return tripped

    async def release(self, now: datetime, hold_id: str) -> bool:
        """See :meth:`budget.storage.base.LedgerStore.release` (its transactions are its
        own: :func:`budget.storage.postgres.ends.release`)."""
        body = partial(
            ends.release,
            cfg=self.config,
            now=now,
            hold_id=hold_id,
            durable=self._durable_settle,
            known=self._known.granted.pop(hold_id, None),
        )
        return await self.tx(now, body, single=True)

    def _rules_changed(self, *, limits: bool) -> None:
        """The next paid settle of this process checks the burn rate (against the new
        threshold), and the next hold reads the limits again (its statement would see
        their digest changed)."""
        self._burn.at = None
        if limits:
            self._known.limits = None

    async def sweep(self, now: datetime, previous_processes: bool = False) -> SweepOutcome:
        """Expire holds past their TTL and every hold and operation of a dead process
        (no heartbeat for ``process_dead_after_s``, or its connection gone and no
        heartbeat for ``process_gone_after_s``: :mod:`budget.storage.postgres.lease`),
        whatever ``previous_processes`` says: on a shared database other processes are
        alive."""
        del previous_processes
        await self.beat()
        dead_before = now.timestamp() - self.config.process_dead_after_s
        gone_before = now.timestamp() - self.config.process_gone_after_s
        step = partial(ends.sweep, cfg=self.config, process_id=self.process_id, now=now)
        outcome = await self.tx(
            now, partial(step, dead_before=dead_before, gone_before=gone_before)
        )
        if outcome.auto_killed is None:  # this process's settles not checked yet
            outcome.auto_killed = await self._burn_check(now, lambda: self._burn.pending > 0)
        return outcome

    def __repr__(self) -> str:
        return f"PgStore({self.location!r}, process_id={self.process_id!r})"
