"""What an answered message still writes once its reply is sent: the answer's settle
(which ends the operation and stores the calibration sample in its step) and the
conversation's turns (docs/decisions/314-the-settle-after-the-reply.md).

The reply waits for the one durable write before the provider call (the hold), not for
these: they are queued together after the reply's ``sendMessage``, so on SQLite they
ride one writer group (and one commit) with the intake's finish. Until the settle is
written the hold stays held, its ceiling counted in every window: a process that dies
in between leaves the hold to the sweep, which books the ceiling (estimated) — the
books say more than was spent, never less.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from budget.errors import BudgetError
from budget.protocol import LedgerPort, PendingSettle

__all__ = ["AfterReply"]

log = logging.getLogger(__name__)


class AfterReply:
    """The writes an answer leaves for after its reply; each runs once.

    Args:
        ledger: the ledger that granted the answer's hold.
        pending: the answer's settle (``None``: the cascade settled it already).
        remember: stores the conversation's turns (``None``: nothing to store).
    """

    __slots__ = ("_ledger", "_pending", "_remember")

    def __init__(
        self,
        ledger: LedgerPort,
        pending: PendingSettle | None,
        remember: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self._ledger = ledger
        self._pending = pending
        self._remember = remember

    def __repr__(self) -> str:
        hold = self._pending.hold_id if self._pending is not None else None
        return f"AfterReply(settle={hold!r}, remember={self._remember is not None})"

    @property
    def settled(self) -> bool:
        """The settle was written (or tried), or there was none to write."""
        return self._pending is None

    async def settle(self) -> None:
        """Write the settle now, if not yet (a ``/cost`` footer reads the booked entry;
        a message that tried more than one provider asks the ledger what it booked).
        Never raises for storage: a settle that failed is kept by the ledger for its
        next sweep (``LedgerUnavailable``); on any other ledger error the operation is
        ended here, and the hold is booked at its ceiling when it expires."""
        pending, self._pending = self._pending, None
        if pending is None:
            return
        try:
            await self._ledger.settle(
                pending.hold_id,
                pending.usage,
                estimated=pending.estimated,
                ends=pending.ends,
                calibration=pending.calibration,
            )
        except BudgetError:
            log.exception("settle of hold %s failed", pending.hold_id)
            if pending.ends is not None:
                try:
                    await self._ledger.end_operation(pending.ends)
                except BudgetError:
                    log.exception("could not end operation %s", pending.ends.operation_id)

    async def run(self) -> None:
        """The turns stored (queued first), then the settle: on SQLite both are queued
        in the same turn of the loop, one writer group. Never raises but cancellation:
        a turn that cannot be stored is logged (the answer was sent)."""
        remember, self._remember = self._remember, None
        try:
            if remember is not None:
                await remember()
        except Exception:  # the reply is out: a lost turn is logged, the settle still runs
            log.exception("the conversation's turns were not stored")
        finally:
            await self.settle()
