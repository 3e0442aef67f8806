"""What crosses the ledger's storage seam: the values a step is given and answers with.

The steps themselves are :class:`budget.storage.base.LedgerStore`'s (one base, two
engines); a store is opened from its URL by :func:`budget.storage.open_store`. Money is
integer µUSD; times are the ledger clock's aware datetimes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol, TypeVar

from budget.errors import BudgetError, HoldRefused
from budget.kernel.sqlite_writer import StepDeclined
from budget.policy.steps import ActualCost
from budget.status import KillState
from budget.types import CalibrationSample, Level, Origin, Refusal, Usage, Window

__all__ = [
    "CHECKED",
    "DURABLE",
    "GROUPED",
    "ActualCost",
    "Admission",
    "Cursor",
    "HoldPrice",
    "LimitChange",
    "PricedHold",
    "Pricer",
    "RefusedStep",
    "SettleOutcome",
    "SettleRequest",
    "SharedDatabase",
    "SharedTx",
    "SweepOutcome",
    "UnknownOperation",
    "UsageOf",
    "Write",
]

T = TypeVar("T")

#: Prices an actual cost: (provider, model, usage, granted_at) -> its cost, µUSD.
Pricer = Callable[[str, str, Usage, datetime], ActualCost]
#: A hold's usage from its (input_tokens, max_tokens): an interrupted call's rule.
UsageOf = Callable[[int, int], Usage]


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


@dataclass(frozen=True, slots=True)
class HoldPrice:
    """What one hold costs, priced by the ledger's card at its grant.

    Attributes:
        ceiling_musd: held on every bucket (µUSD; 0 for a free-tier provider).
        list_ceiling_musd: the ceiling at list price (µUSD), ``None`` if unknown.
        margin_musd: the bound's excess over the ceiling, kept out of the buckets
            while the hold is held (:func:`budget.policy.rules.with_margins`).
        price_version: the price card's version.
    """

    ceiling_musd: int
    list_ceiling_musd: int | None
    margin_musd: int
    price_version: str


@dataclass(frozen=True, slots=True)
class PricedHold:
    """What one hold asks the store for: a caller's :class:`budget.protocol.HoldRequest`
    in its operation's and request's ids, with its price.

    Attributes:
        operation_id, request_id: where it belongs.
        provider, model: where the attempt goes.
        input_tokens: the estimate held; max_tokens: the output ceiling (tokens).
        price: :class:`HoldPrice`.
        origin: what this hold is for when it differs from its operation's origin
            (``summary``: a history summary inside a chat message's operation);
            ``None``: the operation's.
    """

    operation_id: str
    request_id: str
    provider: str
    model: str
    input_tokens: int
    max_tokens: int
    price: HoldPrice
    origin: Origin | None = None


@dataclass(frozen=True, slots=True)
class SettleRequest:
    """What one settle books.

    Attributes:
        hold_id: the hold.
        usage: the usage, or its rule from the hold's (input_tokens, max_tokens).
        estimated: flag the booking estimated (an interrupted call, a ceiling).
        pricer: prices the usage at the hold's grant time.
        end_operation: also end this operation (its id) in the same step: the answer
            it settles is the operation's last (``docs/decisions/132-two-ledger-steps.md``).
        calibration: also persist this estimate calibration in the same step.
    """

    hold_id: str
    usage: Usage | UsageOf
    estimated: bool
    pricer: Pricer
    end_operation: str | None = None
    calibration: CalibrationSample | None = None


@dataclass(slots=True)
class Admission:
    """An operation to admit (its id chosen by the ledger), or one whose admission is
    deferred to its first hold (one store step instead of three:
    ``docs/decisions/011-sqlite-single-writer.md``; see
    :meth:`budget.ledger.Ledger.begin_operation`).

    Attributes:
        operation_id: the id the operation will have (chosen at once).
        user_id, origin: as for ``begin_operation``.
        max_musd, max_requests: the operation's caps (µUSD; requests).
        fingerprint, request_id: its first request, once ``begin_request`` was asked
            (``None`` before).
        count_message: count the user's message against USER_DAILY_MESSAGES first, in
            the same step (a deferred chat admission: ``docs/decisions/132-two-ledger-steps.md``);
            cleared once it was counted.
        chat_id: the group or supergroup its message came from, which pays along with
            the user (``None``: a private chat, a digest).
    """

    operation_id: str
    user_id: int
    origin: Origin
    max_musd: int
    max_requests: int
    fingerprint: str | None = None
    request_id: str | None = None
    count_message: bool = False
    chat_id: int | None = None


@dataclass(frozen=True, slots=True)
class Write:
    """How a writing step runs (:meth:`budget.storage.base.LedgerStore._write`).

    Attributes:
        durable: on disk before it is answered; ``False``: *grouped* (committed, made
            durable with the next durable step; SQLite: no fsync of its own).
        check_file: first check the storage is still the one opened (SQLite: the path
            still names the open file).
        message_user, message_day: lock first the courtesy message counter row of that
            user and day (where steps run side by side: PostgreSQL; SQLite's write
            lock covers the file).
        hold_ids: lock first these holds, their buckets and operations (``/reconcile
            apply``), in the one lock order.
        alone: SQLite: in a group transaction (a commit, an fsync) of its own, shared
            with no other step (retention's; PostgreSQL: every step is its own).
    """

    durable: bool = True
    check_file: bool = False
    message_user: int | None = None
    message_day: str = ""
    hold_ids: tuple[str, ...] = ()
    alone: bool = False


#: A durable write; a grouped one; a durable one that checks the storage first.
DURABLE, GROUPED, CHECKED = Write(), Write(durable=False), Write(check_file=True)


@dataclass(frozen=True, slots=True)
class LimitChange:
    """A runtime limit set or cleared by an admin.

    Attributes:
        level, scope, window: where (``scope``: user id, team, ``""`` global, provider).
        limit_musd: the new limit (µUSD; ``None`` = no limit at that level/window).
        by: the admin's user id (``None``: not known).
        clear: drop the override (the configured default applies again).
    """

    level: Level
    scope: str
    window: Window
    limit_musd: int | None
    by: int | None
    clear: bool = False


class RefusedStep(StepDeclined):
    """The marker of a refusal inside a store step, private to ``budget.storage`` (its
    callers only ever see :class:`~budget.errors.HoldRefused`): the step refuses with
    nothing held. On SQLite the step wrote its refusal event, which is kept and
    committed (:class:`~budget.kernel.sqlite_writer.StepDeclined`); PostgreSQL's hot
    path rolls the step back, then records the event. Either way the caller gets
    ``HoldRefused(refusal)``.

    Attributes:
        refusal: why (with ``plan``, the user's plan, when given).
        user_id: whose request it was (for the event), if known.
    """

    def __init__(
        self, refusal: Refusal, user_id: int | None = None, plan: str | None = None
    ) -> None:
        if plan:
            refusal = dataclasses.replace(refusal, plan=plan)
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
    admission margin, estimated), the µUSD booked, and whether that booking tripped
    the kill switch."""

    __slots__ = ("auto_killed", "booked_musd", "expired")

    def __init__(self, expired: int, booked_musd: int, auto_killed: KillState | None) -> None:
        self.expired = expired
        self.booked_musd = booked_musd
        self.auto_killed = auto_killed


class SharedTx(Protocol):
    """Runs an async body on one connection of the shared database."""

    async def tx(
        self, now: datetime, body: Callable[[Any], Awaitable[T]], *, single: bool = False
    ) -> T:
        """Run ``body`` in ONE transaction (``single``: one statement)."""
        ...


class SharedDatabase(Protocol):
    """The database several processes share (PostgreSQL), as the ledger's store offers
    it to the replicas' shared state (key circuits, call claims, lanes, signals, update
    rates, the fence): :attr:`budget.storage.base.LedgerStore.shared`.

    Attributes:
        process_id: this process's id (its heartbeat row).
        on_fenced: called once when this process is taken for dead.
    """

    process_id: str
    on_fenced: list[Callable[[], None]]

    async def tx(
        self, now: datetime, body: Callable[[Any], Awaitable[T]], *, single: bool = False
    ) -> T:
        """Run ``body`` on one connection in ONE transaction (retried on conflicts)."""
        ...

    async def confirm_lease(self) -> bool:
        """False once this process was taken for dead."""
        ...

    @property
    def control(self) -> SharedTx:
        """The kill switch's own connection, never queued behind the money path's
        pool (:mod:`budget.storage.postgres.control`): for a control's rows."""
        ...
