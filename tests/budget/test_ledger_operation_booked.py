"""What the ledger booked for one operation — the answer a template's charge claim
depends on ("nothing was charged" only when this is 0)."""

from __future__ import annotations

from budget.ledger import Ledger
from budget.protocol import HoldTicket, OperationTicket
from budget.types import Origin, Usage
from tests.budget.ledger_helpers import LedgerFactory


async def _op(ledger: Ledger, user: int = 1) -> OperationTicket:
    return await ledger.begin_operation(user, Origin.CHAT, max_musd=10**9, max_requests=100)


async def _reserve(
    ledger: Ledger, op: OperationTicket, ceiling: int, provider: str = "test"
) -> HoldTicket:
    req = await ledger.begin_request(op, f"fp-{ceiling}-{provider}")
    model = "f" if provider == "free" else "m"
    return await ledger.reserve(
        op, req, provider=provider, model=model, input_tokens=1, max_tokens=ceiling - 1
    )


async def test_nothing_booked_before_a_hold_and_after_a_release(
    make_ledger: LedgerFactory,
) -> None:
    """No hold → 0; a held hold counts its ceiling; released → back to 0."""
    ledger = await make_ledger()
    op = await _op(ledger)
    assert await ledger.operation_booked_musd(op) == 0
    h = await _reserve(ledger, op, 1000)
    assert await ledger.operation_booked_musd(op) == 1000
    await ledger.release(h.hold_id)
    assert await ledger.operation_booked_musd(op) == 0


async def test_settled_cost_is_booked_also_after_the_operation_ended(
    make_ledger: LedgerFactory,
) -> None:
    """A settled paid attempt books its actual cost (350 µUSD), still readable after
    end_operation; a free-tier attempt settles at 0 and adds nothing; another
    operation of the same user is not mixed in."""
    ledger = await make_ledger()
    op = await _op(ledger)
    paid = await _reserve(ledger, op, 1000)
    await ledger.settle(paid.hold_id, Usage(input_tokens=50, output_tokens=300))
    free = await _reserve(ledger, op, 500, provider="free")
    await ledger.settle(free.hold_id, Usage(input_tokens=10, output_tokens=10))
    await ledger.end_operation(op)
    assert await ledger.operation_booked_musd(op) == 350
    other = await _op(ledger)
    assert await ledger.operation_booked_musd(other) == 0
