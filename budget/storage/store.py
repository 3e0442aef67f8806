"""The storage seam of the ledger: what :class:`budget.ledger.Ledger` needs from a backend.

:class:`LedgerStore` is implemented by :class:`budget.storage.sqlite.store.SqliteStore` (one
SQLite file, one writer thread); a PostgreSQL store implements the same methods.
The rules every backend applies (effective limits, buckets, margins, refusals, the
hold state machine, the auto-kill trigger) live in :mod:`budget.policy.rules`; a store
only reads and writes rows, each method in ONE transaction, all or nothing.

Conventions for every method: ``now`` is the ledger clock's aware time; money is
integer µUSD. Every method may raise :class:`~budget.errors.LedgerUnavailable`
(storage failed: the caller fails closed) and never a driver's own exception;
admission steps raise :class:`~budget.errors.HoldRefused` after recording the
refusal event.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from budget.config import LedgerConfig
from budget.errors import BudgetError, HoldRefused
from budget.kernel.sqlite_writer import StepDeclined
from budget.protocol import HoldTicket, OperationTicket
from budget.status import KillState, LedgerStatus, TeamStatus, UserStatus
from budget.types import Level, Origin, Refusal, Usage, Window

if TYPE_CHECKING:
    from budget.books.corrections import ApplyResult
    from budget.books.reconcile import PlannedCorrection

__all__ = [
    "Admission",
    "Cursor",
    "LedgerStore",
    "Pricer",
    "RefusedStep",
    "SettleOutcome",
    "SweepOutcome",
    "UnknownOperation",
]

#: Prices an actual cost: (provider, model, usage, granted_at) -> (actual, list actual) µUSD.
Pricer = Callable[[str, str, Usage, datetime], tuple[int, int | None]]


class UnknownOperation(BudgetError):
    """An operation id the ledger has no open record of (ended, expired or never begun)."""

    def __init__(self, operation_id: str) -> None:
        super().__init__(f"unknown or ended operation {operation_id!r}")
        self.operation_id = operation_id


class Cursor(Protocol):
    """The DB-API cursor subset the ledger's SQL uses (``?`` placeholders):
    ``sqlite3.Cursor``, or :class:`budget.storage.postgres.rows.PgCursor` over asyncpg."""

    @property
    def rowcount(self) -> int: ...

    def execute(self, sql: str, parameters: Any = (), /) -> Any: ...

    def executemany(self, sql: str, seq_of_parameters: Any, /) -> Any: ...

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...


@dataclass(slots=True)
class Admission:
    """An operation whose admission is deferred to its first hold (issue 10: one
    ledger step instead of three; see :meth:`budget.ledger.Ledger.begin_operation`).

    Attributes:
        operation_id: the id the operation will have (chosen at once).
        user_id, origin: as for ``begin_operation``.
        max_musd, max_requests: the operation's caps (µUSD; requests).
        fingerprint, request_id: its first request, once ``begin_request`` was asked
            (``None`` before).
    """

    operation_id: str
    user_id: int
    origin: Origin
    max_musd: int
    max_requests: int
    fingerprint: str | None = None
    request_id: str | None = None


class RefusedStep(StepDeclined):
    """The marker of a refusal inside a store step, private to ``budget.storage`` (its
    callers only ever see :class:`~budget.errors.HoldRefused`): the step refuses with
    nothing held. On SQLite the step wrote its refusal event, which is kept and
    committed (:class:`~budget.kernel.sqlite_writer.StepDeclined`); PostgreSQL's hot
    path rolls the step back, then records the event. Either way the caller gets
    ``HoldRefused(refusal)``.

    Attributes:
        refusal: why.
        user_id: whose request it was (for the event), if known.
    """

    def __init__(self, refusal: Refusal, user_id: int | None = None) -> None:
        super().__init__(HoldRefused(refusal))
        self.refusal = refusal
        self.user_id = user_id


class SettleOutcome:
    """Result of a settle: the actual cost booked and whether the kill switch tripped."""

    __slots__ = ("actual_musd", "auto_killed", "booked")

    def __init__(self, actual_musd: int, booked: bool, auto_killed: KillState | None) -> None:
        self.actual_musd = actual_musd
        self.booked = booked
        self.auto_killed = auto_killed


class SweepOutcome:
    """Result of a sweep: holds expired (each booked at its bound, ceiling plus
    admission margin, estimated), the
    µUSD booked, and whether that booking tripped the kill switch."""

    __slots__ = ("auto_killed", "booked_musd", "expired")

    def __init__(self, expired: int, booked_musd: int, auto_killed: KillState | None) -> None:
        self.expired = expired
        self.booked_musd = booked_musd
        self.auto_killed = auto_killed


class LedgerStore(Protocol):
    """A ledger backend (see the module docstring for the conventions).

    Attributes:
        name: backend name for logs (``"sqlite"``).
        config: the limits and knobs (the ledger's own object).
        process_id: identifies this process's holds and operations.
        location: what the store opened, for logs (a path; never a secret).
        lost: non-empty once storage is gone for good (``"deleted"``,
            ``"replaced"``): every later step raises ``LedgerUnavailable``.
    """

    name: str
    config: LedgerConfig
    process_id: str

    @property
    def location(self) -> str: ...

    @property
    def lost(self) -> str: ...

    async def open(self) -> None:
        """Connect (idempotent)."""
        ...

    async def close(self) -> None:
        """Disconnect (idempotent)."""
        ...

    # -- operations, requests, holds ------------------------------------------------
    async def begin_operation(
        self, now: datetime, user_id: int, origin: Origin, max_musd: int, max_requests: int
    ) -> OperationTicket:
        """Admit an operation (kill, in-flight, rate) and take an in-flight slot."""
        ...

    async def end_operation(self, now: datetime, operation_id: str) -> None:
        """Free the operation's slot (idempotent)."""
        ...

    async def operation_booked_musd(self, operation_id: str) -> int:
        """Settled actuals + ceilings held or booked at expiry of an operation.

        Raises:
            UnknownOperation: never begun.
        """
        ...

    async def begin_request(self, now: datetime, operation_id: str, fingerprint: str) -> str:
        """Count a request in the operation; refuse a repeat fingerprint (loop) or too many."""
        ...

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
        """Hold ``ceiling_musd`` on every level/window at once, or refuse with nothing
        held. Fits when ``ceiling + margin`` fits every bucket after the margins of
        the other outstanding holds (:func:`budget.policy.rules.with_margins`)."""
        ...

    async def remaining_musd(self, now: datetime, operation_id: str, provider: str) -> int | None:
        """Smallest remaining amount over the levels a hold at ``provider`` would
        touch, the operation's remaining cap included."""
        ...

    async def settle(
        self,
        now: datetime,
        hold_id: str,
        usage: Usage | Callable[[int, int], Usage],
        estimated: bool,
        pricer: Pricer,
    ) -> SettleOutcome:
        """Book a hold's actual cost (idempotent; an expired hold is corrected once).
        ``usage`` may be a function of the hold's (input_tokens, max_tokens)."""
        ...

    async def release(self, now: datetime, hold_id: str) -> bool:
        """Return a hold that spent nothing; ``False`` = no-op (already ended)."""
        ...

    async def sweep(self, now: datetime, previous_processes: bool = False) -> SweepOutcome:
        """Expire holds past their TTL (with ``previous_processes``: also every hold
        and operation of another process), each booked at its bound (ceiling plus admission
        margin), estimated."""
        ...

    # -- calibration, kill switch, limits, teams, messages ----------------------------
    async def calibration(self) -> dict[tuple[str, str], tuple[int, int]]:
        """``(provider, model) → (ratio ppm, samples)``."""
        ...

    async def record_calibration(
        self, now: datetime, provider: str, model: str, ratio_ppm: int, samples: int
    ) -> None:
        """Persist one model's calibration (upsert)."""
        ...

    async def set_kill(
        self, now: datetime, kind: str, scope: str, killed: bool, reason: str, by: int | None
    ) -> int:
        """Trip or reset a switch; returns the exposure (µUSD held in that scope)."""
        ...

    async def kill_states(self) -> list[KillState]:
        """Every switch row (tripped or not)."""
        ...

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
        """Persist a runtime limit (``None`` = no limit); ``clear`` restores the default."""
        ...

    async def team_add(self, now: datetime, name: str, user_id: int) -> str | None:
        """Put ``user_id`` in team ``name``; returns the team they left, if any."""
        ...

    async def team_remove(self, now: datetime, name: str, user_id: int) -> bool:
        """Remove ``user_id`` from ``name``; ``False`` if they were not in it."""
        ...

    async def teams(self) -> dict[str, list[int]]:
        """Team name → sorted member ids."""
        ...

    async def record_message(self, now: datetime, user_id: int) -> int:
        """Count a message against USER_DAILY_MESSAGES; returns today's count.

        Raises:
            HoldRefused: reason messages (the refused message is not counted).
        """
        ...

    # -- reports ------------------------------------------------------------------------
    async def status(self, now: datetime) -> LedgerStatus:
        """The whole ledger now."""
        ...

    async def user_status(self, now: datetime, user_id: int) -> UserStatus:
        """One user now."""
        ...

    async def team_status(self, now: datetime, name: str) -> TeamStatus:
        """One team now."""
        ...

    async def top_users(self, now: datetime, n: int) -> list[tuple[int, int, int]]:
        """Top ``n`` users today: ``(user_id, settled µUSD, held µUSD)``."""
        ...

    async def spend_per_hour(
        self, now: datetime, hours: int
    ) -> dict[str, list[tuple[datetime, int]]]:
        """Settled µUSD per hour by series (``global``, ``team:<n>``, ``provider:<n>``)."""
        ...

    async def audit(self) -> dict[str, Any]:
        """Bucket totals recomputed from the holds: ``{"mismatches": [...],
        "held_total": int, "buckets": [(level, win, settled, held, late), …]}``
        (empty mismatches = consistent; tests and reconciliation)."""
        ...

    async def apply_corrections(
        self,
        now: datetime,
        plan: Sequence[PlannedCorrection],
        by_user: int | None,
        file_name: str,
        sha256: str,
    ) -> ApplyResult:
        """Book reconciliation corrections in one transaction
        (see :mod:`budget.books.corrections` for the rules)."""
        ...
