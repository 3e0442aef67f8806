"""The PostgreSQL ledger's steps that reuse the shared synchronous row modules.

Reports (``budget.storage.sql.reports``), the admin steps (``budget.storage.sql.admin``), reads
of holds and ``/reconcile apply`` (``budget.storage.sql.corrections``) are written in the
SQL subset both engines accept; on PostgreSQL their body runs in a worker thread and
each statement is awaited on the event loop through :class:`budget.storage.postgres.rows.PgCursor`
(rare steps: the hot path is :mod:`budget.storage.postgres.holds` and
:mod:`budget.storage.postgres.ends`).
Reads run in a ``REPEATABLE READ READ ONLY`` snapshot and take no lock; a writing
step that checks then writes first locks its rows in the one lock order of
:mod:`budget.storage.postgres.rows`.

:class:`PgRowSteps` is the base of :class:`budget.storage.postgres.store.PgStore`, which owns the
pool and the worker threads.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import random
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar

import asyncpg

from budget.config import LedgerConfig
from budget.errors import HoldRefused, LedgerUnavailable
from budget.policy.windows import window_keys
from budget.status import KillState, LedgerStatus, TeamStatus, UserStatus
from budget.storage.postgres.rows import PgCursor, lock_corrections
from budget.storage.sql import admin, reports
from budget.storage.sql import holds as sync_holds
from budget.storage.sql.corrections import apply_corrections
from budget.storage.sql.rows import kill_states, teams
from budget.storage.store import Cursor, RefusedStep
from budget.types import Level, Window

if TYPE_CHECKING:
    from budget.books.corrections import ApplyResult
    from budget.books.reconcile import PlannedCorrection

__all__ = ["RETRIES", "RETRYABLE", "STORAGE", "Body", "PgRowSteps"]

T = TypeVar("T")

#: Attempts of a step that hit a serialization failure or a deadlock.
RETRIES = 5
#: Errors that mean "conflicted with another transaction: run the step again".
RETRYABLE = (asyncpg.exceptions.SerializationError, asyncpg.exceptions.DeadlockDetectedError)
#: Errors that mean "storage failed": ``LedgerUnavailable``.
STORAGE = (asyncpg.PostgresError, asyncpg.InterfaceError, OSError, asyncio.TimeoutError)

#: A transaction body on one asyncpg connection.
Body = Callable[[Any], Awaitable[T]]

#: Locks (creating it) the user's message counter of the day before the check.
_MESSAGES_LOCK = (
    "INSERT INTO budget_messages (user_id, day_key, count) VALUES ($1, $2, 0)"
    " ON CONFLICT (user_id, day_key) DO UPDATE SET count = budget_messages.count"
)


class PgRowSteps:
    """The steps of :class:`budget.storage.postgres.store.PgStore` run through the shared row
    modules (module docstring); the store sets the attributes below.

    Attributes:
        config: limits and knobs.
        _pool: the asyncpg pool (``None`` when closed: ``LedgerUnavailable``).
        _executor: the worker threads running synchronous bodies.
        _backoff_s: first retry pause, seconds.
    """

    config: LedgerConfig
    _pool: asyncpg.Pool | None
    _executor: concurrent.futures.ThreadPoolExecutor | None
    _backoff_s: float

    async def _pause(self, attempt: int) -> None:
        """Random pause before retry ``attempt`` (0-based): jitter so that the steps
        that conflicted do not meet again at once."""
        if self._backoff_s > 0:
            await asyncio.sleep(random.uniform(0, self._backoff_s * 2**attempt))

    async def _step(
        self,
        body: Callable[[Cursor], T],
        *,
        write: bool = True,
        prelock: Body[None] | None = None,
    ) -> T:
        """Run the synchronous ``body`` (a shared row module function) in one
        transaction through :class:`PgCursor`, after ``prelock`` took its row locks;
        retried on serialization/deadlock errors.

        Raises:
            HoldRefused: ``body`` refused (its refusal event is committed first).
            LedgerUnavailable: storage failed, or still conflicting after RETRIES.
        """
        pool, executor = self._pool, self._executor
        if pool is None or executor is None:
            raise LedgerUnavailable()
        loop = asyncio.get_running_loop()
        last: BaseException | None = None
        for attempt in range(RETRIES):
            refused: RefusedStep | None = None
            try:
                async with pool.acquire() as conn:
                    if write:
                        txn = conn.transaction()
                    else:
                        txn = conn.transaction(isolation="repeatable_read", readonly=True)
                    async with txn:
                        if prelock is not None:
                            await prelock(conn)
                        cur = PgCursor(conn, loop)
                        try:
                            result = await loop.run_in_executor(executor, body, cur)
                        except RefusedStep as exc:
                            refused = exc  # leave the block normally: commit the event
            except RETRYABLE as exc:
                last = exc
                await self._pause(attempt)
                continue
            except STORAGE as exc:
                raise LedgerUnavailable() from exc
            if refused is not None:
                raise HoldRefused(refused.refusal) from None
            return result
        raise LedgerUnavailable() from last

    async def operation_booked_musd(self, operation_id: str) -> int:
        """See :meth:`budget.storage.store.LedgerStore.operation_booked_musd`."""
        return await self._step(
            partial(sync_holds.operation_booked_musd, operation_id=operation_id), write=False
        )

    async def remaining_musd(self, now: datetime, operation_id: str, provider: str) -> int | None:
        """See :meth:`budget.storage.store.LedgerStore.remaining_musd`."""
        return await self._step(
            partial(
                sync_holds.remaining_musd,
                cfg=self.config,
                now=now,
                operation_id=operation_id,
                provider=provider,
            ),
            write=False,
        )

    # -- calibration, kill switch, limits, teams, messages --------------------------------
    async def calibration(self) -> dict[tuple[str, str], tuple[int, int]]:
        """See :meth:`budget.storage.store.LedgerStore.calibration`."""
        return await self._step(admin.calibration, write=False)

    async def record_calibration(
        self, now: datetime, provider: str, model: str, ratio_ppm: int, samples: int
    ) -> None:
        """See :meth:`budget.storage.store.LedgerStore.record_calibration`."""
        await self._step(
            partial(
                admin.record_calibration,
                now=now,
                provider=provider,
                model=model,
                ratio_ppm=ratio_ppm,
                samples=samples,
            )
        )

    async def set_kill(
        self, now: datetime, kind: str, scope: str, killed: bool, reason: str, by: int | None
    ) -> int:
        """See :meth:`budget.storage.store.LedgerStore.set_kill`."""
        return await self._step(
            partial(
                admin.set_kill_exposure,
                cfg=self.config,
                now=now,
                kind=kind,
                scope=scope,
                killed=killed,
                reason=reason,
                by=by,
            )
        )

    async def kill_states(self) -> list[KillState]:
        """See :meth:`budget.storage.store.LedgerStore.kill_states`."""
        return await self._step(kill_states, write=False)

    async def set_limit(
        self,
        now: datetime,
        level: Level,
        scope: str,
        window: Window,
        limit_musd: int | None,
        by: int | None,
        clear: bool,
    ) -> None:
        """See :meth:`budget.storage.store.LedgerStore.set_limit`."""
        await self._step(
            partial(
                admin.set_limit,
                cfg=self.config,
                now=now,
                level=level,
                scope=scope,
                window=window,
                limit_musd=limit_musd,
                by=by,
                clear=clear,
            )
        )

    async def team_add(self, now: datetime, name: str, user_id: int) -> str | None:
        """See :meth:`budget.storage.store.LedgerStore.team_add`."""
        return await self._step(partial(admin.team_add, now=now, name=name, user_id=user_id))

    async def team_remove(self, now: datetime, name: str, user_id: int) -> bool:
        """See :meth:`budget.storage.store.LedgerStore.team_remove`."""
        del now
        return await self._step(partial(admin.team_remove, name=name, user_id=user_id))

    async def teams(self) -> dict[str, list[int]]:
        """See :meth:`budget.storage.store.LedgerStore.teams`."""
        return await self._step(teams, write=False)

    async def record_message(self, now: datetime, user_id: int) -> int:
        """See :meth:`budget.storage.store.LedgerStore.record_message` (the day's counter row
        is locked before it is checked, so two processes never both take the last)."""
        day_key = window_keys(now, self.config.tz).day_key

        async def lock(conn: Any) -> None:
            await conn.execute(_MESSAGES_LOCK, user_id, day_key)

        return await self._step(
            partial(admin.record_message, cfg=self.config, now=now, user_id=user_id),
            prelock=lock,
        )

    # -- reports ---------------------------------------------------------------------------
    async def status(self, now: datetime) -> LedgerStatus:
        """See :meth:`budget.storage.store.LedgerStore.status`."""
        return await self._step(partial(reports.status, cfg=self.config, now=now), write=False)

    async def user_status(self, now: datetime, user_id: int) -> UserStatus:
        """See :meth:`budget.storage.store.LedgerStore.user_status`."""
        return await self._step(
            partial(reports.user_status, cfg=self.config, now=now, user_id=user_id), write=False
        )

    async def team_status(self, now: datetime, name: str) -> TeamStatus:
        """See :meth:`budget.storage.store.LedgerStore.team_status`."""
        return await self._step(
            partial(reports.team_status, cfg=self.config, now=now, name=name), write=False
        )

    async def top_users(self, now: datetime, n: int) -> list[tuple[int, int, int]]:
        """See :meth:`budget.storage.store.LedgerStore.top_users`."""
        return await self._step(
            partial(reports.top_users, cfg=self.config, now=now, n=n), write=False
        )

    async def spend_per_hour(
        self, now: datetime, hours: int
    ) -> dict[str, list[tuple[datetime, int]]]:
        """See :meth:`budget.storage.store.LedgerStore.spend_per_hour`."""
        return await self._step(
            partial(reports.spend_per_hour, cfg=self.config, now=now, hours=hours), write=False
        )

    async def audit(self) -> dict[str, Any]:
        """See :meth:`budget.storage.store.LedgerStore.audit`."""
        return await self._step(reports.audit, write=False)

    async def apply_corrections(
        self,
        now: datetime,
        plan: Sequence[PlannedCorrection],
        by_user: int | None,
        file_name: str,
        sha256: str,
    ) -> ApplyResult:
        """See :meth:`budget.storage.store.LedgerStore.apply_corrections` (the plan's holds,
        their buckets and operations are locked first, in the one lock order)."""
        hold_ids = sorted({item.hold_id for item in plan})
        return await self._step(
            partial(
                apply_corrections,
                cfg=self.config,
                now=now,
                plan=plan,
                by_user=by_user,
                file_name=file_name,
                sha256=sha256,
            ),
            prelock=partial(lock_corrections, hold_ids=hold_ids),
        )
