"""The ledger's side of a reconciliation: the attempts of one provider key booked in a
period, summed per 15-minute slot and model (exact bookings) and listed one by one
(bookings flagged *estimated*, booked at the bound — ceiling plus admission margin —
after a crash, at the ceiling after a timeout).

Read through :func:`budget.books.export.booked_attempts`, the same rows ``/budget export``
writes, and :func:`budget.books.pruned.pruned_sums`, the exact sums retention kept of
the attempts it pruned (estimated bookings are never pruned); costs in µUSD, tokens as
the provider reported them. A prepaid wallet's credits are not attempts and never
enter this side (money users paid in, not provider spend); an attempt a wallet paid is
an attempt like any other (``docs/decisions/240-the-wallet-is-a-balance-level.md``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime

from sqlalchemy.ext.asyncio import AsyncEngine

from budget.books.export import booked_attempts
from budget.books.periods import Period, rates_at
from budget.books.pruned import pruned_sums
from budget.pricing.prices import PriceCard
from budget.types import Usage

__all__ = ["EstimatedBooking", "LedgerSide", "TokenSums", "load_ledger"]

_SLOT_S = 900  # every UTC offset in use is a multiple of 15 minutes


@dataclass(slots=True)
class TokenSums:
    """Token and cost sums of attempts (tokens as reported; ``cost_musd`` in µUSD)."""

    input_tokens: int = 0
    cached_input_tokens: int = 0
    output_tokens: int = 0
    reasoning_tokens: int = 0
    cost_musd: int = 0
    attempts: int = 0

    def add_usage(self, i: int, c: int, o: int, r: int, cost: int) -> None:
        """Count one attempt: input, cached input, output, reasoning tokens, µUSD."""
        self.input_tokens += i
        self.cached_input_tokens += c
        self.output_tokens += o
        self.reasoning_tokens += r
        self.cost_musd += cost
        self.attempts += 1

    def add(self, other: TokenSums) -> None:
        """Add another sum to this one."""
        self.input_tokens += other.input_tokens
        self.cached_input_tokens += other.cached_input_tokens
        self.output_tokens += other.output_tokens
        self.reasoning_tokens += other.reasoning_tokens
        self.cost_musd += other.cost_musd
        self.attempts += other.attempts

    @property
    def tokens(self) -> int:
        """Input + output tokens (the period step's measure)."""
        return self.input_tokens + self.output_tokens


@dataclass(frozen=True, slots=True)
class EstimatedBooking:
    """An attempt booked without the provider's usage and flagged estimated (at its
    bound, ceiling plus admission margin, after a crash; at its ceiling after a timeout).

    Attributes:
        hold_id, model: which.
        at: its grant (epoch seconds).
        cost_musd: what the ledger books for it now (its bound or ceiling, or a
            correction).
        ceiling_musd: its ceiling (a correction never goes above it, nor above
            ``cost_musd`` when that is higher: an expired hold's bound).
        floor_musd: the cost of its input tokens alone (never below it).
        tokens: the tokens it is booked at now (input + output as settled).
        held_tokens: the tokens its hold was sized on (input held + ``max_tokens``).
    """

    hold_id: str
    model: str
    at: float
    cost_musd: int
    ceiling_musd: int
    floor_musd: int
    tokens: int
    held_tokens: int = 0

    @property
    def top_tokens(self) -> int:
        """The most tokens the ledger could book for it: what its hold was sized on,
        or what it is booked at when that is more (an expired hold's bound)."""
        return max(self.tokens, self.held_tokens)

    @property
    def top_musd(self) -> int:
        """The most µUSD the ledger could book for it (what a correction may reach):
        its ceiling, or what it is booked at when that is more (an expired hold's bound,
        ceiling + admission margin)."""
        return max(self.ceiling_musd, self.cost_musd)


@dataclass(slots=True)
class LedgerSide:
    """What the ledger booked for one key: exact sums per 15-minute UTC slot and model,
    and the estimated bookings one by one."""

    exact: dict[int, dict[str, TokenSums]] = field(default_factory=dict)  # slot → model → sums
    estimated: list[EstimatedBooking] = field(default_factory=list)
    models: set[str] = field(default_factory=set)

    def exact_in(self, start: datetime, end: datetime, model: str | None = None) -> TokenSums:
        """Sums of the exact (not estimated) attempts granted in ``[start, end)``."""
        lo, hi = int(start.timestamp()) // _SLOT_S, int(end.timestamp()) // _SLOT_S
        out = TokenSums()
        for slot in range(lo, hi):
            per_model = self.exact.get(slot)
            if per_model is None:
                continue
            if model is None:
                for agg in per_model.values():
                    out.add(agg)
            elif model in per_model:
                out.add(per_model[model])
        return out

    def estimated_in(
        self, start: datetime, end: datetime, model: str | None = None
    ) -> list[EstimatedBooking]:
        lo, hi = start.timestamp(), end.timestamp()
        return [
            e for e in self.estimated if lo <= e.at < hi and (model is None or e.model == model)
        ]


async def load_ledger(
    engine: AsyncEngine, card: PriceCard, key_name: str, start: datetime, end: datetime
) -> LedgerSide:
    side = LedgerSide()
    period = Period("reconcile", "UTC", start, end)
    async for row in booked_attempts(engine, period, key_name=key_name):
        side.models.add(row.model)
        if row.estimated:
            at = datetime.fromtimestamp(row.granted_at, UTC)
            rates = rates_at(card, key_name, row.model, at)
            floor = (
                0
                if rates is None or card.is_free(key_name)
                else rates.actual_musd(Usage(input_tokens=int(row.input_tokens)))
            )
            side.estimated.append(
                EstimatedBooking(
                    hold_id=row.hold_id,
                    model=row.model,
                    at=float(row.granted_at),
                    cost_musd=int(row.actual_musd or 0),
                    ceiling_musd=int(row.ceiling_musd),
                    floor_musd=min(floor, int(row.ceiling_musd)),
                    tokens=int(row.usage_input or 0) + int(row.usage_output or 0),
                    held_tokens=int(row.input_tokens) + int(row.max_tokens),
                )
            )
            continue
        per_model = side.exact.setdefault(int(row.granted_at) // _SLOT_S, {})
        per_model.setdefault(row.model, TokenSums()).add_usage(
            int(row.usage_input or 0),
            int(row.usage_cached_input or 0),
            int(row.usage_output or 0),
            int(row.usage_reasoning or 0),
            int(row.actual_musd or 0),
        )
    async for kept in pruned_sums(engine, period, key_name=key_name):
        side.models.add(kept.model)
        sums = side.exact.setdefault(kept.slot, {}).setdefault(kept.model, TokenSums())
        sums.add(
            TokenSums(
                kept.input_tokens,
                kept.cached_input_tokens,
                kept.output_tokens,
                kept.reasoning_tokens,
                kept.cost_musd,
                kept.attempts,
            )
        )
    return side
