"""How the PostgreSQL ledger runs a step: one transaction on one pooled connection,
retried on a serialization failure or a deadlock, every driver error translated.

Two kinds of body:

* the hot path's async bodies (:mod:`budget.storage.postgres.holds`,
  :mod:`budget.storage.postgres.ends`), and the shared-state rows of the replicas, run on
  the event loop by :meth:`PgRunner.tx`: a refusal rolls its transaction back (nothing
  held anywhere) and then records its event;
* the portable synchronous bodies (:mod:`budget.storage.sql`: reports, admin steps,
  reads of holds, ``/reconcile apply``), run by :meth:`PgRunner._write` and
  :meth:`PgRunner._read` in a worker thread, each statement awaited on the loop through
  :class:`budget.storage.postgres.rows.PgCursor`. Reads run in a
  ``REPEATABLE READ READ ONLY`` snapshot and take no lock; a writing step that checks
  then writes first locks its rows (:class:`~budget.storage.store.Write`) in the one
  lock order of :mod:`budget.storage.postgres.rows`, and commits its refusal event.

A step that conflicted is tried again up to :data:`RETRIES` attempts after a random
pause (jitter, growing: hynek/stamina, whose default instrumentation logs each retry as
``stamina.retry_scheduled`` at WARNING), then fails closed:
:class:`~budget.errors.LedgerUnavailable`.
:class:`PgRunner` is a base of :class:`budget.storage.postgres.store.PgStore`, which owns
the pool and the worker threads.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

import asyncpg
import stamina

from budget.config import LedgerConfig
from budget.errors import HoldRefused, LedgerUnavailable, ProcessFenced
from budget.kernel.clock import Clock
from budget.storage.postgres.rows import PgCursor, lock_corrections, translate
from budget.storage.sql.statements import EVENT_INSERT, refusal_event_row
from budget.storage.store import DURABLE, Cursor, RefusedStep, Write

__all__ = [
    "RETRIES",
    "RETRYABLE",
    "STORAGE",
    "TIMED_OUT",
    "Body",
    "PgRunner",
    "run_body",
    "unavailable",
]

T = TypeVar("T")

#: Attempts of a step that hit a serialization failure or a deadlock.
RETRIES = 5
#: Errors that mean "conflicted with another transaction: run the step again".
RETRYABLE = (asyncpg.exceptions.SerializationError, asyncpg.exceptions.DeadlockDetectedError)
#: Errors that mean "storage failed": ``LedgerUnavailable``. ``InternalClientError``: a
#: connection asyncpg found mid-operation (a statement cancelled as it was being sent).
STORAGE = (
    asyncpg.PostgresError,
    asyncpg.InterfaceError,
    asyncpg.InternalClientError,
    OSError,
    asyncio.TimeoutError,
)
#: Of those, the deadlines: a lock waited for past ``lock_timeout``, a statement cancelled
#: (``command_timeout``, ``statement_timeout``), no pool connection in time.
TIMED_OUT = (
    asyncpg.exceptions.LockNotAvailableError,
    asyncpg.exceptions.QueryCanceledError,
    asyncio.TimeoutError,
)


def unavailable(exc: BaseException) -> LedgerUnavailable:
    """The :class:`~budget.errors.LedgerUnavailable` for a storage error ``exc``
    (``timed_out`` when it is one of :data:`TIMED_OUT`)."""
    return LedgerUnavailable(timed_out=isinstance(exc, TIMED_OUT))


#: A transaction body on one asyncpg connection.
Body = Callable[[Any], Awaitable[T]]

#: Locks (creating it) the user's message counter of the day before the check.
_MESSAGES_LOCK = (
    "INSERT INTO budget_messages (user_id, day_key, count) VALUES ($1, $2, 0)"
    " ON CONFLICT (user_id, day_key) DO UPDATE SET count = budget_messages.count"
)


class PgRunner:
    """The step runner of :class:`budget.storage.postgres.store.PgStore` (module
    docstring); the store sets the attributes below.

    Attributes:
        config: limits and knobs; ``clock``: the ledger's clock.
        _pool: the asyncpg pool (``None`` when closed: ``LedgerUnavailable``).
        _executor: the worker threads running synchronous bodies.
        _backoff_s: first retry pause, seconds (0: none, for tests).
    """

    config: LedgerConfig
    clock: Clock
    _pool: asyncpg.Pool | None
    _executor: concurrent.futures.ThreadPoolExecutor | None
    _backoff_s: float

    if TYPE_CHECKING:  # provided by budget.storage.postgres.lease.ProcessLease

        def _fence(self, at: float) -> None: ...

    async def _retried(self, attempt: Callable[[], Awaitable[T]]) -> T:
        """``attempt()``, again after a conflict: up to :data:`RETRIES` attempts, the
        pauses growing (``_backoff_s`` × 2^n plus up to ``_backoff_s`` of jitter, so the
        steps that conflicted do not meet again at once; none when it is 0), by stamina.

        Raises:
            LedgerUnavailable: storage failed (``timed_out``: a deadline ran out), or
                still conflicting after RETRIES.
        """
        # The first attempt runs outside stamina: building its retry context (tenacity's
        # objects) cost ~6% of a PostgreSQL replica's CPU per message, and almost every
        # step passes at once. A conflict hands that first failure to the same context
        # as its first attempt, so the pauses and attempts are stamina's, as before.
        try:
            return await attempt()
        except RETRYABLE as exc:
            first: BaseException | None = exc
        except STORAGE as exc:
            raise unavailable(exc) from exc
        backoff = self._backoff_s
        try:
            async for trying in stamina.retry_context(
                on=RETRYABLE,
                attempts=RETRIES,
                timeout=None,
                wait_initial=backoff,
                wait_exp_base=2,
                wait_jitter=backoff,
                wait_max=backoff * 2**RETRIES,
            ):
                with trying:
                    if first is not None:
                        failed, first = first, None
                        raise failed
                    return await attempt()
        except STORAGE as exc:  # the last conflict too (RETRYABLE are PostgresErrors)
            raise unavailable(exc) from exc
        raise LedgerUnavailable()  # not reached: the last attempt returned or raised

    def _live_pool(self) -> asyncpg.Pool:
        if self._pool is None:
            raise LedgerUnavailable()
        return self._pool

    async def tx(self, now: datetime, body: Body[T], *, single: bool = False) -> T:
        """Run the async ``body`` in ONE transaction (``single``: one statement,
        which is its own transaction), retried on serialization/deadlock errors.

        Raises:
            HoldRefused: ``body`` raised :class:`~budget.storage.store.RefusedStep`: its
                transaction was rolled back, the refusal event is then recorded.
            LedgerUnavailable: storage failed, still conflicting after RETRIES, or this
                process was found taken for dead (it is fenced).
        """
        pool = self._live_pool()

        async def attempt() -> T:
            async with pool.acquire(timeout=self.config.db_pool_timeout_s) as conn:
                try:
                    if single:
                        return await body(conn)
                    async with conn.transaction():
                        return await body(conn)
                except RefusedStep as refused:
                    row = refusal_event_row(self.config.tz, now, refused.refusal, refused.user_id)
                    await conn.execute(translate(EVENT_INSERT), *row)
                    raise HoldRefused(refused.refusal) from None

        try:
            return await self._retried(attempt)
        except ProcessFenced:
            self._fence(self.clock.monotonic())
            raise LedgerUnavailable() from None

    async def _write(self, body: Callable[[Cursor], T], how: Write = DURABLE) -> T:
        """A portable body in one ``READ COMMITTED`` transaction, after the row locks
        ``how`` asks for (every commit here waits for the disk; grouping and the file
        check are SQLite's)."""
        return await self._run_sync(body, how)

    async def _read(self, body: Callable[[Cursor], T]) -> T:
        return await self._run_sync(body, None)

    async def _run_sync(self, body: Callable[[Cursor], T], how: Write | None) -> T:
        """Run the synchronous ``body`` in one transaction through :class:`PgCursor`: a
        write (``how``), or a read-only snapshot (``None``).

        Raises:
            HoldRefused: ``body`` refused (its refusal event is committed first).
            LedgerUnavailable: storage failed, or still conflicting after RETRIES.
        """
        pool, executor = self._live_pool(), self._executor
        if executor is None:
            raise LedgerUnavailable()

        async def attempt() -> T:
            async with pool.acquire(timeout=self.config.db_pool_timeout_s) as conn:
                return await run_body(conn, body, how, executor)

        return await self._retried(attempt)


async def run_body(
    conn: Any,
    body: Callable[[Cursor], T],
    how: Write | None,
    executor: concurrent.futures.Executor,
) -> T:
    """One try of a synchronous ``body`` on ``conn`` (a write after the locks ``how``
    asks for, or a read-only snapshot when ``None``), run in ``executor`` with its
    statements awaited on the loop. Cancelled, it waits for the thread's statement
    (bounded by the connection's statement timeout) before the transaction ends.

    Raises:
        HoldRefused: ``body`` refused (its refusal event is committed first).
    """
    loop = asyncio.get_running_loop()
    refused: RefusedStep | None = None
    if how is not None:
        txn = conn.transaction()
    else:
        txn = conn.transaction(isolation="repeatable_read", readonly=True)
    async with txn:
        if how is not None:
            await _lock(conn, how)
        work = loop.run_in_executor(executor, body, PgCursor(conn, loop))
        try:
            result = await asyncio.shield(work)
        except RefusedStep as exc:
            refused = exc  # leave the block normally: commit the event
        except asyncio.CancelledError:
            # the thread still runs statements on conn: the transaction (and the
            # connection's return to its pool) waits for it, never shares conn with it
            await asyncio.wait([work])
            raise
    if refused is not None:
        raise HoldRefused(refused.refusal) from None
    return result


async def _lock(conn: Any, how: Write) -> None:
    """Take the row locks ``how`` asks for, in the one lock order: the message counter
    row; the holds of a correction, then their buckets (by key), then their operations."""
    if how.message_user is not None:
        await conn.execute(_MESSAGES_LOCK, how.message_user, how.message_day)
    if how.hold_ids:
        await lock_corrections(conn, how.hold_ids)
