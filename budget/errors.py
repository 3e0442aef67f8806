"""The budget package's error tree.

::

    BudgetError
    ├── HoldRefused            .refusal: Refusal — the ledger said no (a value, not a string)
    │   └── LedgerUnavailable  .timed_out — the ledger could not write; fail closed (reason
    │                          ``unavailable``)
    ├── UnknownHold            .hold_id — settle/release of a hold the ledger never granted
    ├── ProcessFenced          this process was taken for dead by another (PostgreSQL)
    └── BudgetConfigError      bad limits/prices/TTL at start-up (e.g. a paid model with no price)
"""

from __future__ import annotations

from budget.types import Refusal, RefusalReason

__all__ = [
    "BudgetConfigError",
    "BudgetError",
    "HoldRefused",
    "LedgerUnavailable",
    "ProcessFenced",
    "UnknownHold",
]


class BudgetError(Exception):
    """Base of every error raised by ``budget/``."""


class HoldRefused(BudgetError):
    """No hold (or operation/request slot) was granted; nothing was held anywhere.

    Attributes:
        refusal: the structured reason, level, window and reset time.
    """

    def __init__(self, refusal: Refusal) -> None:
        super().__init__(f"refused: {refusal.reason}")
        self.refusal = refusal


class LedgerUnavailable(HoldRefused):
    """The ledger could not record a hold; no provider call may be made.

    Attributes:
        timed_out: a deadline ran out (PostgreSQL: a row lock held by another session
            past the lock timeout, no pool connection within the pool timeout, a
            statement cancelled), rather than a server that cannot be reached.
        lasting: the storage is lost until a restart (no use trying again).
    """

    def __init__(self, *, timed_out: bool = False) -> None:
        super().__init__(Refusal(reason=RefusalReason.UNAVAILABLE))
        self.timed_out = timed_out
        #: set by the ledger when its storage is lost for good (the SQLite file deleted
        #: or replaced under the running bot): trying again cannot succeed before a restart
        self.lasting = False


class UnknownHold(BudgetError):
    """``settle``/``release`` named a hold id the ledger has no record of."""

    def __init__(self, hold_id: str) -> None:
        super().__init__(f"unknown hold {hold_id!r}")
        self.hold_id = hold_id


#: What :class:`ProcessFenced` says unless told otherwise.
FENCED = (
    "this process was taken for dead by another (its heartbeat was late by more than"
    " PROCESS_DEAD_AFTER_SECONDS)"
)


class ProcessFenced(BudgetError):
    """This process was taken for dead by another: its ``budget_processes`` row is gone
    (several processes on one PostgreSQL database; :mod:`budget.storage.postgres.lease`).
    It must not act any more: the ledger grants it nothing (inside the store this is
    raised by a step that found the row gone; its caller sees ``LedgerUnavailable``), and
    the bot's run ends with it (exit code 1, ``bot.app.polling``).

    Args:
        message: what to say (default :data:`FENCED`).
    """

    def __init__(self, message: str = FENCED) -> None:
        super().__init__(message)


class BudgetConfigError(BudgetError):
    """Budget configuration cannot be used (checked at start-up; fail closed)."""
