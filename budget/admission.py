"""Deferred admission: an operation admitted together with its first request and its
first hold, in ONE store step, on a store whose steps run one at a time
(:attr:`budget.storage.base.LedgerStore.defers_admission`; why:
``docs/decisions/011-sqlite-single-writer.md``).

:class:`DeferredAdmissions` is the ledger's book of the operations waiting so
(:meth:`budget.ledger.Ledger.begin_operation` with ``deferred=True``, or an operation
opened as a value, :meth:`budget.protocol.OperationTicket.open`); the store step is
:meth:`budget.storage.base.LedgerStore.admit`.
"""

from __future__ import annotations

import uuid

from budget.protocol import OperationTicket
from budget.storage.store import Admission
from budget.types import Origin

__all__ = ["DeferredAdmissions"]


class DeferredAdmissions:
    """The operations of one ledger whose admission waits for their first hold.

    Until admitted, an operation takes no slot and has no row; ended before any hold
    (no provider was tried) it is only forgotten. Admission refusals come in runs (a
    kill switch, a user over the rate): after one, :attr:`admit_now` is set and the
    ledger admits at once until an admission passes again (a refusal there is a grouped
    step; here it shared the hold's fsync).

    Attributes:
        admit_now: the last deferred admission was refused.
    """

    __slots__ = ("_waiting", "admit_now")

    def __init__(self) -> None:
        self._waiting: dict[str, Admission] = {}
        self.admit_now = False

    def __repr__(self) -> str:
        return f"DeferredAdmissions(waiting={len(self._waiting)}, admit_now={self.admit_now})"

    def defer(
        self,
        user_id: int,
        origin: Origin,
        max_musd: int,
        max_requests: int,
        count_message: bool = False,
        chat_id: int | None = None,
    ) -> OperationTicket:
        """A new operation, admitted later (its ``team`` and ``plan`` are ``None`` until
        then); ``count_message``: its user's message is counted in the admission's step."""
        op = OperationTicket(uuid.uuid4().hex, user_id, origin, None, chat_id)
        self.adopt(op, max_musd, max_requests, count_message)
        return op

    def adopt(
        self, op: OperationTicket, max_musd: int, max_requests: int, count_message: bool
    ) -> None:
        """Wait with ``op`` (its id chosen already: one opened as a value) as :meth:`defer`."""
        self._waiting[op.operation_id] = Admission(
            op.operation_id,
            op.user_id,
            op.origin,
            max_musd,
            max_requests,
            count_message=count_message,
            chat_id=op.chat_id,
        )

    def waiting(self, operation_id: str) -> Admission | None:
        """The admission ``operation_id`` waits for, or ``None`` (admitted, or never
        deferred)."""
        return self._waiting.get(operation_id)

    def first_request(self, operation_id: str, fingerprint: str) -> str | None:
        """The id of the operation's first request, recorded with its admission; ``None``
        when the operation is not waiting or already has its first request."""
        admission = self._waiting.get(operation_id)
        if admission is None or admission.request_id is not None:
            return None
        admission.fingerprint = fingerprint
        admission.request_id = uuid.uuid4().hex
        return admission.request_id

    def admitted(self, operation_id: str) -> None:
        """The operation exists from here on (or was ended before it needed to)."""
        self._waiting.pop(operation_id, None)

    def forget(self, operation_id: str) -> Admission | None:
        """End a waiting operation: its admission if it was waiting (no row to end),
        else ``None``."""
        return self._waiting.pop(operation_id, None)
