"""``/reconcile apply`` never books an estimated booking below what the provider billed
while the bill is within the hold's bound: an expired hold is booked at its bound
(ceiling + admission margin, the margin covering a provider that counts more input
tokens than we do), so a correction may keep it anywhere up to that bound. Before, the
spread and the apply check capped every correction at the ceiling, booking less than
the bill whenever it was above the ceiling."""

from __future__ import annotations

from budget.books.corrections import applies
from budget.books.reconcile import PlannedCorrection
from budget.books.reconcile_ledger import EstimatedBooking
from budget.books.reconcile_rows import spread as _spread


def _booking(hold_id: str, cost: int, ceiling: int, floor: int) -> EstimatedBooking:
    return EstimatedBooking(
        hold_id=hold_id,
        model="deepseek-chat",
        at=0.0,
        cost_musd=cost,
        ceiling_musd=ceiling,
        floor_musd=floor,
        tokens=1000,
    )


def test_a_bill_above_the_ceilings_is_spread_up_to_the_bounds() -> None:
    expired = [_booking("a", 1_200, 1_000, 100), _booking("b", 600, 500, 50)]
    assert _spread(1_650, expired) == [1_100, 550]  # billed 1,650 > ceilings 1,500
    assert _spread(10_000, expired) == [1_200, 600]  # never above the bound booked now
    assert _spread(100, expired) == [100, 50]  # never below the input floor


def test_an_estimated_settle_below_its_ceiling_still_tops_at_the_ceiling() -> None:
    settled = [_booking("c", 300, 1_000, 100)]
    assert _spread(5_000, settled) == [1_000]


def test_apply_accepts_a_correction_between_ceiling_and_bound_and_nothing_above() -> None:
    keep = PlannedCorrection("a", "deepseek-chat", "2026-01-14", 1_200, 1_100)
    above = PlannedCorrection("a", "deepseek-chat", "2026-01-14", 1_200, 1_201)
    assert applies(keep, "expired", True, 1_200, 1_000)
    assert not applies(above, "expired", True, 1_200, 1_000)
    lower = PlannedCorrection("c", "deepseek-chat", "2026-01-14", 300, 1_001)
    assert not applies(lower, "settled", True, 300, 1_000)
