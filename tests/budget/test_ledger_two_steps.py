"""A chat message's ledger work in two steps (docs/decisions/132-two-ledger-steps.md):
the message counter rides the admission with its first hold, the answer's settle ends
the operation and persists the calibration sample. Same outcomes on every backend; on
SQLite, two store steps."""

from __future__ import annotations

from typing import Any

from budget.errors import HoldRefused
from budget.ledger import Ledger
from budget.protocol import HoldTicket, OperationTicket
from budget.storage.sqlite.store import SqliteStore
from budget.types import CalibrationSample, Origin, RefusalReason, Usage
from tests.budget.ledger_helpers import LedgerFactory


async def _message(ledger: Ledger, user_id: int) -> tuple[OperationTicket, HoldTicket]:
    """What the chat service and the cascade ask for one message, up to its hold."""
    op = await ledger.begin_operation(user_id, Origin.CHAT, deferred=True, count_message=True)
    request_id = await ledger.begin_request(op, f"fingerprint-{op.operation_id}")
    hold = await ledger.reserve(
        op, request_id, provider="test", model="m", input_tokens=10, max_tokens=10
    )
    return op, hold


async def test_the_message_is_counted_with_its_hold_and_the_settle_ends_the_operation(
    make_ledger: LedgerFactory,
) -> None:
    """Counted once, in flight until the settle that ends it; the sample is persisted;
    the next message past USER_DAILY_MESSAGES is refused with ``messages``, counting
    nothing and holding nothing."""
    ledger = await make_ledger(user_daily_messages=1)
    op, hold = await _message(ledger, 5)
    status = await ledger.user_status(5)
    assert (status.messages_today, status.inflight, status.outstanding_holds) == (1, 1, 1)
    sample = CalibrationSample("test", "m", 1_200_000, 3)
    cost = await ledger.settle(
        hold.hold_id, Usage(input_tokens=10, output_tokens=5), ends=op, calibration=sample
    )
    assert cost == 15
    status = await ledger.user_status(5)
    assert (status.messages_today, status.inflight, status.outstanding_holds) == (1, 0, 0)
    assert (await ledger.calibration())[("test", "m")] == (1_200_000, 3)
    try:
        await _message(ledger, 5)
    except HoldRefused as exc:
        assert exc.refusal.reason is RefusalReason.MESSAGES
    else:
        raise AssertionError("the second message of the day was not refused")
    status = await ledger.user_status(5)
    assert (status.messages_today, status.inflight, status.outstanding_holds) == (1, 0, 0)
    assert (await ledger.store.audit())["mismatches"] == []


async def test_a_message_whose_operation_never_held_is_counted_when_it_ends(
    make_ledger: LedgerFactory,
) -> None:
    """Every provider passed over, no hold asked: the message still counts."""
    ledger = await make_ledger(user_daily_messages=3)
    op = await ledger.begin_operation(7, Origin.CHAT, deferred=True, count_message=True)
    await ledger.end_operation(op)
    status = await ledger.user_status(7)
    assert (status.messages_today, status.inflight) == (1, 0)


async def test_a_message_counted_before_a_kill_refusal_is_counted_once(
    make_ledger: LedgerFactory,
) -> None:
    """Under the kill switch the message is counted (as when the counter was a step of
    its own) and the refusal is ``kill``; ending the refused operation counts nothing
    more."""
    ledger = await make_ledger(user_daily_messages=3)
    await ledger.kill("test", by=1)
    try:
        await _message(ledger, 8)
    except HoldRefused as exc:
        assert exc.refusal.reason is RefusalReason.KILL
    else:
        raise AssertionError("a hold was granted under the kill switch")
    status = await ledger.user_status(8)
    assert (status.messages_today, status.inflight, status.outstanding_holds) == (1, 0, 0)


async def test_one_message_is_two_store_steps_on_sqlite(make_ledger: LedgerFactory) -> None:
    """Admission, message, request and hold in one step; settle, end and calibration in
    one more (the reads for /me are not the message's)."""
    ledger = await make_ledger(user_daily_messages=10)
    store = ledger.store
    if not isinstance(store, SqliteStore):
        return  # PostgreSQL admits on its own (decision 132): its steps are not these
    steps: list[str] = []
    write, post = store._write, store._post

    async def counted_write(body: Any, *args: Any) -> Any:
        steps.append("write")
        return await write(body, *args)

    async def counted_post(body: Any, what: str) -> None:
        steps.append("post")
        await post(body, what)

    store._write = counted_write  # type: ignore[method-assign,assignment]
    store._post = counted_post  # type: ignore[method-assign]
    op, hold = await _message(ledger, 9)
    sample = CalibrationSample("test", "m", 1_000_000, 1)
    await ledger.settle(
        hold.hold_id, Usage(input_tokens=10, output_tokens=5), ends=op, calibration=sample
    )
    assert steps == ["write", "write"]
