"""The storage seam of the ledger: :class:`LedgerStore`, every step a backend offers
:class:`budget.ledger.Ledger`, written once.

Each step is a body of the portable row SQL (:mod:`budget.storage.sql`, which both
engines run) and how it runs: a *write* in ONE transaction, all or nothing (*durable*:
on disk before it is answered; *grouped*: committed, made durable with the next durable
step), a *read* in one snapshot, or a *posted* write nobody waits for. An engine is the
runner (:meth:`LedgerStore._write`, :meth:`LedgerStore._read`, :meth:`LedgerStore._post`):
:class:`budget.storage.sqlite.store.SqliteStore` (one file, one writer thread) and
:class:`budget.storage.postgres.store.PgStore` (a database shared by several processes),
which also replaces the hot path — operations, requests, holds and their ends, the
sweep — by its own statements on asyncpg. The rules every backend applies (effective
limits, buckets, margins, refusals, the hold state machine, the auto-kill trigger) are
in :mod:`budget.policy`; a store only reads and writes rows.

Conventions for every step: ``now`` is the ledger clock's aware time; money is integer
µUSD. Every step may raise :class:`~budget.errors.LedgerUnavailable` (storage failed: the
caller fails closed) and never a driver's own exception; admission steps raise
:class:`~budget.errors.HoldRefused` after recording the refusal event.
"""

from __future__ import annotations

import abc
from collections.abc import Callable
from datetime import datetime
from functools import partial
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from budget.config import LedgerConfig
from budget.policy.wallet import WalletCredit, WalletRefund, WalletState
from budget.policy.windows import window_keys
from budget.protocol import HoldTicket, OperationTicket
from budget.status import (
    HoldEntry,
    KillState,
    LedgerStatus,
    PayerStatus,
    PlansHeld,
    TeamStatus,
    UserStatus,
)
from budget.storage.sql import admin, holds, refunds, reports, retention, wallet
from budget.storage.sql.corrections import apply_corrections
from budget.storage.sql.rows import exposure, kill_states, plans_held, teams, user_plan
from budget.storage.store import (
    CHECKED,
    DURABLE,
    GROUPED,
    Admission,
    Cursor,
    LimitChange,
    PricedHold,
    RefusedStep,
    SettleOutcome,
    SettleRequest,
    SharedDatabase,
    SweepOutcome,
    Write,
)
from budget.types import Level, Window

if TYPE_CHECKING:
    from budget.books.corrections import ApplyResult, CorrectionPlan
    from budget.kernel.sqlite_writer import SqliteWriter

__all__ = ["LedgerStore"]

T = TypeVar("T")
#: A step's body: the portable SQL on the transaction's cursor.
Body = Callable[[Cursor], T]
#: A retention step: durable, alone in its group (its commit and fsync are its own).
PRUNE = Write(alone=True)


class LedgerStore(abc.ABC):
    """A ledger backend: every step, run by the engine's runner (module docstring).

    Attributes:
        name: backend name for logs (``"sqlite"``, ``"postgresql"``).
        config: the limits and knobs (the ledger's own object).
        process_id: identifies this process's holds and operations.
        defers_admission: :meth:`admit` may be used: an operation's admission, its first
            request and its first hold in one step (an engine whose steps run one at a
            time, so the portable SQL's checks are atomic).
        writer: the one writer thread other tables of the same file may ride
            (SQLite), or ``None``.
    """

    name: ClassVar[str]
    defers_admission: ClassVar[bool] = False
    config: LedgerConfig
    process_id: str
    writer: SqliteWriter | None = None

    @property
    @abc.abstractmethod
    def location(self) -> str:
        """What the store opened, for logs (a path, a host; never a secret)."""

    @property
    @abc.abstractmethod
    def lost(self) -> str:
        """Non-empty once storage is gone for good (``"deleted"``, ``"replaced"``,
        ``"fenced"``): every later step raises ``LedgerUnavailable``."""

    @property
    def shared(self) -> SharedDatabase | None:
        """The database other processes share with this one (PostgreSQL), for the
        replicas' shared state; ``None``: this process is alone on its storage."""
        return None

    @abc.abstractmethod
    async def open(self) -> None:
        """Connect (idempotent)."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Disconnect (idempotent)."""

    # -- the runner ------------------------------------------------------------------
    @abc.abstractmethod
    async def _write(self, body: Body[T], how: Write = DURABLE) -> T:
        """Run ``body`` in ONE transaction, as ``how`` says (durable or grouped; the
        storage checked first; rows locked first).

        Raises:
            HoldRefused: ``body`` raised :class:`~budget.storage.store.RefusedStep`.
            LedgerUnavailable: storage failed (nothing of the step was written).
        """

    @abc.abstractmethod
    async def _read(self, body: Body[T]) -> T:
        """Run a read-only ``body`` in one consistent snapshot."""

    async def _post(self, body: Body[None], what: str) -> None:
        """A write nobody needs to wait for (``what`` names it in the log if it
        fails); by default an ordinary grouped write."""
        del what
        await self._write(body, GROUPED)

    def _rules_changed(self, *, limits: bool) -> None:
        """A kill switch (or, ``limits``, a runtime limit) was set: an engine that
        keeps what it read (PostgreSQL) forgets it."""
        del limits

    # -- operations, requests, holds ------------------------------------------------
    async def begin_operation(self, now: datetime, admission: Admission) -> OperationTicket:
        """Admit an operation (kill, in-flight, rate) and take an in-flight slot."""
        body = partial(holds.begin_operation, cfg=self.config, process_id=self.process_id)
        return await self._write(partial(body, now=now, admission=admission), GROUPED)

    async def admit(
        self, now: datetime, admission: Admission, hold: PricedHold | None
    ) -> HoldTicket | RefusedStep | None:
        """A deferred admission, its first request and (``hold``) its first hold in ONE
        step (:func:`budget.storage.sql.holds.admit`; only where
        :attr:`defers_admission`); durable when it holds, grouped otherwise.

        Returns:
            the hold; ``None`` when none was asked; a refusal of the request or the
            hold (the operation and request exist).

        Raises:
            HoldRefused: the admission was refused (no operation was created).
        """
        assert self.defers_admission, f"{self.name} admits operations on their own"
        body = partial(holds.admit, cfg=self.config, process_id=self.process_id)
        how = GROUPED if hold is None else CHECKED
        return await self._write(partial(body, now=now, admission=admission, hold=hold), how)

    async def end_operation(self, now: datetime, operation_id: str) -> None:
        """Free the operation's slot (idempotent; posted: queued before this returns,
        so every later step sees the slot free)."""
        body = partial(holds.end_operation, now=now, operation_id=operation_id)
        await self._post(body, f"end of operation {operation_id}")

    async def operation_booked_musd(self, operation_id: str) -> int:
        """Settled actuals + ceilings held or booked at expiry of an operation.

        Raises:
            UnknownOperation: never begun.
        """
        return await self._read(partial(holds.operation_booked_musd, operation_id=operation_id))

    async def begin_request(self, now: datetime, operation_id: str, fingerprint: str) -> str:
        """Count a request in the operation; refuse a repeat fingerprint (loop) or too many."""
        body = partial(holds.begin_request, cfg=self.config, now=now)
        return await self._write(
            partial(body, operation_id=operation_id, fingerprint=fingerprint), GROUPED
        )

    async def reserve(self, now: datetime, hold: PricedHold) -> HoldTicket:
        """Hold ``hold.price.ceiling_musd`` on every level/window at once, or refuse with
        nothing held. Fits when ceiling + margin fits every bucket after the margins of
        the other outstanding holds (:func:`budget.policy.rules.with_margins`). Durable;
        checks the storage first."""
        body = partial(holds.reserve, cfg=self.config, process_id=self.process_id)
        return await self._write(partial(body, now=now, hold=hold), CHECKED)

    async def remaining_musd(self, now: datetime, operation_id: str, provider: str) -> int | None:
        """Smallest remaining amount over the levels a hold at ``provider`` would
        touch, the operation's remaining cap included."""
        body = partial(holds.remaining_musd, cfg=self.config, now=now)
        return await self._read(partial(body, operation_id=operation_id, provider=provider))

    async def settle(self, now: datetime, request: SettleRequest) -> SettleOutcome:
        """Book a hold's actual cost (idempotent; an expired hold is corrected once)."""
        body = partial(holds.settle, cfg=self.config, now=now, request=request)
        return await self._write(body, GROUPED)

    async def release(self, now: datetime, hold_id: str) -> bool:
        """Return a hold that spent nothing; ``False`` = no-op (already ended)."""
        body = partial(holds.release, cfg=self.config, now=now, hold_id=hold_id)
        return await self._write(body, GROUPED)

    async def sweep(self, now: datetime, previous_processes: bool = False) -> SweepOutcome:
        """Expire holds past their TTL (with ``previous_processes``: also every hold
        and operation of another process), each booked at its bound (ceiling plus
        admission margin), estimated. Durable; checks the storage first."""
        body = partial(holds.sweep, cfg=self.config, process_id=self.process_id, now=now)
        return await self._write(partial(body, previous_processes=previous_processes), CHECKED)

    # -- calibration, kill switch, limits, teams, messages ---------------------------
    async def calibration(self) -> dict[tuple[str, str], tuple[int, int]]:
        """``(provider, model) → (ratio ppm, samples)``."""
        return await self._read(admin.calibration)

    async def record_calibration(
        self, now: datetime, provider: str, model: str, ratio_ppm: int, samples: int
    ) -> None:
        """Persist one model's calibration (upsert; posted)."""
        body = partial(admin.record_calibration, now=now, provider=provider, model=model)
        await self._post(
            partial(body, ratio_ppm=ratio_ppm, samples=samples),
            f"calibration of {provider}/{model}",
        )

    async def set_kill(
        self, now: datetime, kind: str, scope: str, killed: bool, reason: str, by: int | None
    ) -> int:
        """Trip or reset a switch; returns the exposure (µUSD held in that scope)."""
        body = partial(admin.set_kill_exposure, cfg=self.config, now=now, kind=kind)
        exposure = await self._write(
            partial(body, scope=scope, killed=killed, reason=reason, by=by)
        )
        self._rules_changed(limits=False)
        return exposure

    async def kill_states(self) -> list[KillState]:
        """Every switch row (tripped or not)."""
        return await self._read(kill_states)

    async def exposure(self, kind: str = "global", scope: str = "") -> int:
        """µUSD held by outstanding holds in a kill scope (what a kill cannot stop)."""
        return await self._read(partial(exposure, kind=kind, scope=scope))

    async def set_limit(self, now: datetime, change: LimitChange) -> None:
        """Persist a runtime limit set or cleared (its event recorded)."""
        await self._write(partial(admin.set_limit, cfg=self.config, now=now, change=change))
        self._rules_changed(limits=True)

    async def set_guarantee(
        self, now: datetime, team: str, window: Window, floor_musd: int | None, by: int | None
    ) -> None:
        """Keep (``None``: stop keeping) a share of a global window for a team."""
        body = partial(admin.set_guarantee, cfg=self.config, now=now, team=team, window=window)
        await self._write(partial(body, floor_musd=floor_musd, by=by))
        self._rules_changed(limits=True)

    async def limit_warnings(self, now: datetime) -> list[str]:
        """Lines naming each global window the teams' or plans' limits oversubscribe."""
        return await self._read(partial(admin.limit_warnings, cfg=self.config, now=now))

    async def team_add(self, now: datetime, name: str, user_id: int) -> str | None:
        """Put ``user_id`` in team ``name``; returns the team they left, if any."""
        return await self._write(partial(admin.team_add, now=now, name=name, user_id=user_id))

    async def team_remove(self, now: datetime, name: str, user_id: int) -> bool:
        """Remove ``user_id`` from ``name``; ``False`` if they were not in it."""
        del now
        return await self._write(partial(admin.team_remove, name=name, user_id=user_id))

    async def teams(self) -> dict[str, list[int]]:
        """Team name → sorted member ids."""
        return await self._read(teams)

    async def set_plan(
        self, now: datetime, user_id: int, plan: str | None, until: datetime | None, by: int | None
    ) -> None:
        """Put a user on a plan until ``until`` (``plan`` ``None``: the default plan)."""
        body = partial(admin.set_plan, cfg=self.config, now=now, user_id=user_id)
        await self._write(partial(body, plan=plan, until=until, by=by))

    async def record_message(self, now: datetime, user_id: int) -> int:
        """Count a message against USER_DAILY_MESSAGES; returns today's count (grouped;
        the day's counter row locked first, so two processes never both take the last).

        Raises:
            HoldRefused: reason messages (the refused message is not counted).
        """
        day = window_keys(now, self.config.tz).day_key
        return await self._write(
            partial(admin.record_message, cfg=self.config, now=now, user_id=user_id),
            Write(durable=False, message_user=user_id, message_day=day),
        )

    # -- the wallet (budget.storage.sql.wallet) ---------------------------------------
    async def wallet_credit(
        self, now: datetime, charge_id: str, user_id: int, stars: int, musd_per_star: int
    ) -> WalletCredit:
        """Credit a wallet once per charge id (durable: money taken is booked)."""
        body = partial(wallet.credit, cfg=self.config, now=now, charge_id=charge_id)
        return await self._write(
            partial(body, user_id=user_id, stars=stars, musd_per_star=musd_per_star)
        )

    async def wallet_refund(
        self, now: datetime, charge_id: str, by: int | None
    ) -> WalletRefund | None:
        """Take a refunded payment's unspent credit out of its wallet, once."""
        body = partial(wallet.refund, cfg=self.config, now=now, charge_id=charge_id, by=by)
        return await self._write(body)

    async def wallet_unrefund(self, now: datetime, charge_id: str) -> bool:
        """Credit again what a refund Telegram refused took out."""
        body = partial(wallet.unrefund, cfg=self.config, now=now, charge_id=charge_id)
        return await self._write(body)

    async def refund_begin(
        self, now: datetime, charge_id: str, by: int | None
    ) -> refunds.RefundRow | WalletRefund | None:
        """Record a top-up's refund as pending and book it, once (:func:`refunds.begin`)."""
        body = partial(refunds.begin, cfg=self.config, now=now, charge_id=charge_id, by=by)
        return await self._write(partial(body, process_id=self.process_id))

    async def refund_begin_plan(
        self, now: datetime, charge_id: str, user_id: int, stars: int, by: int | None
    ) -> refunds.RefundRow:
        """Record a plan payment's refund as pending, once (:func:`refunds.begin_plan`)."""
        body = partial(refunds.begin_plan, now=now, charge_id=charge_id, user_id=user_id)
        return await self._write(partial(body, stars=stars, by=by, process_id=self.process_id))

    async def refund_claim(self, charge_id: str, dead_before: float) -> bool:
        """Hold a pending refund for this process (:func:`refunds.claim`)."""
        body = partial(refunds.claim, charge_id=charge_id, process_id=self.process_id)
        return await self._write(partial(body, dead_before=dead_before))

    async def refund_finish(self, now: datetime, charge_id: str, telegram: str) -> bool:
        """Mark this process's pending refund done (:func:`refunds.finish`)."""
        body = partial(refunds.finish, now=now, charge_id=charge_id, telegram=telegram)
        return await self._write(partial(body, process_id=self.process_id))

    async def refund_abandon(self, now: datetime, charge_id: str) -> bool:
        """Undo this process's pending refund Telegram refused (:func:`refunds.abandon`)."""
        body = partial(refunds.abandon, cfg=self.config, now=now, charge_id=charge_id)
        return await self._write(partial(body, process_id=self.process_id))

    async def refund_release(self, charge_id: str) -> bool:
        """Drop this process's claim on a pending refund (:func:`refunds.release`)."""
        body = partial(refunds.release, charge_id=charge_id, process_id=self.process_id)
        return await self._write(body)

    async def refund_row(self, charge_id: str) -> refunds.RefundRow | None:
        """A refund as it stands (:func:`refunds.row`)."""
        return await self._read(partial(refunds.row, charge_id=charge_id))

    async def refunds_pending(self) -> list[str]:
        """Pending refunds' charge ids, oldest first (:func:`refunds.pending`)."""
        return await self._read(refunds.pending)

    async def wallet_state(self, user_id: int) -> WalletState:
        """One user's wallet now."""
        return await self._read(partial(wallet.state, user_id=user_id))

    async def wallet_credits(self, user_id: int | None, limit: int) -> list[tuple[object, ...]]:
        """Credits, newest first (:func:`budget.storage.sql.wallet.user_credits`)."""
        return await self._read(partial(wallet.user_credits, user_id=user_id, limit=limit))

    # -- reports ---------------------------------------------------------------------
    async def status(self, now: datetime) -> LedgerStatus:
        """The whole ledger now."""
        return await self._read(partial(reports.status, cfg=self.config, now=now))

    async def hold_entry(self, hold_id: str) -> HoldEntry | None:
        """One hold's booking, ``None`` when there is no such hold."""
        return await self._read(partial(reports.hold_entry, hold_id=hold_id))

    async def user_status(self, now: datetime, user_id: int) -> UserStatus:
        """One user now."""
        body = partial(reports.user_status, cfg=self.config, now=now)
        return await self._read(partial(body, user_id=user_id))

    async def user_plan(self, now: datetime, user_id: int) -> str | None:
        """The plan ``user_id`` is held on now (``None``: no plans)."""
        return await self._read(partial(user_plan, cfg=self.config, user_id=user_id, now=now))

    async def plans_held(self, now: datetime) -> PlansHeld:
        """The plan every user is held on now, in one read."""
        return await self._read(partial(plans_held, cfg=self.config, now=now))

    async def payer_status(self, now: datetime, level: Level, scope: str) -> PayerStatus:
        """One group chat or plan now."""
        body = partial(reports.payer_status, cfg=self.config, now=now)
        return await self._read(partial(body, level=level, scope=scope))

    async def team_status(self, now: datetime, name: str) -> TeamStatus:
        """One team now."""
        return await self._read(partial(reports.team_status, cfg=self.config, now=now, name=name))

    async def top_users(self, now: datetime, n: int) -> list[tuple[int, int, int]]:
        """Top ``n`` users today: ``(user_id, settled µUSD, held µUSD)``."""
        return await self._read(partial(reports.top_users, cfg=self.config, now=now, n=n))

    async def spend_per_hour(
        self, now: datetime, hours: int
    ) -> dict[str, list[tuple[datetime, int]]]:
        """Settled µUSD per hour by series (``global``, ``team:<n>``, ``provider:<n>``)."""
        body = partial(reports.spend_per_hour, cfg=self.config, now=now)
        return await self._read(partial(body, hours=hours))

    async def audit(self) -> dict[str, Any]:
        """Bucket totals recomputed from the holds: ``{"mismatches": [...],
        "held_total": int, "buckets": [(level, win, settled, held, late), …]}``
        (empty mismatches = consistent; tests and reconciliation)."""
        return await self._read(reports.audit)

    # -- retention -------------------------------------------------------------------
    async def prune_batch(self, table: str, before_day: str, batch: int) -> retention.PrunedBatch:
        """Prune up to ``batch`` rows of ``table`` (``budget_holds``, ``budget_events``,
        ``budget_operations``, ``budget_requests``, ``budget_messages``) of ledger days
        before ``before_day``, keeping their sums (:mod:`budget.storage.sql.retention`);
        one durable step alone in its transaction (SQLite: its commit and fsync shared
        with no hot-path step; ``docs/decisions/286-pruning-waits-for-an-idle-writer.md``).

        Raises:
            KeyError: ``table`` is not one of those.
        """
        body: Body[retention.PrunedBatch]
        if table == "budget_holds":
            body = partial(retention.prune_holds, before_day=before_day, batch=batch)
        elif table == "budget_events":
            body = partial(retention.prune_events, before_day=before_day, batch=batch)
        else:
            body = partial(retention.prune_plain, table=table, before_day=before_day, batch=batch)
        return await self._write(body, PRUNE)

    async def claim_round(self, now: datetime, job: str, day: str) -> bool:
        """Claim ``job``'s round for ledger day ``day`` (once per day per database)."""
        body = partial(retention.claim_round, job=job, day=day, process_id=self.process_id)
        return await self._write(partial(body, now=now.timestamp()), GROUPED)

    async def apply_corrections(self, now: datetime, plan: CorrectionPlan) -> ApplyResult:
        """Book reconciliation corrections in one transaction (the rules:
        :mod:`budget.books.corrections`; the plan's holds, their buckets and
        operations locked first)."""
        hold_ids = tuple(sorted({item.hold_id for item in plan.items}))
        body = partial(apply_corrections, cfg=self.config, now=now, plan=plan)
        return await self._write(body, Write(hold_ids=hold_ids))
