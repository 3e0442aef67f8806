"""The reservation ledger: every LLM attempt holds its ceiling here before it is sent.

:class:`Ledger` implements :class:`budget.protocol.LedgerPort` on top of any
:class:`budget.storage.base.LedgerStore` (opened from the database URL by
:func:`budget.storage.open_store`). Money is integer µUSD; times come from the injected
:class:`~budget.kernel.clock.Clock`.

The hold's start is :mod:`budget.holding`, its end :mod:`budget.settle`, the admin
surface :mod:`budget.admin`, the wallet :mod:`budget.wallet` (the ledger's bases).

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
import logging
from collections.abc import Awaitable
from typing import TypeVar

from budget.admin import LedgerAdmin
from budget.admission import DeferredAdmissions
from budget.config import LedgerConfig
from budget.errors import BudgetConfigError, LedgerUnavailable
from budget.holding import LedgerHolds
from budget.kernel.clock import Clock
from budget.kernel.failure_log import FailureLog
from budget.kernel.tasks import cancel_and_wait
from budget.notices import KillListener, LedgerNotices, LostListener
from budget.pricing.prices import PriceCard
from budget.settle import LedgerSettle
from budget.storage import open_store
from budget.storage.base import LedgerStore
from budget.storage.store import SettleRequest
from budget.wallet import LedgerWallet

__all__ = ["Ledger"]

log = logging.getLogger(__name__)

_T = TypeVar("_T")


class Ledger(LedgerHolds, LedgerSettle, LedgerAdmin, LedgerWallet):
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
