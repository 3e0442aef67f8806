"""What a chat message gets back (bot.chat.reply): the reply chosen from the service's
outcome — its text, how it is delivered, what the intake record says, the refusal
counted — what the answer says it was charged, and a shutdown's drain on the injected
clock (bot.chat.service)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from aiogram.utils.i18n import I18n

from bot.chat.outcome import ChatAnswer, ChatFailed, ChatRefused, FailureKind
from bot.chat.reply import Delivery, Reply, reply_of, screen
from bot.chat.service import ChatConfig, ChatService
from bot.middlewares.context import IntakeStatus
from bot.storage.repos import Conversation
from bot.storage.values import Turn
from bot.text import templates
from bot.text.i18n import create_i18n
from budget.pricing.tokens import TokenCounter
from budget.protocol import OperationTicket
from budget.types import Refusal, RefusalReason, Usage
from llm.stream import StreamControl
from llm.types import Completion, LLMRequest
from tests.support.clocks import ManualClock
from tests.support.ledger import FakeLedger, FakePrices, Rates

MESSAGE_ID = 41
GROUP_REPLY = 41


@pytest.fixture(autouse=True)
def english() -> Iterator[I18n]:
    i18n = create_i18n()
    with i18n.context(), i18n.use_locale("en"):
        yield i18n


def _completion(text: str, **fields: Any) -> Completion:
    return Completion(
        text=text,
        finish_reason="stop",
        provider="groq",
        model="m",
        usage=Usage(input_tokens=10, output_tokens=5),
        **fields,
    )


def _reply(outcome: ChatAnswer | ChatRefused | ChatFailed) -> Reply:
    return reply_of(outcome, tz="UTC", message_id=MESSAGE_ID, answer_to=GROUP_REPLY)


def test_an_answer_is_delivered_as_the_paid_answer_with_its_note_and_charge() -> None:
    """The answer goes out as an answer (stream finish or outbox), quoting the group
    message, with the note of how it ended and what the operation was charged."""
    reply = _reply(ChatAnswer(_completion("Hello", stream_cut=True), charged_musd=120))
    assert reply == Reply(
        "Hello\n\n" + templates.stream_cut_note(),
        IntakeStatus.ANSWERED,
        Delivery.ANSWER,
        reply_to=GROUP_REPLY,
        charged_musd=120,
    )


def test_a_stopped_answer_with_nothing_shown_gets_the_stopped_template() -> None:
    """Stopped before any text: a template (by an admin's /kill hard here), quoting the
    group message; the message counts as answered, no refusal is counted. A shutdown's
    stop gets the "send it again" template instead."""
    killed = _reply(ChatAnswer(_completion(" ", stopped="kill")))
    assert killed == Reply(
        templates.stopped_empty_text(True), IntakeStatus.ANSWERED, reply_to=GROUP_REPLY
    )
    shutdown = _reply(ChatAnswer(_completion("", stopped="shutdown")))
    assert shutdown.text == templates.shutting_down_text()
    assert shutdown.delivery is Delivery.TEMPLATE


def test_an_empty_answer_is_a_failure_counted_as_such() -> None:
    """A blank answer that was not stopped: the empty-answer template, recorded failed,
    counted ``empty_answer``."""
    assert _reply(ChatAnswer(_completion("\u200b"))) == Reply(
        templates.empty_answer_text(), IntakeStatus.FAILED, refusal="empty_answer"
    )


def test_a_refusal_quotes_the_message_it_refuses_and_is_counted_by_reason() -> None:
    refusal = Refusal(RefusalReason.KILL)
    reply = _reply(ChatRefused(refusal, running=False))
    assert reply == Reply(
        templates.refusal_text(refusal, tz="UTC", running=False),
        IntakeStatus.REFUSED,
        reply_to=MESSAGE_ID,
        refusal="kill",
    )


@pytest.mark.parametrize(
    ("failure", "status", "text"),
    [
        (ChatFailed(FailureKind.TOO_LONG, tokens=9, limit=5), IntakeStatus.REFUSED, None),
        (ChatFailed(FailureKind.QUEUE_FULL), IntakeStatus.REFUSED, None),
        (ChatFailed(FailureKind.UNAVAILABLE, charged_musd=0), IntakeStatus.FAILED, None),
        (ChatFailed(FailureKind.ERROR, charged_musd=2500), IntakeStatus.FAILED, "$0.0025"),
        (ChatFailed(FailureKind.ERROR, charged_musd=None), IntakeStatus.FAILED, None),
    ],
)
def test_a_failure_names_its_kind_and_what_it_cost(
    failure: ChatFailed, status: IntakeStatus, text: str | None
) -> None:
    """Too long and a full queue are refusals; the rest are failures. Each quotes the
    message and is counted by its kind; an error names what the ledger booked."""
    reply = _reply(failure)
    assert (reply.status, reply.refusal, reply.reply_to) == (
        status,
        failure.kind.value,
        MESSAGE_ID,
    )
    assert reply.delivery is Delivery.TEMPLATE
    if text is not None:
        assert text in reply.text
    if failure.kind is FailureKind.ERROR and failure.charged_musd is None:
        assert "charged" not in reply.text.lower()


def test_screen_refuses_an_invisible_or_stale_message_before_any_model() -> None:
    fresh = timedelta(seconds=5)
    limit = timedelta(seconds=600)
    assert screen("hello", age=fresh, stale_after=limit) is None
    assert screen("", age=fresh, stale_after=limit) == Reply(
        templates.empty_message_text(), IntakeStatus.REFUSED
    )
    assert screen("hello", age=timedelta(seconds=601), stale_after=limit) == Reply(
        templates.stale_text(), IntakeStatus.STALE, refusal="stale"
    )


class _History:
    async def load_turns(self, where: Conversation, max_tokens: int) -> list[Turn]:
        return []

    async def append(self, where: Conversation, turns: Sequence[Any], now: datetime) -> None:
        return None


class _Cascade:
    """Tries ``failed`` paid attempts first (each settled as billed, then passed over),
    then answers from a paid key, settling 30 output tokens."""

    def __init__(self, ledger: FakeLedger, failed: int) -> None:
        self.ledger = ledger
        self.failed = failed

    async def complete(
        self, op: OperationTicket, request: LLMRequest, *, stream: StreamControl | None = None
    ) -> Completion:
        passed = []
        for n in range(self.failed):
            hold = await self.ledger.reserve(
                op, "r1", provider="paid", model="m", input_tokens=10, max_tokens=20
            )
            await self.ledger.settle(hold.hold_id, Usage(input_tokens=10, output_tokens=20))
            passed.append(f"paid{n}:unavailable")
        hold = await self.ledger.reserve(
            op, "r1", provider="paid", model="m", input_tokens=10, max_tokens=100
        )
        cost = await self.ledger.settle(hold.hold_id, Usage(input_tokens=10, output_tokens=30))
        return _completion("answer", cost_musd=cost, fallbacks=tuple(passed))


async def _answer(failed: int) -> ChatAnswer:
    ledger = FakeLedger(FakePrices({("paid", "m"): Rates(Decimal(1), Decimal(1))}, free=set()))
    service = ChatService(
        ledger=ledger,
        backend=_Cascade(ledger, failed),
        history=_History(),  # type: ignore[arg-type]
        count_tokens=TokenCounter(),
        clock=ManualClock(),
        config=ChatConfig(),
    )
    outcome = await service.handle(7, "question", chat_id=7, thread_id=None)
    assert isinstance(outcome, ChatAnswer)
    return outcome


async def test_the_answer_carries_what_the_whole_operation_was_charged() -> None:
    """Answered at once: the answering attempt's cost (10 + 30 µUSD) is the bill. After
    an attempt that was billed and passed over (10 + 20 µUSD), the answer says both."""
    assert (await _answer(failed=0)).charged_musd == 40
    assert (await _answer(failed=1)).charged_musd == 70


class _Hanging:
    """A provider that never answers (until cancelled)."""

    def __init__(self) -> None:
        self.called = asyncio.Event()

    async def complete(
        self, op: OperationTicket, request: LLMRequest, *, stream: StreamControl | None = None
    ) -> Completion:
        self.called.set()
        await asyncio.Event().wait()
        raise AssertionError("never answers")


async def test_a_drain_gives_in_flight_work_its_grace_on_the_clock_then_cancels_it() -> None:
    """Shutdown: an operation still running after the grace (seconds of the injected
    clock: a manual clock here, so nothing waits in real time) is cancelled."""
    clock = ManualClock()
    backend = _Hanging()
    ledger = FakeLedger(FakePrices({}, free={"groq"}))
    service = ChatService(
        ledger=ledger,
        backend=backend,
        history=_History(),  # type: ignore[arg-type]
        count_tokens=TokenCounter(),
        clock=clock,
        config=ChatConfig(),
    )
    handling = asyncio.create_task(service.handle(7, "question", chat_id=7, thread_id=None))
    await asyncio.wait_for(backend.called.wait(), 5)
    start = clock.monotonic()
    await asyncio.wait_for(service.drain(30.0), 5)
    assert clock.monotonic() - start >= 30.0
    assert handling.cancelled()
    assert service.in_flight == 0
