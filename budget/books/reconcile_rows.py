"""Ledger against export per window and model: the differing rows (the differences CSV),
the per-model sums the *token categories* and *price card* steps read, the totals, and
the corrections ``/reconcile apply`` would book for estimated bookings.

Money is µUSD: the ledger's integers, the export's exact decimals (rounded only in
totals and corrections).
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal

from budget.books.csv_out import Cell
from budget.books.periods import rates_at
from budget.books.reconcile_ledger import EstimatedBooking, LedgerSide, TokenSums
from budget.books.reconcile_period import Bucket, close_tokens
from budget.books.usage_export import UsageLine
from budget.policy.money import round_musd
from budget.pricing.prices import PriceCard
from budget.types import Usage

__all__ = [
    "DIFF_HEADER",
    "Comparison",
    "PlannedCorrection",
    "RowSums",
    "categories_lines",
    "compare_rows",
    "spread",
    "tolerance",
]

DIFF_HEADER: tuple[str, ...] = (
    "bucket",
    "model",
    "ledger_input_tokens",
    "export_input_tokens",
    "ledger_cached_input_tokens",
    "export_cached_input_tokens",
    "ledger_output_tokens",
    "export_output_tokens",
    "ledger_cost_musd",
    "export_cost_musd",
    "ledger_estimated",
)


def tolerance(value: Decimal | int, tolerance_musd: int) -> Decimal:
    """The money gap that still counts as a match: the absolute tolerance or 0.5 % of
    ``value``, whichever is larger (µUSD)."""
    return max(Decimal(tolerance_musd), abs(Decimal(value)) * Decimal("0.005"))


@dataclass(slots=True)
class Comparison:
    """What every step reads: the card, the key, the windows, the export's lines per
    window (UTC start → lines), the ledger's side and the tolerance."""

    card: PriceCard
    key_name: str
    buckets: list[Bucket]
    lines: dict[datetime, list[UsageLine]]
    side: LedgerSide
    tolerance_musd: int

    @property
    def free(self) -> bool:
        """True when the key is a free tier (the ledger books 0 µUSD)."""
        return self.card.is_free(self.key_name)

    def line_cost(self, ln: UsageLine) -> Decimal:
        """The export's cost of a line: as stated, else the card's price of its tokens
        (0 for a free tier or a model the card cannot price)."""
        if ln.cost_musd is not None:
            return ln.cost_musd
        rates = None if self.free else rates_at(self.card, self.key_name, ln.model, ln.start)
        if rates is None:
            return Decimal(0)
        usage = Usage(ln.input_tokens, ln.cached_input_tokens, ln.output_tokens)
        return Decimal(rates.actual_musd(usage))


@dataclass(frozen=True, slots=True)
class PlannedCorrection:
    """One estimated booking's new cost, as ``/reconcile apply`` would book it.

    Attributes:
        hold_id, model: which booking.
        bucket: the export's day/hour label it was spread from.
        old_musd: what the ledger books now.
        new_musd: what it would book.
    """

    hold_id: str
    model: str
    bucket: str
    old_musd: int
    new_musd: int


@dataclass(slots=True)
class RowSums:
    """The per-window, per-model comparison.

    Attributes:
        diff_rows: the differences CSV (header first).
        export_sums, ledger_sums: per model, over the period.
        estimated: per model, estimated bookings met.
        ledger_musd: the ledger's total (µUSD); export_musd: the export's (exact).
        top_musd: the most the ledger could have booked (µUSD): its exact bookings plus
            every estimated one at its top (ceiling or bound).
        plan: the corrections of estimated bookings.
    """

    diff_rows: list[list[Cell]] = field(default_factory=lambda: [list(DIFF_HEADER)])
    export_sums: dict[str, TokenSums] = field(default_factory=dict)
    ledger_sums: dict[str, TokenSums] = field(default_factory=dict)
    estimated: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    ledger_musd: int = 0
    export_musd: Decimal = Decimal(0)
    top_musd: int = 0
    plan: list[PlannedCorrection] = field(default_factory=list)


def spread(target: int, bookings: list[EstimatedBooking]) -> list[int]:
    """Split ``target`` µUSD over ``bookings``, each within [floor, top], proportional
    to its room above the floor (largest remainder; integers). The top is the larger of
    the ceiling and what the booking is now (an expired hold's bound: ceiling +
    admission margin): capping a bill above the ceiling at the ceiling would book less
    than the provider billed."""
    lo = [b.floor_musd for b in bookings]
    hi = [b.top_musd for b in bookings]
    if target <= sum(lo):
        return lo
    if target >= sum(hi):
        return hi
    room = [h - low for h, low in zip(hi, lo, strict=True)]
    extra = target - sum(lo)
    total_room = sum(room)
    shares = [Decimal(extra) * r / total_room for r in room]
    out = [low + math.floor(s) for low, s in zip(lo, shares, strict=True)]
    left = target - sum(out)
    order = sorted(range(len(bookings)), key=lambda i: (-(shares[i] - math.floor(shares[i])), i))
    for i in order[:left]:
        out[i] += 1
    return out


def _export_sums(cmp: Comparison, lines: list[UsageLine]) -> tuple[TokenSums, Decimal]:
    sums = TokenSums()
    cost = Decimal(0)
    for ln in lines:
        sums.add_usage(
            ln.input_tokens, ln.cached_input_tokens, ln.output_tokens, ln.reasoning_tokens or 0, 0
        )
        cost += cmp.line_cost(ln)
    return sums, cost


def _differs(cmp: Comparison, led: TokenSums, ex: TokenSums, ex_cost: Decimal) -> bool:
    return (
        not close_tokens(led.input_tokens, ex.input_tokens)
        or not close_tokens(led.cached_input_tokens, ex.cached_input_tokens)
        or not close_tokens(led.output_tokens, ex.output_tokens)
        or abs(ex_cost - led.cost_musd) > tolerance(ex_cost, cmp.tolerance_musd)
    )


def _row(
    b: Bucket,
    model: str,
    led: TokenSums,
    ex: TokenSums,
    ex_cost: Decimal,
    est: list[EstimatedBooking],
) -> list[Cell]:
    return [
        b.label,
        model,
        led.input_tokens,
        ex.input_tokens,
        led.cached_input_tokens,
        ex.cached_input_tokens,
        led.output_tokens,
        ex.output_tokens,
        led.cost_musd + sum(e.cost_musd for e in est),
        format(ex_cost.normalize(), "f"),
        len(est),
    ]


def compare_rows(cmp: Comparison, models: list[str], shift_h: int | None) -> RowSums:
    """Compare every window and model (windows moved by ``shift_h`` hours on the ledger's
    side); plan corrections only when the windows line up (``shift_h`` not ``None``) and
    the key is paid."""
    sums = RowSums()
    delta = timedelta(hours=shift_h or 0)
    for model in models:
        sums.export_sums[model], sums.ledger_sums[model] = TokenSums(), TokenSums()
    for b in cmp.buckets:
        here = cmp.lines.get(b.start, [])
        for model in models:
            ex_lines = [ln for ln in here if ln.model == model]
            ex, ex_cost = _export_sums(cmp, ex_lines)
            led = cmp.side.exact_in(b.start + delta, b.end + delta, model)
            est = cmp.side.estimated_in(b.start + delta, b.end + delta, model)
            sums.export_sums[model].add(ex)
            sums.ledger_sums[model].add(led)
            sums.estimated[model] += len(est)
            sums.ledger_musd += led.cost_musd + sum(e.cost_musd for e in est)
            sums.top_musd += led.cost_musd + sum(e.top_musd for e in est)
            sums.export_musd += ex_cost
            if est and ex_lines and not cmp.free and shift_h is not None:
                new = spread(round_musd(ex_cost) - led.cost_musd, est)
                sums.plan.extend(
                    PlannedCorrection(e.hold_id, model, b.label, e.cost_musd, n)
                    for e, n in zip(est, new, strict=True)
                    if n != e.cost_musd
                )
            if est or (_differs(cmp, led, ex, ex_cost) and (ex_lines or led.attempts)):
                sums.diff_rows.append(_row(b, model, led, ex, ex_cost, est))
    return sums


def categories_lines(
    sums: RowSums, models: list[str], with_reasoning: bool
) -> tuple[bool, list[str]]:
    """Step 2, *token categories*: per model, input, cached input, output (and reasoning)
    side by side where they differ; cached tokens billed as plain input named.

    Returns:
        ``(matched, lines)``.
    """
    ok = True
    out: list[str] = []
    for model in models:
        led, ex = sums.ledger_sums[model], sums.export_sums[model]
        if sums.estimated[model]:
            out.append(
                f"{model}: not compared — {sums.estimated[model]} estimated bookings (their "
                "real usage is only in the export)"
            )
            continue
        pairs = [
            ("input", led.input_tokens, ex.input_tokens),
            ("cached", led.cached_input_tokens, ex.cached_input_tokens),
            ("output", led.output_tokens, ex.output_tokens),
        ]
        if with_reasoning:
            pairs.append(("reasoning", led.reasoning_tokens, ex.reasoning_tokens))
        differing = {n for n, a, b in pairs if not close_tokens(a, b)}
        if not differing:
            continue
        ok = False
        side_by_side = ", ".join(f"{n} {a:,}/{b:,}" for n, a, b in pairs)
        note = ""
        if differing == {"cached"} and ex.cached_input_tokens < led.cached_input_tokens:
            note = (
                f" — {led.cached_input_tokens - ex.cached_input_tokens:,} cached tokens "
                "billed as plain input"
            )
        out.append(f"{model} (ledger/export): {side_by_side}{note}")
    return ok, out
