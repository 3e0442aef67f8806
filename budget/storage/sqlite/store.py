"""The SQLite ledger store: :class:`budget.storage.store.LedgerStore` on one SQLite file.

The pieces: :mod:`budget.kernel.sqlite_writer` (one connection on one writer thread, the
steps queued run in one ``BEGIN IMMEDIATE`` group transaction, a savepoint each, errors
translated to ``LedgerUnavailable``), :mod:`budget.storage.sql.holds` (operations, requests, holds,
sweep), :mod:`budget.storage.sql.admin` (kill, limits, teams, messages, calibration),
:mod:`budget.storage.sql.reports` (status and audit), :mod:`budget.storage.sql.corrections`,
and the shared row helpers in :mod:`budget.storage.sql.rows`. The rules are in
:mod:`budget.policy.rules`, common to every backend.

Durable and grouped steps: a granted hold (:meth:`SqliteStore.reserve`), the kill
switch, limits, teams, corrections and the sweep are *durable* (the WAL is fsync'd after
their group's commit, before they are answered; a refused hold is not fsync'd);
operation and request admission, settle, release and the message counter are *grouped*
(committed before they are answered, fsync'd by the next durable group); the end of an
operation and calibration samples are *posted* (queued at once, committed with the next
group, not waited for: :meth:`SqliteWriter.post`). A power cut
can lose only grouped steps: a lost settle or release leaves its hold, which the next
start books at its bound, ceiling plus admission margin (never less than real); a lost
admission took no money.

One bot process per file (:mod:`budget.kernel.instance_lock`): the holds of any other
process id are swept at start. Times are epoch seconds from the ledger's clock;
money is integer µUSD.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from budget.config import LedgerConfig
from budget.errors import LedgerUnavailable
from budget.kernel.sqlite_writer import BUSY_TIMEOUT_S, SqliteWriter
from budget.protocol import HoldTicket, OperationTicket
from budget.status import KillState, LedgerStatus, TeamStatus, UserStatus
from budget.storage.sql import admin, holds, reports
from budget.storage.sql.corrections import apply_corrections
from budget.storage.sql.rows import kill_states, teams
from budget.storage.store import (
    Admission,
    Pricer,
    RefusedStep,
    SettleOutcome,
    SweepOutcome,
    UnknownOperation,
)
from budget.types import Level, Origin, Usage, Window

if TYPE_CHECKING:
    from budget.books.corrections import ApplyResult
    from budget.books.reconcile import PlannedCorrection

__all__ = ["BUSY_TIMEOUT_S", "SettleOutcome", "SqliteStore", "SweepOutcome", "UnknownOperation"]


class SqliteStore:
    """The single-writer SQLite ledger store.

    Args:
        path: the database file (schema created by Alembic, or
            :func:`budget.storage.tables.create_schema` in tests).
        config: limits and knobs.
        process_id: identifies this process's holds (swept by the next start).
    """

    name = "sqlite"

    def __init__(self, path: str | Path, config: LedgerConfig, process_id: str) -> None:
        self.path = Path(path)
        self.config = config
        self.process_id = process_id
        self.writer = SqliteWriter(self.path, config.synchronous, unavailable=LedgerUnavailable)

    @property
    def location(self) -> str:
        """The database path."""
        return str(self.path)

    @property
    def lost(self) -> str:
        """``"deleted"``/``"replaced"`` once the path no longer names the open file."""
        return self.writer.lost

    async def open(self) -> None:
        """Start the writer thread and open its connection (idempotent)."""
        await asyncio.to_thread(self.writer.open)

    async def close(self) -> None:
        """Close the connection and stop the writer thread (idempotent)."""
        await asyncio.to_thread(self.writer.close)

    # -- operations, requests, holds ---------------------------------------------------
    async def begin_operation(
        self, now: datetime, user_id: int, origin: Origin, max_musd: int, max_requests: int
    ) -> OperationTicket:
        """See :meth:`budget.storage.store.LedgerStore.begin_operation`."""
        body = partial(
            holds.begin_operation,
            cfg=self.config,
            process_id=self.process_id,
            now=now,
            user_id=user_id,
            origin=origin,
            max_musd=max_musd,
            max_requests=max_requests,
        )
        return await self.writer.txn(body, durable=False)

    async def end_operation(self, now: datetime, operation_id: str) -> None:
        """See :meth:`budget.storage.store.LedgerStore.end_operation`. Posted: queued before
        this returns (every later step sees the slot free), committed with the next
        group, not waited for (:meth:`SqliteWriter.post`)."""
        self.writer.post(
            partial(holds.end_operation, now=now, operation_id=operation_id),
            f"end of operation {operation_id}",
        )

    async def operation_booked_musd(self, operation_id: str) -> int:
        """See :meth:`budget.storage.store.LedgerStore.operation_booked_musd`."""
        return await self.writer.read(
            partial(holds.operation_booked_musd, operation_id=operation_id)
        )

    async def begin_request(self, now: datetime, operation_id: str, fingerprint: str) -> str:
        """See :meth:`budget.storage.store.LedgerStore.begin_request`."""
        body = partial(
            holds.begin_request,
            cfg=self.config,
            now=now,
            operation_id=operation_id,
            fingerprint=fingerprint,
        )
        return await self.writer.txn(body, durable=False)

    async def reserve(
        self,
        now: datetime,
        operation_id: str,
        request_id: str,
        provider: str,
        model: str,
        input_tokens: int,
        max_tokens: int,
        ceiling_musd: int,
        list_ceiling_musd: int | None,
        price_version: str,
        margin_musd: int = 0,
    ) -> HoldTicket:
        """See :meth:`budget.storage.store.LedgerStore.reserve` (checks the file first)."""
        body = partial(
            holds.reserve,
            cfg=self.config,
            process_id=self.process_id,
            now=now,
            operation_id=operation_id,
            request_id=request_id,
            provider=provider,
            model=model,
            input_tokens=input_tokens,
            max_tokens=max_tokens,
            ceiling_musd=ceiling_musd,
            list_ceiling_musd=list_ceiling_musd,
            price_version=price_version,
            margin_musd=margin_musd,
        )
        return await self.writer.txn(body, check_file=True)

    async def admit(
        self, now: datetime, admission: Admission, hold: dict[str, Any] | None
    ) -> HoldTicket | RefusedStep | None:
        """A deferred admission, its first request and (``hold``: :meth:`reserve`'s
        arguments past ``operation_id``, by name) its first hold in ONE step
        (:func:`budget.storage.sql.holds.admit`); durable when it holds, grouped otherwise.

        Returns:
            the hold; ``None`` when none was asked; a refusal of the request or the
            hold (the operation and request exist).

        Raises:
            HoldRefused: the admission was refused (no operation was created).
            LedgerUnavailable: storage failed (nothing of the step was written).
        """
        body = partial(
            holds.admit,
            cfg=self.config,
            process_id=self.process_id,
            now=now,
            admission=admission,
            hold=hold,
        )
        return await self.writer.txn(body, check_file=hold is not None, durable=hold is not None)

    async def remaining_musd(self, now: datetime, operation_id: str, provider: str) -> int | None:
        """See :meth:`budget.storage.store.LedgerStore.remaining_musd`."""
        body = partial(
            holds.remaining_musd,
            cfg=self.config,
            now=now,
            operation_id=operation_id,
            provider=provider,
        )
        return await self.writer.read(body)

    async def settle(
        self,
        now: datetime,
        hold_id: str,
        usage: Usage | Callable[[int, int], Usage],
        estimated: bool,
        pricer: Pricer,
    ) -> SettleOutcome:
        """See :meth:`budget.storage.store.LedgerStore.settle`."""
        body = partial(
            holds.settle,
            cfg=self.config,
            now=now,
            hold_id=hold_id,
            usage=usage,
            estimated=estimated,
            pricer=pricer,
        )
        return await self.writer.txn(body, durable=False)

    async def release(self, now: datetime, hold_id: str) -> bool:
        """See :meth:`budget.storage.store.LedgerStore.release`."""
        return await self.writer.txn(
            partial(holds.release, cfg=self.config, now=now, hold_id=hold_id), durable=False
        )

    async def sweep(self, now: datetime, previous_processes: bool = False) -> SweepOutcome:
        """See :meth:`budget.storage.store.LedgerStore.sweep` (checks the file first)."""
        body = partial(
            holds.sweep,
            cfg=self.config,
            process_id=self.process_id,
            now=now,
            previous_processes=previous_processes,
        )
        return await self.writer.txn(body, check_file=True)

    # -- calibration, kill switch, limits, teams, messages --------------------------------
    async def calibration(self) -> dict[tuple[str, str], tuple[int, int]]:
        """See :meth:`budget.storage.store.LedgerStore.calibration`."""
        return await self.writer.read(admin.calibration)

    async def record_calibration(
        self, now: datetime, provider: str, model: str, ratio_ppm: int, samples: int
    ) -> None:
        """See :meth:`budget.storage.store.LedgerStore.record_calibration`. Posted, not waited
        for (:meth:`SqliteWriter.post`)."""
        body = partial(
            admin.record_calibration,
            now=now,
            provider=provider,
            model=model,
            ratio_ppm=ratio_ppm,
            samples=samples,
        )
        self.writer.post(body, f"calibration of {provider}/{model}")

    async def set_kill(
        self, now: datetime, kind: str, scope: str, killed: bool, reason: str, by: int | None
    ) -> int:
        """See :meth:`budget.storage.store.LedgerStore.set_kill`."""
        body = partial(
            admin.set_kill_exposure,
            cfg=self.config,
            now=now,
            kind=kind,
            scope=scope,
            killed=killed,
            reason=reason,
            by=by,
        )
        return await self.writer.txn(body)

    async def kill_states(self) -> list[KillState]:
        """See :meth:`budget.storage.store.LedgerStore.kill_states`."""
        return await self.writer.read(kill_states)

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
        body = partial(
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
        await self.writer.txn(body)

    async def team_add(self, now: datetime, name: str, user_id: int) -> str | None:
        """See :meth:`budget.storage.store.LedgerStore.team_add`."""
        return await self.writer.txn(partial(admin.team_add, now=now, name=name, user_id=user_id))

    async def team_remove(self, now: datetime, name: str, user_id: int) -> bool:
        """See :meth:`budget.storage.store.LedgerStore.team_remove`."""
        del now
        return await self.writer.txn(partial(admin.team_remove, name=name, user_id=user_id))

    async def teams(self) -> dict[str, list[int]]:
        """See :meth:`budget.storage.store.LedgerStore.teams`."""
        return await self.writer.read(teams)

    async def record_message(self, now: datetime, user_id: int) -> int:
        """See :meth:`budget.storage.store.LedgerStore.record_message`."""
        return await self.writer.txn(
            partial(admin.record_message, cfg=self.config, now=now, user_id=user_id),
            durable=False,
        )

    # -- reports ---------------------------------------------------------------------------
    async def status(self, now: datetime) -> LedgerStatus:
        """See :meth:`budget.storage.store.LedgerStore.status`."""
        return await self.writer.read(partial(reports.status, cfg=self.config, now=now))

    async def user_status(self, now: datetime, user_id: int) -> UserStatus:
        """See :meth:`budget.storage.store.LedgerStore.user_status`."""
        return await self.writer.read(
            partial(reports.user_status, cfg=self.config, now=now, user_id=user_id)
        )

    async def team_status(self, now: datetime, name: str) -> TeamStatus:
        """See :meth:`budget.storage.store.LedgerStore.team_status`."""
        return await self.writer.read(
            partial(reports.team_status, cfg=self.config, now=now, name=name)
        )

    async def top_users(self, now: datetime, n: int) -> list[tuple[int, int, int]]:
        """See :meth:`budget.storage.store.LedgerStore.top_users`."""
        return await self.writer.read(partial(reports.top_users, cfg=self.config, now=now, n=n))

    async def spend_per_hour(
        self, now: datetime, hours: int
    ) -> dict[str, list[tuple[datetime, int]]]:
        """See :meth:`budget.storage.store.LedgerStore.spend_per_hour`."""
        return await self.writer.read(
            partial(reports.spend_per_hour, cfg=self.config, now=now, hours=hours)
        )

    async def audit(self) -> dict[str, Any]:
        """See :meth:`budget.storage.store.LedgerStore.audit`."""
        return await self.writer.read(reports.audit)

    async def apply_corrections(
        self,
        now: datetime,
        plan: Sequence[PlannedCorrection],
        by_user: int | None,
        file_name: str,
        sha256: str,
    ) -> ApplyResult:
        """See :meth:`budget.storage.store.LedgerStore.apply_corrections`."""
        body = partial(
            apply_corrections,
            cfg=self.config,
            now=now,
            plan=plan,
            by_user=by_user,
            file_name=file_name,
            sha256=sha256,
        )
        return await self.writer.txn(body)

    def __repr__(self) -> str:
        return f"SqliteStore(path={str(self.path)!r}, process_id={self.process_id!r})"
