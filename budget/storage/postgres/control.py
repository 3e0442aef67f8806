"""The kill switch's own path to PostgreSQL: one connection of its own per process, never
queued behind the ledger's pool (:class:`ControlLine`, a base of
:class:`budget.storage.postgres.store.PgStore`).

When something else holds the rows the hot path needs (a long transaction on
``budget_buckets``, a manual query), every pooled connection may be waiting on a lock
for up to the lock timeout, and every new step for a pool connection: a ``/kill`` on the
pool then answered after them. Here tripping, resetting and reading the switches run on
a dedicated connection (opened on first use, again after a failure; the same lock
timeout), one at a time, in a worker thread of their own. They touch no row a hold
locks — the switches' rows, their events, a read of the held holds' exposure, and the
``runtime_signals`` row ``/kill hard`` raises for the other replicas
(:class:`ControlTransactor`) — so a lock storm does not reach them: a ``/kill`` takes
effect, every hold after it refused, in milliseconds whatever the pool is doing
(docs/decisions/101-deadlines-and-the-control-path.md).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
from collections.abc import Awaitable, Callable
from datetime import datetime
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar

import asyncpg

from budget.config import LedgerConfig
from budget.status import KillState
from budget.storage.postgres.runner import STORAGE, run_body, unavailable
from budget.storage.postgres.timestamps import use_epoch_seconds
from budget.storage.sql import admin
from budget.storage.sql.rows import exposure, kill_states
from budget.storage.store import DURABLE, Cursor, Write

__all__ = ["CONTROL_TIMEOUT_S", "ControlLine", "ControlTransactor", "server_settings"]

T = TypeVar("T")

#: Seconds a control step may take on its connection (statement and connect).
CONTROL_TIMEOUT_S = 5.0


def server_settings(config: LedgerConfig) -> dict[str, str]:
    """The session settings of every ledger connection: PostgreSQL's ``lock_timeout``
    (milliseconds) from ``db_lock_timeout_s``."""
    return {"lock_timeout": str(max(1, round(config.db_lock_timeout_s * 1000)))}


class ControlLine:
    """The kill switch's connection (module docstring). The store provides ``config``,
    ``_dsn`` and ``_rules_changed``."""

    config: LedgerConfig
    _dsn: str

    def _init_control(self) -> None:
        self._control_conn: Any = None
        self._control_lock = asyncio.Lock()
        self._control_executor: concurrent.futures.ThreadPoolExecutor | None = None

    if TYPE_CHECKING:  # provided by budget.storage.postgres.store.PgStore

        def _rules_changed(self, *, limits: bool) -> None: ...

    async def _control(self, body: Callable[[Cursor], T], how: Write | None) -> T:
        """Run the portable ``body`` on the control connection (one at a time): a write
        after the locks ``how`` asks for, or a read-only snapshot when ``None``.

        Raises:
            HoldRefused: ``body`` refused.
            LedgerUnavailable: the server cannot be reached, or the step timed out
                (``timed_out``); the connection is opened again next time.
        """

        async def step(conn: Any) -> T:
            if self._control_executor is None:
                self._control_executor = concurrent.futures.ThreadPoolExecutor(
                    max_workers=1, thread_name_prefix="ledger-control"
                )
            return await run_body(conn, body, how, self._control_executor)

        return await self._on_control(step)

    async def control_tx(self, body: Callable[[Any], Awaitable[T]], *, single: bool) -> T:
        """Run the async ``body`` on the control connection (one at a time), in one
        transaction unless ``single`` (one statement, its own transaction): the
        cross-replica signals of ``/kill hard`` (:mod:`bot.ops.signals`).

        Raises:
            LedgerUnavailable: as :meth:`_control`.
        """

        async def step(conn: Any) -> T:
            if single:
                return await body(conn)
            async with conn.transaction():
                return await body(conn)

        return await self._on_control(step)

    async def _on_control(self, step: Callable[[Any], Awaitable[T]]) -> T:
        """``step`` on the control connection, opened first when there is none."""
        async with self._control_lock:
            try:
                if self._control_conn is None or self._control_conn.is_closed():
                    self._control_conn = await asyncpg.connect(
                        self._dsn,
                        timeout=CONTROL_TIMEOUT_S,
                        command_timeout=CONTROL_TIMEOUT_S,
                        server_settings=server_settings(self.config),
                    )
                    await use_epoch_seconds(self._control_conn)
                return await step(self._control_conn)
            except STORAGE as exc:
                await self._close_control()
                raise unavailable(exc) from exc
            except asyncio.CancelledError:
                await self._close_control()  # it may be mid-statement: never reused
                raise

    async def _close_control(self) -> None:
        """Close the control connection and its thread (the next step opens them)."""
        conn, self._control_conn = self._control_conn, None
        if conn is not None:
            with contextlib.suppress(*STORAGE):
                await asyncio.wait_for(conn.close(), CONTROL_TIMEOUT_S)
        executor, self._control_executor = self._control_executor, None
        if executor is not None:
            executor.shutdown(wait=False)

    async def set_kill(
        self, now: datetime, kind: str, scope: str, killed: bool, reason: str, by: int | None
    ) -> int:
        """Trip or reset a switch on the control connection; returns the exposure (µUSD
        held in that scope)."""
        body = partial(admin.set_kill_exposure, cfg=self.config, now=now, kind=kind)
        exposure = await self._control(
            partial(body, scope=scope, killed=killed, reason=reason, by=by), DURABLE
        )
        self._rules_changed(limits=False)
        return exposure

    async def kill_states(self) -> list[KillState]:
        """Every switch row (tripped or not), read on the control connection."""
        return await self._control(kill_states, None)

    async def exposure(self, kind: str = "global", scope: str = "") -> int:
        """µUSD held in a kill scope, read on the control connection (a plain read of
        ``budget_holds``: no row lock waits for it)."""
        return await self._control(partial(exposure, kind=kind, scope=scope), None)

    @property
    def control(self) -> ControlTransactor:
        """The control connection as a transactor (``tx(now, body, single=…)``)."""
        return ControlTransactor(self)


class ControlTransactor:
    """A :class:`ControlLine`'s connection behind the ``tx`` of the pool's transactor
    (``llm.keys.postgres.Transactor``): what a control's own rows need."""

    __slots__ = ("_line",)

    def __init__(self, line: ControlLine) -> None:
        self._line = line

    def __repr__(self) -> str:
        return "ControlTransactor()"

    async def tx(
        self, now: datetime, body: Callable[[Any], Awaitable[T]], *, single: bool = False
    ) -> T:
        """Run ``body`` on the control connection (``now`` unused: no refusal events).

        Raises:
            LedgerUnavailable: the server cannot be reached or the step timed out.
        """
        del now
        return await self._line.control_tx(body, single=single)
