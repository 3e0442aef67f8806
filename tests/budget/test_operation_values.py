"""An operation opened as a value and a request passed as one
(``docs/decisions/306-an-operation-is-a-value-until-its-first-hold.md``): what the
ledger does with one never used, one whose request no hold was asked for, and one whose
first hold is refused at admission — on every backend, the same counts as
``begin_operation(deferred=True, count_message=True)`` and ``begin_request`` gave."""

from __future__ import annotations

import pytest

from budget.errors import HoldRefused
from budget.ledger import Ledger
from budget.protocol import OperationTicket, RequestTicket
from budget.types import Origin, RefusalReason
from tests.budget.ledger_helpers import LedgerFactory


async def _counts(ledger: Ledger, user_id: int) -> tuple[int, int, int]:
    """(messages counted today, operations in flight, holds outstanding)."""
    status = await ledger.user_status(user_id)
    return status.messages_today, status.inflight, status.outstanding_holds


async def _hold(ledger: Ledger, op: OperationTicket, request: RequestTicket) -> None:
    await ledger.reserve(op, request, provider="test", model="m", input_tokens=10, max_tokens=10)


async def test_an_operation_never_used_counts_its_message_and_leaves_nothing(
    make_ledger: LedgerFactory,
) -> None:
    """Opened, then ended with no ledger call between: the message is counted once, no
    operation is in flight, nothing was booked; ending it again counts nothing more."""
    ledger = await make_ledger(user_daily_messages=3)
    op = OperationTicket.open(5, Origin.CHAT, count_message=True)
    assert await _counts(ledger, 5) == (0, 0, 0)  # a value: nothing written yet
    assert await ledger.operation_booked_musd(op) == 0
    await ledger.end_operation(op)
    assert await _counts(ledger, 5) == (1, 0, 0)
    await ledger.end_operation(op)
    assert await _counts(ledger, 5) == (1, 0, 0)
    assert (await ledger.store.audit())["mismatches"] == []


async def test_an_operation_never_used_past_the_daily_cap_refuses_nothing(
    make_ledger: LedgerFactory,
) -> None:
    """At USER_DAILY_MESSAGES an unused operation's end neither raises nor counts (the
    work is over), as a deferred admission's end did; one not counting its message
    (``count_message`` off) counts nothing either."""
    ledger = await make_ledger(user_daily_messages=1)
    await ledger.record_message(6)
    await ledger.end_operation(OperationTicket.open(6, Origin.CHAT, count_message=True))
    await ledger.end_operation(OperationTicket.open(6, Origin.CHAT))
    assert await _counts(ledger, 6) == (1, 0, 0)


async def test_a_request_no_hold_was_asked_for_is_counted_so_a_loop_is_refused(
    make_ledger: LedgerFactory,
) -> None:
    """Every key skipped: the cascade counts the request at its end (``begin_request``
    on the ticket's fingerprint), which admits the operation; the same prompt again in
    the operation is then refused ``loop`` at its first hold, holding nothing; the
    message is counted once."""
    ledger = await make_ledger(user_daily_messages=3)
    op = OperationTicket.open(7, Origin.CHAT, count_message=True)
    skipped = RequestTicket("same prompt")
    await ledger.begin_request(op, skipped.fingerprint)
    with pytest.raises(HoldRefused) as refused:
        await _hold(ledger, op, RequestTicket("same prompt"))
    assert refused.value.refusal.reason is RefusalReason.LOOP
    assert (await _counts(ledger, 7))[2] == 0
    assert await ledger.operation_booked_musd(op) == 0
    await ledger.end_operation(op)
    assert await _counts(ledger, 7) == (1, 0, 0)


async def test_a_request_ticket_is_counted_once_by_its_first_hold(
    make_ledger: LedgerFactory,
) -> None:
    """The first hold counts the ticket and keeps its id; a second hold on the same
    ticket (a degraded retry) is not a new request, so no ``loop``."""
    ledger = await make_ledger(user_daily_messages=3)
    op = OperationTicket.open(8, Origin.CHAT, count_message=True)
    request = RequestTicket("one prompt")
    await _hold(ledger, op, request)
    counted = request.request_id
    assert counted is not None
    await _hold(ledger, op, request)
    assert request.request_id == counted
    assert await _counts(ledger, 8) == (1, 1, 2)
    await ledger.end_operation(op)


async def test_an_admission_refused_at_the_first_hold_holds_nothing_and_counts_once(
    make_ledger: LedgerFactory,
) -> None:
    """Under the kill switch the first hold is refused ``kill`` with nothing held or in
    flight; the message is counted once, however many keys asked (each hold refused
    the same) and after the operation ends. Past USER_DAILY_MESSAGES the first hold is
    refused ``messages`` and the message is not counted, nor at its end."""
    ledger = await make_ledger(user_daily_messages=1)
    await ledger.kill("test", by=1)
    op = OperationTicket.open(9, Origin.CHAT, count_message=True)
    for _ in range(2):  # two keys tried in turn
        with pytest.raises(HoldRefused) as refused:
            await _hold(ledger, op, RequestTicket("killed"))
        assert refused.value.refusal.reason is RefusalReason.KILL
    assert await ledger.operation_booked_musd(op) == 0  # asked before the end, as chat does
    await ledger.end_operation(op)
    assert await _counts(ledger, 9) == (1, 0, 0)
    await ledger.unkill(by=1)
    late = OperationTicket.open(9, Origin.CHAT, count_message=True)
    with pytest.raises(HoldRefused) as refused:
        await _hold(ledger, late, RequestTicket("over the cap"))
    assert refused.value.refusal.reason is RefusalReason.MESSAGES
    await ledger.end_operation(late)
    assert await _counts(ledger, 9) == (1, 0, 0)
    assert (await ledger.store.audit())["mismatches"] == []


async def test_after_a_refused_admission_the_next_ones_are_one_step_each(
    make_ledger: LedgerFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Refusals come in runs: after one, each next operation is admitted at its first
    ledger call — where admissions are deferred, in one store step that counts its
    message too (no count of its own before it). The counts are those of one step per
    call: each message under the kill switch counted once; one past the daily cap
    refused ``messages`` and not counted, nor at its end."""
    ledger = await make_ledger(user_daily_messages=3)
    own_counts: list[int] = []
    if ledger.store.defers_admission:
        real = ledger.store.record_message

        async def counted(now: object, user_id: int) -> int:
            own_counts.append(user_id)
            return await real(now, user_id)  # type: ignore[arg-type]

        monkeypatch.setattr(ledger.store, "record_message", counted)
    await ledger.kill("test", by=1)
    for n in range(3):
        op = OperationTicket.open(11, Origin.CHAT, count_message=True)
        with pytest.raises(HoldRefused) as refused:
            await _hold(ledger, op, RequestTicket(f"killed {n}"))
        assert refused.value.refusal.reason is RefusalReason.KILL
        await ledger.end_operation(op)
        assert await _counts(ledger, 11) == (n + 1, 0, 0)
    assert own_counts == []  # each counted in its admission's step
    await ledger.unkill(by=1)
    late = OperationTicket.open(11, Origin.CHAT, count_message=True)
    with pytest.raises(HoldRefused) as refused:
        await _hold(ledger, late, RequestTicket("over the cap"))
    assert refused.value.refusal.reason is RefusalReason.MESSAGES
    await ledger.end_operation(late)
    assert await _counts(ledger, 11) == (3, 0, 0)
    assert (await ledger.store.audit())["mismatches"] == []
