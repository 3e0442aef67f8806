"""bot.chat.ledger_wait: a refusal of a ledger failing closed before any provider call
is tried again until the message would be stale; nothing else is."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import timedelta

from bot.chat.ledger_wait import RETRY_PAUSE_S, until_ledger_answers
from bot.chat.outcome import ChatFailed, ChatOutcome, ChatRefused, FailureKind
from budget.types import Refusal, RefusalReason
from tests.support.clocks import ManualClock

UNAVAILABLE = Refusal(reason=RefusalReason.UNAVAILABLE)


def _outcomes(*items: ChatOutcome) -> tuple[list[int], Callable[[], Awaitable[ChatOutcome]]]:
    calls: list[int] = []
    queue = list(items)

    async def attempt() -> ChatOutcome:
        calls.append(1)
        return queue.pop(0) if len(queue) > 1 else queue[0]

    return calls, attempt


async def test_tried_again_until_the_ledger_answers() -> None:
    clock = ManualClock()
    answer = ChatFailed(FailureKind.EMPTY)  # any outcome that is not a retryable refusal
    calls, attempt = _outcomes(ChatRefused(UNAVAILABLE, False, retry=True), answer)
    out = await until_ledger_answers(
        attempt,
        clock=clock,
        sent_at=clock.now(),
        stale_after=timedelta(seconds=600),
        closing=lambda: False,
    )
    assert out is answer and len(calls) == 2


async def test_the_last_refusal_once_the_message_would_be_stale() -> None:
    clock = ManualClock()
    refused = ChatRefused(UNAVAILABLE, False, retry=True)
    calls, attempt = _outcomes(refused)
    sent = clock.now()
    out = await until_ledger_answers(
        attempt,
        clock=clock,
        sent_at=sent,
        stale_after=timedelta(seconds=10),
        closing=lambda: False,
    )
    assert out is refused
    assert len(calls) == 1 + int(10 // RETRY_PAUSE_S)
    assert clock.now() - sent <= timedelta(seconds=10)


async def test_never_tried_again_after_a_provider_call_or_when_closing() -> None:
    clock = ManualClock()
    billed = ChatRefused(UNAVAILABLE, False, retry=False)
    calls, attempt = _outcomes(billed)
    stale = timedelta(seconds=600)
    out = await until_ledger_answers(
        attempt, clock=clock, sent_at=clock.now(), stale_after=stale, closing=lambda: False
    )
    assert out is billed
    retry = ChatRefused(UNAVAILABLE, False, retry=True)
    calls2, attempt2 = _outcomes(retry)
    out = await until_ledger_answers(
        attempt2, clock=clock, sent_at=clock.now(), stale_after=stale, closing=lambda: True
    )
    assert out is retry
    assert len(calls) == 1 and len(calls2) == 1
