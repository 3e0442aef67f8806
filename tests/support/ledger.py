"""An in-memory fake of :class:`budget.protocol.LedgerPort` for ``llm/`` unit tests.

It keeps the rules the cascade depends on — all-or-nothing holds against one
global limit (with ``busy`` when outstanding holds are what blocks), a kill flag,
the loop check, idempotent settle/release — and records every hold so tests can
assert that holds were released or settled. Prices come from any
``PriceCardPort``; :class:`FakePrices` is a flat table in USD per 1M tokens
(so µUSD = tokens × rate, as in ``budget.pricing.prices``).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from datetime import datetime
from decimal import ROUND_HALF_EVEN, Decimal

from budget.errors import BudgetConfigError, HoldRefused, UnknownHold
from budget.kernel.clock import Clock
from budget.protocol import HoldTicket, OperationTicket, PriceCardPort, RequestTicket
from budget.types import CalibrationSample, Level, Origin, Refusal, RefusalReason, Usage, Window
from tests.support.clocks import ManualClock

__all__ = ["FakeHold", "FakeLedger", "FakePrices", "Rates"]


@dataclass(frozen=True, slots=True)
class Rates:
    """USD per 1M tokens."""

    input: Decimal
    output: Decimal
    cached_input: Decimal | None = None


class FakePrices:
    """Flat rates per (provider, model); providers in ``free`` cost 0 µUSD.

    A paid (provider, model) without rates raises
    :class:`~budget.errors.BudgetConfigError`, as the real price card does (never $0)."""

    def __init__(self, rates: dict[tuple[str, str], Rates], free: set[str]) -> None:
        self.rates = rates
        self.free = free

    def _rates(self, provider: str, model: str) -> Rates:
        found = self.rates.get((provider, model))
        if found is None:  # as budget.pricing.prices.PriceCard: an unknown paid model is loud
            raise BudgetConfigError(f"no price for paid model {provider}:{model}")
        return found

    def ceiling_musd(
        self, provider: str, model: str, input_tokens: int, max_tokens: int, at: datetime
    ) -> int:
        if self.is_free(provider):
            return 0
        r = self._rates(provider, model)
        return math.ceil(Decimal(input_tokens) * r.input + Decimal(max_tokens) * r.output)

    def actual_musd(self, provider: str, model: str, usage: Usage) -> int:
        if self.is_free(provider):
            return 0
        r = self._rates(provider, model)
        cached = min(usage.cached_input_tokens, usage.input_tokens)
        cached_rate = r.input if r.cached_input is None else r.cached_input
        exact = (
            Decimal(usage.input_tokens - cached) * r.input
            + Decimal(cached) * cached_rate
            + Decimal(usage.output_tokens) * r.output
        )
        return int(exact.quantize(Decimal(1), rounding=ROUND_HALF_EVEN))

    def max_tokens_within(
        self, provider: str, model: str, input_tokens: int, budget_musd: int, at: datetime
    ) -> int:
        if self.is_free(provider):
            return 2**31 - 1
        r = self._rates(provider, model)
        left = Decimal(budget_musd) - Decimal(input_tokens) * r.input
        if left < 0:
            return 0
        if r.output == 0:
            return 2**31 - 1
        return int(left / r.output)

    def is_free(self, provider: str) -> bool:
        return provider in self.free


@dataclass(slots=True)
class FakeHold:
    """One hold as the fake recorded it."""

    ticket: HoldTicket
    op_id: str
    request_id: str
    input_tokens: int
    max_tokens: int
    input_bound_tokens: int | None = None
    margin_musd: int = 0  # provable-bound ceiling − ceiling, kept out of the limit while held
    state: str = "held"  # held | settled | released
    usage: Usage | None = None
    actual_musd: int = 0
    estimated: bool = False


@dataclass(slots=True)
class _Op:
    ticket: OperationTicket
    fingerprints: set[str] = field(default_factory=set)
    requests: int = 0


class FakeLedger:
    """In-memory ledger.

    Args:
        prices: price card.
        clock: time for grants.
        global_limit_musd: one global limit (``None`` = none).
        max_requests: per-operation request cap.
    """

    def __init__(
        self,
        prices: PriceCardPort,
        clock: Clock | None = None,
        *,
        global_limit_musd: int | None = None,
        max_requests: int = 8,
    ) -> None:
        self.prices = prices
        self.clock: Clock = clock or ManualClock()
        self.global_limit_musd = global_limit_musd
        self.max_requests = max_requests
        self.killed = False
        self.holds: dict[str, FakeHold] = {}
        self.refusals: list[Refusal] = []
        self.calibrations: dict[tuple[str, str], tuple[int, int]] = {}
        self._ops: dict[str, _Op] = {}
        self._ids = itertools.count(1)

    # -- LedgerPort ------------------------------------------------------------
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
        del deferred, count_message  # admitted at once, as on PostgreSQL; no message cap
        if self.killed:
            raise self._refuse(Refusal(RefusalReason.KILL))
        ticket = OperationTicket(f"op{next(self._ids)}", user_id, origin, None, chat_id)
        self._ops[ticket.operation_id] = _Op(ticket)
        return ticket

    def _take(self, op: OperationTicket) -> None:
        """Admit an operation opened as a value at its first call, as the ledger does."""
        if op.opening is None or op.opening.taken:
            return
        if self.killed:
            raise self._refuse(Refusal(RefusalReason.KILL))
        op.opening.taken = True
        self._ops[op.operation_id] = _Op(op)

    async def end_operation(self, op: OperationTicket) -> None:
        if op.opening is not None:
            op.opening.taken = True
        self._ops.pop(op.operation_id, None)

    def held_any(self, op: OperationTicket) -> bool:
        return any(h.op_id == op.operation_id for h in self.holds.values())

    async def operation_booked_musd(self, op: OperationTicket) -> int:
        booked = 0
        for h in self.holds.values():
            if h.op_id == op.operation_id:
                booked += h.ticket.ceiling_musd if h.state == "held" else 0
                booked += h.actual_musd if h.state == "settled" else 0
        return booked

    async def begin_request(self, op: OperationTicket, fingerprint: str) -> str:
        self._take(op)
        state = self._ops[op.operation_id]
        if fingerprint in state.fingerprints:
            raise self._refuse(Refusal(RefusalReason.LOOP))
        if state.requests >= self.max_requests:
            raise self._refuse(Refusal(RefusalReason.OPERATION_CAP))
        state.fingerprints.add(fingerprint)
        state.requests += 1
        return f"{op.operation_id}-r{state.requests}"

    def _spent(self) -> int:
        return sum(h.actual_musd for h in self.holds.values() if h.state == "settled")

    def _held(self) -> int:
        """Held ceilings plus the provable-bound margins kept out while held."""
        return sum(
            h.ticket.ceiling_musd + h.margin_musd for h in self.holds.values() if h.state == "held"
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
        self._take(op)
        if isinstance(request_id, RequestTicket):
            if request_id.request_id is None:
                request_id.request_id = await self.begin_request(op, request_id.fingerprint)
            request_id = request_id.request_id
        if self.killed:
            raise self._refuse(Refusal(RefusalReason.KILL))
        at = self.clock.now()
        ceiling = self.prices.ceiling_musd(provider, model, input_tokens, max_tokens, at)
        margin = 0
        if input_bound_tokens is not None and input_bound_tokens > input_tokens:
            bound = self.prices.ceiling_musd(provider, model, input_bound_tokens, max_tokens, at)
            margin = max(0, bound - ceiling)
        if self.global_limit_musd is not None:
            spent, held = self._spent(), self._held()
            if ceiling + margin > self.global_limit_musd - spent - held:
                busy = ceiling + margin <= self.global_limit_musd - spent
                raise self._refuse(
                    Refusal(
                        RefusalReason.BUSY if busy else RefusalReason.LIMIT,
                        Level.GLOBAL,
                        Window.DAY,
                        busy=busy,
                    )
                )
        ticket = HoldTicket(f"h{next(self._ids)}", provider, model, ceiling, ceiling, at)
        self.holds[ticket.hold_id] = FakeHold(
            ticket,
            op.operation_id,
            request_id,
            input_tokens,
            max_tokens,
            input_bound_tokens,
            margin_musd=margin,
        )
        return ticket

    async def remaining_musd(self, op: OperationTicket, provider: str) -> int | None:
        self._take(op)
        if self.global_limit_musd is None:
            return None
        return max(0, self.global_limit_musd - self._spent() - self._held())

    async def settle(
        self,
        hold_id: str,
        usage: Usage,
        *,
        estimated: bool = False,
        ends: OperationTicket | None = None,
        calibration: CalibrationSample | None = None,
    ) -> int:
        hold = self.holds.get(hold_id)
        if hold is None:
            raise UnknownHold(hold_id)
        if ends is not None:
            await self.end_operation(ends)
        if calibration is not None:
            await self.record_calibration(
                calibration.provider, calibration.model, calibration.ratio_ppm, calibration.samples
            )
        if hold.state != "held":
            return hold.actual_musd
        t = hold.ticket
        if isinstance(self.prices, FakePrices):
            actual = self.prices.actual_musd(t.provider, t.model, usage)
        else:
            actual = self.prices.actual_musd(t.provider, t.model, usage, t.granted_at)  # type: ignore[attr-defined]
        hold.state, hold.usage, hold.actual_musd, hold.estimated = (
            "settled",
            usage,
            actual,
            estimated,
        )
        return actual

    async def calibration(self) -> dict[tuple[str, str], tuple[int, int]]:
        return dict(self.calibrations)

    async def record_calibration(
        self, provider: str, model: str, ratio_ppm: int, samples: int
    ) -> None:
        self.calibrations[(provider, model)] = (ratio_ppm, samples)

    async def release(self, hold_id: str) -> None:
        hold = self.holds.get(hold_id)
        if hold is None:
            raise UnknownHold(hold_id)
        if hold.state == "held":
            hold.state = "released"

    # -- test helpers -------------------------------------------------------------
    def _refuse(self, refusal: Refusal) -> HoldRefused:
        self.refusals.append(refusal)
        return HoldRefused(refusal)

    @property
    def outstanding(self) -> list[FakeHold]:
        """Holds neither settled nor released."""
        return [h for h in self.holds.values() if h.state == "held"]

    @property
    def spent_musd(self) -> int:
        """Total settled µUSD."""
        return self._spent()

    def holds_for(self, provider: str) -> list[FakeHold]:
        """Holds taken at ``provider``, in order."""
        return [h for h in self.holds.values() if h.ticket.provider == provider]
