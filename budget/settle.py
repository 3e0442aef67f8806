"""The end of a hold: settle, settle an interrupted call, release — and the settles kept
across a storage failure, tried again by each sweep.

:class:`LedgerSettle` is a base of :class:`budget.ledger.Ledger` (the methods are the
ledger's own: same store, same clock, same storage-failure handling through
``_guarded``), apart so that a hold's end reads on its own, as :mod:`budget.admin` holds
the admin surface. Money is integer µUSD; times come from the ledger's clock.
"""

from __future__ import annotations

import logging
from datetime import datetime

from budget.errors import LedgerUnavailable, UnknownHold
from budget.notices import LedgerNotices
from budget.part import LedgerPart
from budget.policy.rules import interrupted_usage
from budget.pricing.prices import PriceCard
from budget.protocol import OperationTicket
from budget.storage.store import ActualCost, SettleOutcome, SettleRequest, UsageOf
from budget.types import CalibrationSample, Usage

__all__ = ["MAX_UNSETTLED", "LedgerSettle"]

log = logging.getLogger("budget.ledger")  # the ledger's own lines

#: Settles kept for the next sweep after a storage failure, at most (the rest are
#: booked at their bounds by the sweep, estimated, as before).
MAX_UNSETTLED = 10_000


class LedgerSettle(LedgerPart):
    """A hold's end on a :class:`~budget.ledger.Ledger` (module docstring).

    Every async method may raise :class:`~budget.errors.LedgerUnavailable` (fail
    closed), as the ledger's other methods.
    """

    __slots__ = ()

    _card: PriceCard
    _holding: set[str]
    _notices: LedgerNotices
    _unsettled: dict[str, SettleRequest]

    def _pricer(self, provider: str, model: str, usage: Usage, at: datetime) -> ActualCost:
        return ActualCost(
            self._card.actual_musd(provider, model, usage, at),
            self._card.list_actual_musd(provider, model, usage, at),
        )

    def _after_settle(self, outcome: SettleOutcome) -> int:
        self._notices.tripped(outcome.auto_killed)
        return outcome.actual_musd

    async def _settle(
        self,
        hold_id: str,
        usage: Usage | UsageOf,
        estimated: bool,
        ends: OperationTicket | None = None,
        calibration: CalibrationSample | None = None,
    ) -> SettleOutcome:
        """Settle, or keep the usage to settle at the next sweep when storage fails (the
        usage is known only to this process: without it the hold would be booked at
        its ceiling, estimated, for good)."""
        end = None if ends is None else ends.operation_id
        request = SettleRequest(hold_id, usage, estimated, self._pricer, end, calibration)
        try:
            return await self._guarded(self.store.settle(self.clock.now(), request))
        except LedgerUnavailable:
            if len(self._unsettled) < MAX_UNSETTLED:
                self._unsettled[hold_id] = request
            raise

    async def _retry_unsettled(self) -> None:
        """Settle the holds whose settle failed (oldest first); stop at the first that
        still fails (storage is still gone)."""
        for hold_id, request in list(self._unsettled.items()):
            try:
                outcome = await self.store.settle(self.clock.now(), request)
            except LedgerUnavailable:
                return
            except UnknownHold:
                outcome = None
            del self._unsettled[hold_id]
            if outcome is not None:
                log.info("settled hold %s after the storage failure", hold_id)
                self._after_settle(outcome)

    async def settle(
        self,
        hold_id: str,
        usage: Usage,
        *,
        estimated: bool = False,
        ends: OperationTicket | None = None,
        calibration: CalibrationSample | None = None,
    ) -> int:
        """Replace the hold by its actual cost, booked in the hold's own windows; in the
        same step, end the operation ``ends`` (its last answer: as :meth:`end_operation`)
        and persist ``calibration`` (as :meth:`record_calibration`) —
        ``docs/decisions/132-two-ledger-steps.md``.

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
        outcome = await self._settle(hold_id, usage, estimated, ends, calibration)
        if ends is not None:  # ended in that step: as end_operation
            self._holding.discard(ends.operation_id)
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
