"""The reservation ledger: every LLM attempt holds its ceiling here before it is sent.

:class:`Ledger` implements :class:`budget.protocol.LedgerPort` on top of any
:class:`budget.storage.store.LedgerStore` (e.g. :class:`budget.storage.sqlite.store.SqliteStore`:
one writer thread, one ``BEGIN IMMEDIATE`` transaction per step). Money is integer
µUSD; times come from the injected :class:`~budget.kernel.clock.Clock`.

Life cycle::

    ledger = Ledger.sqlite("data/kopek.db", config, prices, clock)
    await ledger.start()      # sweeps holds of a previous process, starts the sweeper
    ...                       # begin_operation / begin_request / reserve / settle / release
    await ledger.close()

Money is committed when :meth:`Ledger.reserve` returns: the ceiling is held on every
level until :meth:`Ledger.settle` or :meth:`Ledger.release`, or until the hold
expires ``hold_ttl_s`` seconds after the grant.

Expiry (the periodic sweeper, or :meth:`Ledger.start` sweeping the holds of a
crashed process) never forgets money: the provider may well have been paid, so
the hold is booked as *settled at its bound* (ceiling plus admission margin: never less
than the provider can bill), *flagged estimated*, in the windows
fixed at its grant, and counts as a call and as spend of its provider, against
every limit and for the auto-kill trigger. A settle arriving later *corrects* the
booking (− bound + actual, once, reported as a late settle); a release arriving
later takes the bound back out (the provider was never reached). Worked timeline
(TTL 300 s, ceiling 447 µUSD, no admission margin: the input bound was the count)::

    12:00:00  reserve      held 447, settled 0
    12:00:01  (kill -9 while the request is at the provider)
    12:01:00  start()      held 0, settled 447 (estimated), provider 1 call
    12:06:00  settle(120)  held 0, settled 120, late 120 — nothing counted twice
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Awaitable, Callable, Coroutine
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

from budget.admin import LedgerAdmin
from budget.config import LedgerConfig
from budget.errors import BudgetConfigError, HoldRefused, LedgerUnavailable, UnknownHold
from budget.kernel.clock import Clock
from budget.kernel.failure_log import FailureLog
from budget.kernel.tasks import cancel_and_wait
from budget.policy.rules import check_user_id, interrupted_usage
from budget.pricing.prices import PriceCard
from budget.protocol import HoldTicket, OperationTicket
from budget.status import KillState
from budget.storage.sqlite.store import SqliteStore
from budget.storage.store import Admission, LedgerStore, RefusedStep, SettleOutcome, SweepOutcome
from budget.types import Origin, Usage

__all__ = ["KillListener", "Ledger", "LostListener"]

log = logging.getLogger(__name__)

_T = TypeVar("_T")

#: Called (as a task) when the automatic trigger trips the kill switch.
KillListener = Callable[[KillState], Coroutine[Any, Any, None]]
#: Called (as a task) once per reason when storage fails: ``"deleted"``/``"replaced"``
#: (the database path no longer names the open file) or ``"storage"`` (read-only,
#: full disk, I/O error).
LostListener = Callable[[str], Coroutine[Any, Any, None]]

#: Settles kept for the next sweep after a storage failure, at most (the rest are
#: booked at their bounds by the sweep, estimated, as before).
MAX_UNSETTLED = 10_000


class Ledger(LedgerAdmin):
    """The ledger. Use :meth:`sqlite` to build one on a SQLite file.

    Args:
        store: the storage backend (owns the database connection).
        config: limits and knobs (``store.config`` must be the same object).
        prices: the price card (ceilings, actual costs, list-price equivalents).
        clock: the one clock.
        on_auto_kill: awaited in a task once when the burn-rate trigger trips.
        sweep_previous_on_start: expire, on :meth:`start`, every hold and operation
            left by another process (one bot process per database).

    Every async method may raise :class:`~budget.errors.LedgerUnavailable` (the
    database could not be written: fail closed, make no provider call).
    """

    __slots__ = (
        "_admit_now",
        "_card",
        "_closed",
        "_deferred",
        "_notify_tasks",
        "_on_auto_kill",
        "_on_unavailable",
        "_sweep_previous",
        "_sweeper",
        "_told",
        "_unsettled",
        "clock",
        "config",
        "store",
    )

    def __init__(
        self,
        store: LedgerStore,
        config: LedgerConfig,
        prices: PriceCard,
        clock: Clock,
        *,
        on_auto_kill: KillListener | None = None,
        sweep_previous_on_start: bool = True,
        on_unavailable: LostListener | None = None,
    ) -> None:
        if store.config is not config:
            raise BudgetConfigError("store and ledger must share one LedgerConfig")
        self.store = store
        self.config = config
        self._card = prices
        self.clock = clock
        self._on_auto_kill = on_auto_kill
        self._sweep_previous = sweep_previous_on_start
        self._sweeper: asyncio.Task[None] | None = None
        self._notify_tasks: set[asyncio.Task[None]] = set()
        self._closed = False
        self._on_unavailable = on_unavailable
        self._told: set[str] = set()
        self._unsettled: dict[str, tuple[Usage | Callable[[int, int], Usage], bool]] = {}
        #: operations whose admission waits for their first hold (SQLite, ``deferred``)
        self._deferred: dict[str, Admission] = {}
        #: the last deferred admission was refused: admit at once until one passes
        self._admit_now = False

    @classmethod
    def sqlite(
        cls,
        path: str | Path,
        config: LedgerConfig,
        prices: PriceCard,
        clock: Clock,
        *,
        on_auto_kill: KillListener | None = None,
        sweep_previous_on_start: bool = True,
        on_unavailable: LostListener | None = None,
    ) -> Ledger:
        """A ledger on the SQLite file ``path`` (schema from Alembic revision 0001_ledger)."""
        store = SqliteStore(path, config, process_id=uuid.uuid4().hex)
        return cls(
            store,
            config,
            prices,
            clock,
            on_auto_kill=on_auto_kill,
            sweep_previous_on_start=sweep_previous_on_start,
            on_unavailable=on_unavailable,
        )

    @classmethod
    def postgres(
        cls,
        url: str,
        config: LedgerConfig,
        prices: PriceCard,
        clock: Clock,
        *,
        on_auto_kill: KillListener | None = None,
        on_unavailable: LostListener | None = None,
    ) -> Ledger:
        """A ledger on the PostgreSQL database ``url`` (``postgresql+asyncpg://…``),
        shared with other processes: only dead processes' holds are swept
        (:class:`budget.storage.postgres.store.PgStore`)."""
        from budget.storage.postgres.store import PgStore  # asyncpg only when PostgreSQL is used

        store = PgStore(url, config, process_id=uuid.uuid4().hex, clock=clock)
        return cls(
            store,
            config,
            prices,
            clock,
            on_auto_kill=on_auto_kill,
            sweep_previous_on_start=False,
            on_unavailable=on_unavailable,
        )

    @property
    def prices(self) -> PriceCard:
        """The price card (``describe()`` gives the start-up log lines)."""
        return self._card

    # -- life cycle ----------------------------------------------------------------
    async def start(self, *, run_sweeper: bool = True) -> int:
        """Open the store, expire holds of a previous process, start the sweeper.

        Each hold expired here is booked at its bound (ceiling plus admission margin),
        flagged estimated (see the
        module docstring); the booking may trip the automatic kill switch.

        Returns:
            how many holds were expired at start.
        """
        await self.store.open()
        out = await self._guarded(self.store.sweep(self.clock.now(), self._sweep_previous))
        if out.expired:
            log.warning(
                "ledger start: expired %d holds left by a previous process; booked %d µUSD"
                " at their bounds (ceiling plus admission margin), estimated, until settled",
                out.expired,
                out.booked_musd,
            )
        self._after_sweep(out)
        if run_sweeper and self._sweeper is None:
            self._sweeper = asyncio.create_task(self._sweep_loop(), name="ledger-sweeper")
        return out.expired

    async def _sweep_loop(self) -> None:
        failures = FailureLog(log, "ledger sweep")  # an outage: one line per kind
        while True:
            await self.clock.sleep(self.config.sweep_interval_s)
            try:
                await self.sweep()
            except Exception as exc:  # noqa: BLE001 - logged; the next round tries again
                failures.failed(exc)
            else:
                failures.ok()

    async def sweep(self) -> int:
        """Expire every hold past its TTL now; returns how many.

        Each is booked as settled at its bound (ceiling plus admission margin), flagged
        estimated, in the windows
        fixed at its grant (provider spend and calls included), and its expiry is
        recorded now; a later settle/release corrects it. May trip the automatic
        kill switch.

        Raises:
            LedgerUnavailable: storage failed, or the database path no longer names
                the open file (admins are told once; no hold is granted again).
        """
        await self._retry_unsettled()
        out = await self._guarded(self.store.sweep(self.clock.now()))
        if out.expired:
            log.warning(
                "ledger sweeper expired %d orphaned holds; booked %d µUSD at their bounds"
                " (ceiling plus admission margin), estimated, until settled",
                out.expired,
                out.booked_musd,
            )
        self._after_sweep(out)
        return out.expired

    async def close(self) -> None:
        """Stop the sweeper and close the store (idempotent)."""
        if self._closed:
            return
        self._closed = True
        await cancel_and_wait(self._sweeper)
        self._sweeper = None
        for task in list(self._notify_tasks):
            with contextlib.suppress(Exception):
                await task
        await self.store.close()

    # -- LedgerPort ------------------------------------------------------------------
    async def begin_operation(
        self,
        user_id: int,
        origin: Origin,
        *,
        max_musd: int | None = None,
        max_requests: int | None = None,
        deferred: bool = False,
    ) -> OperationTicket:
        """Admit an operation and take one of the user's in-flight slots.

        Checks, in order: kill switch (global, team, user), USER_MAX_INFLIGHT,
        USER_MAX_PER_MINUTE. The slot is freed by :meth:`end_operation` or expires
        with the operation's last hold.

        Args:
            max_musd / max_requests: the operation's caps; default: the origin's.
            deferred: on SQLite, admit it together with its first request and first
                hold, in the hold's step (one writer round trip and one commit instead
                of three, issue 10): this returns at once (``team`` ``None``), and the
                admission's refusals (``kill``, ``inflight``, ``rate``) are raised by
                the first :meth:`reserve` instead, which then creates nothing. Until
                admitted the operation takes no slot; ended before any hold (no
                provider was tried), it leaves no row. Any other call on it admits it
                first. Ignored on other stores, and after a deferred admission was
                refused until an admission passes again (admitted at once: a refusal
                then costs no fsync).

        Raises:
            HoldRefused: reason ``kill``, ``inflight`` or ``rate`` (``resets_at`` =
                when the oldest start leaves the rolling minute).
            ValueError: ``user_id`` outside the signed 64-bit range.
        """
        check_user_id(user_id)
        caps = self.config.operation_caps[origin]
        max_musd = caps.max_musd if max_musd is None else max_musd
        max_requests = caps.max_requests if max_requests is None else max_requests
        if deferred and not self._admit_now and isinstance(self.store, SqliteStore):
            op_id = uuid.uuid4().hex
            self._deferred[op_id] = Admission(op_id, user_id, origin, max_musd, max_requests)
            return OperationTicket(op_id, user_id, origin, None)
        op = await self._guarded(
            self.store.begin_operation(self.clock.now(), user_id, origin, max_musd, max_requests)
        )
        self._admit_now = False
        return op

    async def _admit(self, op: OperationTicket) -> None:
        """Admit a deferred operation now (and its pending first request), if it is one.

        Raises:
            HoldRefused: the admission or the request was refused.
        """
        admission = self._deferred.get(op.operation_id)
        if admission is None or not isinstance(self.store, SqliteStore):
            return
        outcome = await self._guarded(self.store.admit(self.clock.now(), admission, None))
        self._deferred.pop(op.operation_id, None)  # it exists from here on
        if isinstance(outcome, RefusedStep):
            raise HoldRefused(outcome.refusal)

    async def end_operation(self, op: OperationTicket) -> None:
        """Free the operation's in-flight slot. Idempotent. A deferred operation never
        admitted (no hold was asked) is only forgotten."""
        if self._deferred.pop(op.operation_id, None) is not None:
            return
        await self._guarded(self.store.end_operation(self.clock.now(), op.operation_id))

    async def operation_booked_musd(self, op: OperationTicket) -> int:
        """Money booked for ``op`` (µUSD): settled actuals + ceilings still held or
        booked at expiry; 0 when nothing could be charged. Works after
        :meth:`end_operation` too.

        Raises:
            LedgerUnavailable: the ledger could not be read.
            UnknownOperation: no such operation.
        """
        if op.operation_id in self._deferred:
            return 0  # not admitted: nothing was ever held
        return await self.store.operation_booked_musd(op.operation_id)

    async def begin_request(self, op: OperationTicket, fingerprint: str) -> str:
        """Count a new request in ``op``; returns its id.

        Raises:
            HoldRefused: ``loop`` (same fingerprint already in this operation) or
                ``operation_cap`` (max requests reached); both are recorded.
            UnknownOperation: ``op`` ended or expired.
        """
        admission = self._deferred.get(op.operation_id)
        if admission is not None and admission.request_id is None:
            # recorded with the admission, in the first hold's step
            admission.fingerprint = fingerprint
            admission.request_id = uuid.uuid4().hex
            return admission.request_id
        await self._admit(op)
        return await self._guarded(
            self.store.begin_request(self.clock.now(), op.operation_id, fingerprint)
        )

    async def reserve(
        self,
        op: OperationTicket,
        request_id: str,
        *,
        provider: str,
        model: str,
        input_tokens: int,
        max_tokens: int,
        input_bound_tokens: int | None = None,
    ) -> HoldTicket:
        """Hold the ceiling of one attempt on every level and window, or nothing.

        ceiling = input_tokens × input rate + max_tokens × output rate (rounded up;
        0 µUSD for a free-tier provider, whose hold still counts for the kill
        switch and the operation). ``input_tokens`` is the (calibrated) estimate.

        ``input_bound_tokens`` is a provable upper bound of the input the provider
        can bill (:func:`budget.pricing.tokens.input_bound`). The hold is granted only when
        its *bound* ceiling fits every bucket after the bound excess (``margin``) of
        every other outstanding hold; it then holds the estimated ceiling and keeps
        the margin out of the buckets until it ends. So the settled spend of a
        bucket never exceeds its limit while providers bill at most the bound and
        ``max_tokens`` — however wrong the estimate was.

        Raises:
            ValueError: ``max_tokens`` < 1 (no ceiling without it) or negative input.
            HoldRefused: ``kill``; ``operation_cap`` (the operation's max cost);
                ``limit``/``busy`` with level, window, scope and ``resets_at``.
            UnknownOperation: ``op`` ended or expired.
            BudgetConfigError: a paid model without a price.
        """
        if max_tokens < 1:
            raise ValueError("max_tokens is mandatory (>= 1): without it there is no ceiling")
        if input_tokens < 0:
            raise ValueError("input_tokens must be >= 0")
        now = self.clock.now()
        ceiling = self._card.ceiling_musd(provider, model, input_tokens, max_tokens, now)
        listed = self._card.list_ceiling_musd(provider, model, input_tokens, max_tokens, now)
        margin = 0
        if input_bound_tokens is not None and input_bound_tokens > input_tokens:
            bound = self._card.ceiling_musd(provider, model, input_bound_tokens, max_tokens, now)
            margin = max(0, bound - ceiling)
        admission = self._deferred.get(op.operation_id)
        if admission is not None and isinstance(self.store, SqliteStore):
            hold = {
                "request_id": request_id,
                "provider": provider,
                "model": model,
                "input_tokens": input_tokens,
                "max_tokens": max_tokens,
                "ceiling_musd": ceiling,
                "list_ceiling_musd": listed,
                "price_version": self._card.version,
                "margin_musd": margin,
            }
            # admission, first request and hold in one step; a refused admission
            # (raised) created nothing and stays deferred
            try:
                outcome = await self._guarded(self.store.admit(now, admission, hold))
            except HoldRefused:
                # Admission refusals come in runs (a kill switch, a user over the
                # rate): until an admission passes again, admit at once — a refusal
                # there is a grouped step, here it shared the hold's fsync.
                self._admit_now = True
                raise
            self._deferred.pop(op.operation_id, None)
            if isinstance(outcome, RefusedStep):
                raise HoldRefused(outcome.refusal)
            assert outcome is not None  # a hold was asked
            return outcome
        return await self._guarded(
            self.store.reserve(
                now,
                op.operation_id,
                request_id,
                provider,
                model,
                input_tokens,
                max_tokens,
                ceiling,
                listed,
                self._card.version,
                margin,
            )
        )

    async def remaining_musd(self, op: OperationTicket, provider: str) -> int | None:
        """Smallest remaining µUSD over the levels a hold at ``provider`` would touch,
        the operation's remaining cap included (never ``None`` since an operation
        always has a cap; typed ``None``-able per the port)."""
        await self._admit(op)
        return await self._guarded(
            self.store.remaining_musd(self.clock.now(), op.operation_id, provider)
        )

    async def _guarded(self, step: Awaitable[_T]) -> _T:
        """Await a store step; tells admins once per reason when storage fails."""
        try:
            return await step
        except LedgerUnavailable:
            if not self._closed:
                self._unavailable(self.store.lost or self._failure_kind())
            raise

    def _failure_kind(self) -> str:
        """``server`` on PostgreSQL (a server that cannot be reached or refuses the
        ledger's queries), ``storage`` on SQLite (read-only, full disk, I/O error)."""
        return "server" if self.store.name == "postgresql" else "storage"

    def _unavailable(self, reason: str) -> None:
        if reason in self._told or reason == "fenced":  # the store logged it (pg_store)
            return
        self._told.add(reason)
        if reason == "storage":
            log.error("ledger storage failed (read-only, full or broken): failing closed")
        elif reason == "server":
            log.error(
                "ledger database server %s cannot be reached or refused the ledger's"
                " queries: failing closed until it answers",
                self.store.location,
            )
        else:
            log.error(
                "ledger database file %s was %s while open: failing closed, no new holds",
                self.store.location,
                reason,
            )
        if self._on_unavailable is not None:
            task = asyncio.create_task(self._on_unavailable(reason))
            self._notify_tasks.add(task)
            task.add_done_callback(self._notify_tasks.discard)

    async def calibration(self) -> dict[tuple[str, str], tuple[int, int]]:
        """Persisted estimate calibration: ``(provider, model) → (reported ÷ counted
        input tokens in parts per million, samples)``."""
        return await self._guarded(self.store.calibration())

    async def record_calibration(
        self, provider: str, model: str, ratio_ppm: int, samples: int
    ) -> None:
        """Persist one model's calibration (see :meth:`calibration`)."""
        await self._guarded(
            self.store.record_calibration(self.clock.now(), provider, model, ratio_ppm, samples)
        )

    def _pricer(
        self, provider: str, model: str, usage: Usage, at: datetime
    ) -> tuple[int, int | None]:
        return (
            self._card.actual_musd(provider, model, usage, at),
            self._card.list_actual_musd(provider, model, usage, at),
        )

    def _tripped(self, state: KillState | None) -> None:
        if state is None:
            return
        log.error("ledger kill switch tripped: %s", state.reason)
        if self._on_auto_kill is not None:
            task = asyncio.create_task(self._on_auto_kill(state))
            self._notify_tasks.add(task)
            task.add_done_callback(self._notify_tasks.discard)

    def _after_sweep(self, outcome: SweepOutcome) -> None:
        self._tripped(outcome.auto_killed)

    def _after_settle(self, outcome: SettleOutcome) -> int:
        self._tripped(outcome.auto_killed)
        return outcome.actual_musd

    async def _settle(
        self, hold_id: str, usage: Usage | Callable[[int, int], Usage], estimated: bool
    ) -> SettleOutcome:
        """Settle, or keep the usage to settle at the next sweep when storage fails (the
        usage is known only to this process: without it the hold would be booked at
        its ceiling, estimated, for good)."""
        try:
            return await self._guarded(
                self.store.settle(self.clock.now(), hold_id, usage, estimated, self._pricer)
            )
        except LedgerUnavailable:
            if len(self._unsettled) < MAX_UNSETTLED:
                self._unsettled[hold_id] = (usage, estimated)
            raise

    async def _retry_unsettled(self) -> None:
        """Settle the holds whose settle failed (oldest first); stop at the first that
        still fails (storage is still gone)."""
        for hold_id, (usage, estimated) in list(self._unsettled.items()):
            try:
                outcome = await self.store.settle(
                    self.clock.now(), hold_id, usage, estimated, self._pricer
                )
            except LedgerUnavailable:
                return
            except UnknownHold:
                outcome = None
            del self._unsettled[hold_id]
            if outcome is not None:
                log.info("settled hold %s after the storage failure", hold_id)
                self._after_settle(outcome)

    async def settle(self, hold_id: str, usage: Usage, *, estimated: bool = False) -> int:
        """Replace the hold by its actual cost, booked in the hold's own windows.

        Idempotent: a second settle (or a settle after release) books nothing and
        returns the first actual (0 after a release). A hold that already expired
        (booked at its bound, estimated) is corrected to the actual: − bound +
        actual in the same windows, exactly once, reported as a late settle. An
        actual above the ceiling is booked in full and counted. May trip the
        automatic kill switch. When storage fails, ``LedgerUnavailable`` is raised and
        the usage is kept: each sweep settles it once storage is back (up to
        :data:`MAX_UNSETTLED` kept settles; a restart loses them, and then the hold is
        booked at its bound, estimated, as without this).

        Returns:
            the actual cost in µUSD (0 for a free-tier provider).

        Raises:
            UnknownHold: ``hold_id`` was never granted.
        """
        outcome = await self._settle(hold_id, usage, estimated)
        return self._after_settle(outcome)

    async def settle_interrupted(
        self, hold_id: str, reported: Usage | None, received_output_tokens: int | None
    ) -> int:
        """Settle a call cut short (shutdown, timeout, cancellation, broken stream).

        The provider's ``reported`` usage if any; else the hold's input tokens plus
        ``received_output_tokens`` (counted from what arrived); else the ceiling.
        Always flagged "estimated" for reconciliation. Returns the µUSD booked.

        Raises:
            UnknownHold: ``hold_id`` was never granted.
        """

        def usage_of(input_tokens: int, max_tokens: int) -> Usage:
            return interrupted_usage(input_tokens, max_tokens, reported, received_output_tokens)

        outcome = await self._settle(hold_id, usage_of, True)
        return self._after_settle(outcome)

    async def release(self, hold_id: str) -> None:
        """Return a hold that spent nothing (the provider was never reached).

        A held hold: its ceiling is returned. An expired hold (booked at its
        ceiling, estimated): the booked ceiling is taken back out of settled spend,
        since this release is the first word from the caller on it. No-op after a
        settle or a release.

        Raises:
            UnknownHold: ``hold_id`` was never granted.
        """
        await self._guarded(self.store.release(self.clock.now(), hold_id))

    def __repr__(self) -> str:
        return (
            f"Ledger(store={self.store.name}:{self.store.location}, tz={self.config.tz!r}, "
            f"closed={self._closed})"
        )
