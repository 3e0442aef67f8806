"""What the parts of :class:`budget.ledger.Ledger` use of it: :class:`LedgerPart`, the
base of its admin surface (:mod:`budget.admin`) and of a hold's end
(:mod:`budget.settle`)."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TYPE_CHECKING, TypeVar

from budget.config import LedgerConfig
from budget.kernel.clock import Clock
from budget.storage.base import LedgerStore

__all__ = ["LedgerPart"]

_T = TypeVar("_T")


class LedgerPart:
    """The ledger's store and clock, and its storage-failure guard (provided by
    :class:`~budget.ledger.Ledger`: it tells admins once per reason)."""

    __slots__ = ()

    store: LedgerStore
    clock: Clock
    config: LedgerConfig

    if TYPE_CHECKING:

        async def _guarded(self, step: Awaitable[_T]) -> _T: ...
