"""Disk full during a paid call: an answer that exists is delivered even
when settling, ending the operation or storing history fails; storage failures are
``LedgerUnavailable``/``OperationalError``, recognised as such."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from datetime import datetime
from decimal import Decimal
from typing import Any

from sqlalchemy.exc import IntegrityError, OperationalError

from bot.chat.outcome import ChatAnswer, ChatFailed, FailureKind
from bot.chat.service import ChatConfig, ChatService
from bot.storage.repos import Conversation, is_storage_failure
from bot.storage.values import Turn
from budget.errors import LedgerUnavailable
from budget.pricing.tokens import TokenCounter
from budget.protocol import OperationTicket
from budget.types import Usage
from llm.errors import EmptyCompletion
from llm.stream import StreamControl
from llm.types import Completion, LLMRequest
from tests.support.clocks import ManualClock
from tests.support.ledger import FakeLedger, FakePrices, Rates


class _BrokenLedger(FakeLedger):
    """A ledger whose disk filled up after the hold: settles and ends fail."""

    async def end_operation(self, op: OperationTicket) -> None:
        raise LedgerUnavailable()


class _Backend:
    def __init__(self, ledger: FakeLedger, text: str) -> None:
        self.ledger = ledger
        self.text = text

    async def complete(
        self, op: OperationTicket, request: LLMRequest, *, stream: StreamControl | None = None
    ) -> Completion:
        hold = await self.ledger.reserve(
            op, "r1", provider="deepseek", model="m", input_tokens=10, max_tokens=20
        )
        if not self.text:
            await self.ledger.settle(hold.hold_id, Usage(input_tokens=10, output_tokens=20))
            raise EmptyCompletion("deepseek", "length", 5)
        # the settle failed: the cascade reports the ceiling, the hold stays held
        return Completion(
            text=self.text,
            finish_reason="stop",
            provider="deepseek",
            model="m",
            usage=Usage(input_tokens=10, output_tokens=5),
            cost_musd=hold.ceiling_musd,
            paid=True,
        )


class _FullHistory:
    """History on a full disk: loads nothing, every append fails."""

    def __init__(self) -> None:
        self.appended: list[Any] = []

    async def load_turns(self, where: Conversation, max_tokens: int) -> list[Turn]:
        return []

    async def append(self, where: Conversation, turns: Sequence[Any], now: datetime) -> None:
        raise OperationalError("INSERT", {}, sqlite3.OperationalError("database or disk is full"))


def _service(ledger: FakeLedger, text: str) -> ChatService:
    return ChatService(
        ledger=ledger,
        backend=_Backend(ledger, text),
        history=_FullHistory(),  # type: ignore[arg-type]
        count_tokens=TokenCounter(),
        clock=ManualClock(),
        config=ChatConfig(),
    )


def _ledger() -> FakeLedger:
    prices = FakePrices({("deepseek", "m"): Rates(Decimal(1), Decimal(1))}, free=set())
    return _BrokenLedger(prices)


async def test_answer_is_delivered_when_storage_fails_after_the_call() -> None:
    """History append and end_operation both fail (disk full): the user still gets the
    paid answer — one outcome, no error template."""
    outcome = await _service(_ledger(), "the answer").handle(
        7, "question", chat_id=7, thread_id=None
    )
    assert isinstance(outcome, ChatAnswer)
    assert outcome.completion.text == "the answer"


async def test_empty_completion_is_a_charged_failure() -> None:
    """A blank completion is ChatFailed("empty") carrying what was booked."""
    outcome = await _service(_ledger(), "").handle(7, "question", chat_id=7, thread_id=None)
    assert outcome == ChatFailed(FailureKind.EMPTY, cost_musd=5)


def test_storage_failures_are_recognised() -> None:
    """Read-only/full/gone database errors are storage failures; a constraint bug is not."""
    full = sqlite3.OperationalError("database or disk is full")
    assert is_storage_failure(LedgerUnavailable())
    assert is_storage_failure(OperationalError("INSERT", {}, full))
    assert is_storage_failure(sqlite3.OperationalError("attempt to write a readonly database"))
    assert not is_storage_failure(IntegrityError("INSERT", {}, sqlite3.IntegrityError("x")))
    assert not is_storage_failure(ValueError("bug"))
