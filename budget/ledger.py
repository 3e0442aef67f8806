"""The reservation ledger: every LLM attempt holds its ceiling here before it is sent.

:class:`Ledger` implements :class:`budget.protocol.LedgerPort` on top of any
:class:`budget.storage.base.LedgerStore` (opened from the database URL by
:func:`budget.storage.open_store`). Money is integer µUSD; times come from the injected
:class:`~budget.kernel.clock.Clock`.

Life cycle::

    ledger = Ledger.open("sqlite+aiosqlite:///data/kopek.db", config, prices, clock)
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
from collections.abc import Awaitable
from datetime import datetime
from typing import TypeVar

from budget.admin import LedgerAdmin
from budget.admission import DeferredAdmissions
from budget.config import LedgerConfig
from budget.errors import BudgetConfigError, HoldRefused, LedgerUnavailable
from budget.kernel.clock import Clock
from budget.kernel.failure_log import FailureLog
from budget.kernel.tasks import cancel_and_wait
from budget.notices import KillListener, LedgerNotices, LostListener
from budget.policy.rules import check_user_id
from budget.pricing.prices import PriceCard
from budget.protocol import HoldTicket, OperationTicket
from budget.settle import LedgerSettle
from budget.storage import open_store
from budget.storage.base import LedgerStore
from budget.storage.store import (
    Admission,
    HoldPrice,
    HoldRequest,
    RefusedStep,
    SettleRequest,
)
from budget.types import Origin, RefusalReason

__all__ = ["Ledger"]

log = logging.getLogger(__name__)

_T = TypeVar("_T")


class Ledger(LedgerSettle, LedgerAdmin):
    """The ledger. Use :meth:`open` to build one on a database URL.

    Args:
        store: the storage backend (owns the database connection).
        config: limits and knobs (``store.config`` must be the same object).
        prices: the price card (ceilings, actual costs, list-price equivalents).
        clock: the one clock.
        on_auto_kill: awaited in a task once when the burn-rate trigger trips.
        sweep_previous_on_start: expire, on :meth:`start`, every hold and operation
            left by another process (one bot process per SQLite file; a PostgreSQL
            store sweeps only dead processes' whatever this says).

    Every async method may raise :class:`~budget.errors.LedgerUnavailable` (the
    database could not be written: fail closed, make no provider call).
    """

    __slots__ = (
        "_card",
        "_closed",
        "_deferred",
        "_holding",
        "_notices",
        "_sweep_previous",
        "_sweeper",
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
        self._notices = LedgerNotices(on_auto_kill, on_unavailable)
        self._sweep_previous = sweep_previous_on_start
        self._sweeper: asyncio.Task[None] | None = None
        self._closed = False
        self._unsettled: dict[str, SettleRequest] = {}
        #: operations whose admission waits for their first hold (``deferred``)
        self._deferred = DeferredAdmissions()
        #: operations of this process granted a hold, until they end (:meth:`held_any`)
        self._holding: set[str] = set()

    @classmethod
    def open(
        cls,
        url: str,
        config: LedgerConfig,
        prices: PriceCard,
        clock: Clock,
        *,
        on_auto_kill: KillListener | None = None,
        on_unavailable: LostListener | None = None,
    ) -> Ledger:
        """A ledger on the database ``url`` names (:func:`budget.storage.open_store`: a
        SQLite file, or a PostgreSQL database shared with other processes); schema from
        Alembic. Nothing is connected before :meth:`start`."""
        return cls(
            open_store(url, config, clock),
            config,
            prices,
            clock,
            on_auto_kill=on_auto_kill,
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
        self._notices.tripped(out.auto_killed)
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
        self._notices.tripped(out.auto_killed)
        return out.expired

    async def close(self) -> None:
        """Stop the sweeper and close the store (idempotent)."""
        if self._closed:
            return
        self._closed = True
        await cancel_and_wait(self._sweeper)
        self._sweeper = None
        await self._notices.drain()
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
        count_message: bool = False,
        chat_id: int | None = None,
    ) -> OperationTicket:
        """Admit an operation and take one of the user's in-flight slots.

        Checks, in order: kill switch (global, team, user), USER_MAX_INFLIGHT,
        USER_MAX_PER_MINUTE (or the user's plan's caps). The slot is freed by
        :meth:`end_operation` or expires with the operation's last hold. The user's
        team and plan at admission fix the levels of the operation's holds.

        Args:
            chat_id: the group or supergroup the work is for: its holds are held on the
                group's level too (``None``: a private chat, a digest).
            max_musd / max_requests: the operation's caps; default: the origin's.
            deferred: where the store :attr:`~budget.storage.base.LedgerStore.defers_admission`
                (SQLite), admit it together with its first request and first hold, in
                the hold's step (:mod:`budget.admission`): this returns at once
                (``team`` ``None``), and the admission's refusals (``kill``,
                ``inflight``, ``rate``) are raised by the first :meth:`reserve`
                instead, which then creates nothing. Any other call on it admits it
                first. Ignored on other stores, and after a deferred admission was
                refused until an admission passes again.
            count_message: first count the user's message against
                USER_DAILY_MESSAGES (:meth:`record_message`); deferred, in the same
                step as the admission (its ``messages`` refusal then comes from the
                first :meth:`reserve`), or when it ends if no hold was ever asked
                (``docs/decisions/132-two-ledger-steps.md``).

        Raises:
            HoldRefused: reason ``messages``, ``kill``, ``inflight`` or ``rate``
                (``resets_at`` = when the oldest start leaves the rolling minute).
            ValueError: ``user_id`` outside the signed 64-bit range.
        """
        check_user_id(user_id)
        if chat_id is not None:
            check_user_id(chat_id, "chat id")
        caps = self.config.operation_caps[origin]
        max_musd = caps.max_musd if max_musd is None else max_musd
        max_requests = caps.max_requests if max_requests is None else max_requests
        if deferred and self.store.defers_admission and not self._deferred.admit_now:
            return self._deferred.defer(
                user_id, origin, max_musd, max_requests, count_message, chat_id
            )
        if count_message:
            await self.record_message(user_id)
        admission = Admission(
            uuid.uuid4().hex, user_id, origin, max_musd, max_requests, chat_id=chat_id
        )
        op = await self._guarded(self.store.begin_operation(self.clock.now(), admission))
        self._deferred.admit_now = False
        return op

    async def _admit(
        self,
        admission: Admission | None,
        hold: HoldRequest | None = None,
        now: datetime | None = None,
    ) -> HoldTicket | None:
        """Admit a deferred operation (``None``: not one) with its pending first request
        and ``hold``, if any, in one store step.

        Returns:
            the granted hold, or ``None`` when no hold was asked.

        Raises:
            HoldRefused: the admission, the request or the hold was refused (a refused
                admission created nothing and stays deferred).
        """
        if admission is None:
            return None
        now = self.clock.now() if now is None else now
        try:
            outcome = await self._guarded(self.store.admit(now, admission, hold))
        except HoldRefused as refused:
            if hold is not None:  # admit at once until an admission passes again
                self._deferred.admit_now = True
            if refused.refusal.reason is not RefusalReason.MESSAGES:
                admission.count_message = False  # counted in the refused step
            raise
        self._deferred.admitted(admission.operation_id)  # it exists from here on
        if isinstance(outcome, RefusedStep):
            raise HoldRefused(outcome.refusal)
        return outcome

    async def end_operation(self, op: OperationTicket) -> None:
        """Free the operation's in-flight slot. Idempotent. A deferred operation never
        admitted (no hold was asked) is only forgotten, its message counted
        (``count_message``; a cap reached then refuses nothing: the work is over)."""
        self._holding.discard(op.operation_id)
        waiting = self._deferred.forget(op.operation_id)
        if waiting is not None:
            if waiting.count_message:
                with contextlib.suppress(HoldRefused):
                    await self.record_message(waiting.user_id)
            return
        await self._guarded(self.store.end_operation(self.clock.now(), op.operation_id))

    def held_any(self, op: OperationTicket) -> bool:
        """Whether ``op`` was granted a hold (until it ends): without one no provider
        call was made for it, so a step that failed closed can be tried again whole."""
        return op.operation_id in self._holding

    async def operation_booked_musd(self, op: OperationTicket) -> int:
        """Money booked for ``op`` (µUSD): settled actuals + ceilings still held or
        booked at expiry; 0 when nothing could be charged. Works after
        :meth:`end_operation` too.

        Raises:
            LedgerUnavailable: the ledger could not be read.
            UnknownOperation: no such operation.
        """
        if self._deferred.waiting(op.operation_id) is not None:
            return 0  # not admitted: nothing was ever held
        return await self.store.operation_booked_musd(op.operation_id)

    async def begin_request(self, op: OperationTicket, fingerprint: str) -> str:
        """Count a new request in ``op``; returns its id.

        Raises:
            HoldRefused: ``loop`` (same fingerprint already in this operation) or
                ``operation_cap`` (max requests reached); both are recorded.
            UnknownOperation: ``op`` ended or expired.
        """
        first = self._deferred.first_request(op.operation_id, fingerprint)
        if first is not None:
            return first  # recorded with the admission, in the first hold's step
        await self._admit(self._deferred.waiting(op.operation_id))
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
        origin: Origin | None = None,
    ) -> HoldTicket:
        """Hold the ceiling of one attempt on every level and window, or nothing.

        ceiling = input_tokens × input rate + max_tokens × output rate (rounded up;
        0 µUSD for a free-tier provider, whose hold still counts for the kill
        switch and the operation). ``input_tokens`` is the (calibrated) estimate.

        ``origin``: the hold's own origin when it is not its operation's (``summary``:
        a history summary folded inside a chat message's operation); ``None``: the
        operation's.

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
        price = self._price(now, provider, model, input_tokens, max_tokens, input_bound_tokens)
        hold = HoldRequest(
            op.operation_id, request_id, provider, model, input_tokens, max_tokens, price, origin
        )
        admission = self._deferred.waiting(op.operation_id)
        if admission is not None:  # admission, first request and hold in one step
            ticket = await self._admit(admission, hold, now)
            assert ticket is not None  # a hold was asked
        else:
            ticket = await self._guarded(self.store.reserve(now, hold))
        self._holding.add(op.operation_id)
        return ticket

    def _price(
        self,
        now: datetime,
        provider: str,
        model: str,
        input_tokens: int,
        max_tokens: int,
        bound: int | None,
    ) -> HoldPrice:
        """A hold's price at ``now``: its ceiling, list ceiling, and the margin of
        ``bound`` (the provable input bound, tokens) over the estimate (µUSD)."""
        ceiling = self._card.ceiling_musd(provider, model, input_tokens, max_tokens, now)
        listed = self._card.list_ceiling_musd(provider, model, input_tokens, max_tokens, now)
        margin = 0
        if bound is not None and bound > input_tokens:
            margin = max(
                0, self._card.ceiling_musd(provider, model, bound, max_tokens, now) - ceiling
            )
        return HoldPrice(ceiling, listed, margin, self._card.version)

    async def remaining_musd(self, op: OperationTicket, provider: str) -> int | None:
        """Smallest remaining µUSD over the levels a hold at ``provider`` would touch,
        the operation's remaining cap included (never ``None`` since an operation
        always has a cap; typed ``None``-able per the port)."""
        await self._admit(self._deferred.waiting(op.operation_id))
        return await self._guarded(
            self.store.remaining_musd(self.clock.now(), op.operation_id, provider)
        )

    async def _guarded(self, step: Awaitable[_T]) -> _T:
        """Await a store step; tells admins once per reason when storage fails."""
        try:
            return await step
        except LedgerUnavailable as exc:
            exc.lasting = bool(self.store.lost)
            if not self._closed:
                reason = self.store.lost or self._failure_kind(exc)
                self._notices.unavailable(reason, self.store.location)
            raise

    def _failure_kind(self, exc: LedgerUnavailable) -> str:
        """``timeout`` on PostgreSQL when a deadline ran out (a lock another session
        holds, no pool connection in time), else ``server`` (a server that cannot be
        reached or refuses the ledger's queries); ``storage`` on SQLite (read-only,
        full disk, I/O error)."""
        if self.store.name != "postgresql":
            return "storage"
        return "timeout" if exc.timed_out else "server"

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

    def __repr__(self) -> str:
        return (
            f"Ledger(store={self.store.name}:{self.store.location}, tz={self.config.tz!r}, "
            f"closed={self._closed})"
        )
