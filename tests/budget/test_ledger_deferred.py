"""Deferred admission: an operation admitted together with its first request
and first hold, in one ledger step — the same grants, refusals and bookings as three
steps, on every backend (PostgreSQL admits at once; SQLite defers).

Prices (see conftest): ``test:m`` = 1 µUSD per token in and out.
"""

from __future__ import annotations

import pytest

from budget.errors import HoldRefused
from budget.ledger import Ledger
from budget.protocol import HoldTicket, OperationTicket
from budget.storage.sqlite.store import SqliteStore
from budget.types import Origin, RefusalReason, Usage
from tests.budget.ledger_helpers import LedgerFactory


async def first_hold(ledger: Ledger, op: OperationTicket, ceiling: int, fp: str) -> HoldTicket:
    """The operation's first request and hold (input 1 token + max_tokens ceiling−1)."""
    req = await ledger.begin_request(op, fp)
    return await ledger.reserve(
        op, req, provider="test", model="m", input_tokens=1, max_tokens=ceiling - 1
    )


async def refusal_of(ledger: Ledger, user: int, ceiling: int, fp: str) -> RefusalReason:
    """Begin a deferred operation and its first hold; the refusal's reason (raised by
    ``begin_operation`` where it admits at once, by ``reserve`` where it defers)."""
    with pytest.raises(HoldRefused) as info:
        op = await ledger.begin_operation(user, Origin.CHAT, deferred=True)
        await first_hold(ledger, op, ceiling, fp)
    return info.value.refusal.reason


async def test_one_step_grants_books_and_ends_like_three(make_ledger: LedgerFactory) -> None:
    """A deferred operation's first hold is granted and settled as usual; on SQLite
    the admission, the request and the hold are one writer step (one commit); the
    operation counts one request and its booking; ending it frees its slot."""
    ledger = await make_ledger(global_daily_musd=10_000, user_max_inflight=1)
    store = ledger.store
    before = store.writer.commits if isinstance(store, SqliteStore) else 0
    op = await ledger.begin_operation(1, Origin.CHAT, deferred=True)
    h = await first_hold(ledger, op, 500, "fp-1")
    if isinstance(store, SqliteStore):
        assert store.writer.commits - before == 1
    assert h.ceiling_musd == 500
    assert await ledger.operation_booked_musd(op) == 500
    assert (await ledger.user_status(1)).inflight == 1
    assert await ledger.settle(h.hold_id, Usage(input_tokens=1, output_tokens=99)) == 100
    assert await ledger.operation_booked_musd(op) == 100
    # the same request continues at another provider (its second attempt)
    req2 = await ledger.begin_request(op, "fp-2")
    h2 = await ledger.reserve(op, req2, provider="test", model="m", input_tokens=1, max_tokens=9)
    await ledger.release(h2.hold_id)
    await ledger.end_operation(op)
    assert (await ledger.user_status(1)).inflight == 0
    # a new one is admitted: the slot is free
    op2 = await ledger.begin_operation(1, Origin.CHAT, deferred=True)
    await ledger.release((await first_hold(ledger, op2, 10, "fp-3")).hold_id)
    await ledger.end_operation(op2)


async def test_admission_refusals_create_nothing_and_are_not_deferred_again(
    make_ledger: LedgerFactory,
) -> None:
    """Under the kill switch the deferred admission is refused (reason kill) and
    nothing is held; an operation ended before any hold leaves nothing and has booked
    0; after unkill the next deferred operation is granted."""
    ledger = await make_ledger(global_daily_musd=10_000)
    await ledger.kill("test", by=42)
    assert await refusal_of(ledger, 1, 100, "fp-k1") is RefusalReason.KILL
    assert await refusal_of(ledger, 1, 100, "fp-k2") is RefusalReason.KILL
    status = await ledger.status()
    assert status.exposure_musd == 0
    assert (await ledger.user_status(1)).inflight == 0
    await ledger.unkill(by=42)
    op = await ledger.begin_operation(1, Origin.CHAT, deferred=True)
    assert await ledger.operation_booked_musd(op) == 0
    await ledger.end_operation(op)  # never admitted: nothing to end
    op = await ledger.begin_operation(1, Origin.CHAT, deferred=True)
    h = await first_hold(ledger, op, 100, "fp-after")
    assert h.ceiling_musd == 100
    await ledger.release(h.hold_id)
    await ledger.end_operation(op)


async def test_a_refused_first_hold_keeps_the_operation_for_the_next_attempt(
    make_ledger: LedgerFactory,
) -> None:
    """The first hold refused by a limit: the operation and its request exist (the
    next attempt of the same request at a cheaper size is granted, one request
    counted), nothing is held, and the refusal names the limit."""
    ledger = await make_ledger(user_daily_musd=300, global_daily_musd=10_000)
    op = await ledger.begin_operation(1, Origin.CHAT, deferred=True)
    req = await ledger.begin_request(op, "fp-1")
    with pytest.raises(HoldRefused) as info:
        await ledger.reserve(op, req, provider="test", model="m", input_tokens=1, max_tokens=499)
    assert info.value.refusal.reason is RefusalReason.LIMIT
    assert await ledger.operation_booked_musd(op) == 0
    assert await ledger.remaining_musd(op, "test") == 300
    h = await ledger.reserve(op, req, provider="test", model="m", input_tokens=1, max_tokens=199)
    assert h.ceiling_musd == 200
    assert await ledger.operation_booked_musd(op) == 200
    await ledger.release(h.hold_id)
    await ledger.end_operation(op)
    assert (await ledger.user_status(1)).inflight == 0
