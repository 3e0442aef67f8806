"""The start of a hold: an operation admitted, its requests counted, each attempt's
ceiling held — and what an operation has booked or may still spend.

:class:`LedgerHolds` is a base of :class:`budget.ledger.Ledger` (the methods are the
ledger's own: same store, same clock, same storage-failure handling through
``_guarded``), apart so that a hold's start reads on its own, as :mod:`budget.settle`
holds its end. Money is integer µUSD; times come from the ledger's clock.
"""

from __future__ import annotations

import contextlib
import uuid
from datetime import datetime
from typing import TYPE_CHECKING

from budget.admission import DeferredAdmissions
from budget.errors import HoldRefused
from budget.part import LedgerPart
from budget.policy.rules import check_user_id
from budget.pricing.prices import PriceCard
from budget.protocol import HoldTicket, OperationTicket, RequestTicket
from budget.storage.store import Admission, HoldPrice, PricedHold, RefusedStep
from budget.types import Origin, RefusalReason

__all__ = ["LedgerHolds"]


class LedgerHolds(LedgerPart):
    """A hold's start on a :class:`~budget.ledger.Ledger` (module docstring).

    Every async method may raise :class:`~budget.errors.LedgerUnavailable` (fail
    closed), as the ledger's other methods.
    """

    __slots__ = ()

    _card: PriceCard
    _deferred: DeferredAdmissions
    _holding: set[str]

    if TYPE_CHECKING:

        async def record_message(self, user_id: int) -> int: ...

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

    async def _take(self, op: OperationTicket) -> None:
        """Take over ``op`` at the ledger's first call on it when it was opened as a
        value (:meth:`~budget.protocol.OperationTicket.open`; else nothing): as
        :meth:`begin_operation` with ``deferred=True`` would have, with its id.

        Raises:
            HoldRefused: admitted at once (a store that does not defer admission, or
                after a refused deferred admission) and refused; it stays untaken.
            ValueError: a user or chat id outside the signed 64-bit range.
        """
        opening = op.opening
        if opening is None or opening.taken:
            return
        check_user_id(op.user_id)
        if op.chat_id is not None:
            check_user_id(op.chat_id, "chat id")
        caps = self.config.operation_caps[op.origin]
        if self.store.defers_admission and not self._deferred.admit_now:
            self._deferred.adopt(op, caps.max_musd, caps.max_requests, opening.count_message)
            opening.count_message = False  # the admission's step counts it (or its end)
            opening.taken = True
            return
        if self.store.defers_admission:  # after a refusal: the message counted in its step
            await self._admit_alone(op, caps.max_musd, caps.max_requests)
            return
        if opening.count_message:
            await self.record_message(op.user_id)
            opening.count_message = False
        admission = Admission(
            op.operation_id,
            op.user_id,
            op.origin,
            caps.max_musd,
            caps.max_requests,
            chat_id=op.chat_id,
        )
        await self._guarded(self.store.begin_operation(self.clock.now(), admission))
        opening.taken = True
        self._deferred.admit_now = False

    async def _admit_alone(self, op: OperationTicket, max_musd: int, max_requests: int) -> None:
        """Admit ``op`` at once where admissions are deferred but the last one was
        refused (a kill switch, a user over the rate: refusals come in runs), its message
        counted in the same store step (:func:`budget.storage.sql.holds.admit` without a
        hold): one step, not a count and an admission after it.

        Raises:
            HoldRefused: refused; ``op`` stays untaken (its message counted unless the
                daily message cap refused it).
        """
        opening = op.opening
        assert opening is not None
        admission = Admission(
            op.operation_id,
            op.user_id,
            op.origin,
            max_musd,
            max_requests,
            count_message=opening.count_message,
            chat_id=op.chat_id,
        )
        try:
            await self._guarded(self.store.admit(self.clock.now(), admission, None))
        except HoldRefused as refused:
            if refused.refusal.reason is not RefusalReason.MESSAGES:
                opening.count_message = False  # counted in the refused step
            raise
        opening.count_message = False
        opening.taken = True
        self._deferred.admit_now = False

    async def _admit(
        self,
        admission: Admission | None,
        hold: PricedHold | None = None,
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
        opening = op.opening
        if opening is not None and not opening.taken:  # opened, never used: nothing to end
            opening.taken = True
            if opening.count_message:
                with contextlib.suppress(HoldRefused):
                    await self.record_message(op.user_id)
            return
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
        opening = op.opening
        if opening is not None and not opening.taken:
            return 0  # opened, never used: nothing was ever held
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
        await self._take(op)
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
        request_id: str | RequestTicket,
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

        ``request_id``: a request counted by :meth:`begin_request`, or a
        :class:`~budget.protocol.RequestTicket`, counted first when it was not yet (as
        :meth:`begin_request`: its refusals ``loop`` and ``operation_cap``); an operation
        opened as a value is taken over first (:meth:`_take`). So one message's walk
        enters the ledger twice: this, and the settle that ends it.

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
                ``limit``/``busy`` with level, window, scope and ``resets_at``; a
                request counted here: ``loop``, ``operation_cap``; an operation taken
                over here: ``inflight``, ``rate``, ``messages``.
            UnknownOperation: ``op`` ended or expired.
            BudgetConfigError: a paid model without a price.
        """
        if max_tokens < 1:
            raise ValueError("max_tokens is mandatory (>= 1): without it there is no ceiling")
        if input_tokens < 0:
            raise ValueError("input_tokens must be >= 0")
        await self._take(op)
        if isinstance(request_id, RequestTicket):
            if request_id.request_id is None:
                request_id.request_id = await self.begin_request(op, request_id.fingerprint)
            request_id = request_id.request_id
        now = self.clock.now()
        price = self._price(now, provider, model, input_tokens, max_tokens, input_bound_tokens)
        hold = PricedHold(
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
        await self._take(op)
        await self._admit(self._deferred.waiting(op.operation_id))
        return await self._guarded(
            self.store.remaining_musd(self.clock.now(), op.operation_id, provider)
        )
