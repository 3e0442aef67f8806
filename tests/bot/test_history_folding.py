"""The fold's bounds (``bot.chat.folding.HistoryFolder``), for any conversation: the
history sent never exceeds CHAT_HISTORY_MAX_TOKENS, a message folds only when its
history would not fit and makes at most one summary call, a fold keeps at most
``keep_tokens`` of recent turns, and between two folds the new turns add up to more than
the room a fold leaves — so summaries are made per fold, never per message. Also: a
refused summary cuts, is booked nowhere, and stores the fold point."""

from __future__ import annotations

from datetime import datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bot.chat.folding import SUMMARY_PREFIX, FoldKind, HistoryFolder
from bot.storage.repos import Conversation
from bot.storage.summaries import NumberedTurn, StoredSummary
from bot.storage.values import Turn
from budget.errors import HoldRefused
from budget.protocol import OperationTicket
from budget.types import Level, Origin, Refusal, RefusalReason, Usage, Window
from llm.router import RouterConfig
from llm.types import Completion, LLMRequest, Message
from tests.support.clocks import ManualClock

WHERE = Conversation(1, None, 1)
OP = OperationTicket("op", 1, Origin.CHAT, None)


class Store:
    """Summaries and turns in memory, as ``bot.storage.summaries.Summaries`` keeps them."""

    def __init__(self) -> None:
        self.turns: list[NumberedTurn] = []
        self.summary: StoredSummary | None = None

    async def load(self, where: Conversation) -> StoredSummary | None:
        return self.summary

    async def turns_after(self, where: Conversation, after_id: int) -> list[NumberedTurn]:
        return [t for t in self.turns if t.turn_id > after_id]

    async def conversation(
        self, where: Conversation
    ) -> tuple[StoredSummary | None, list[NumberedTurn]]:
        after = self.summary.through_turn_id if self.summary is not None else 0
        return self.summary, await self.turns_after(where, after)

    async def save(self, where: Conversation, summary: StoredSummary, now: datetime) -> None:
        self.summary = summary

    def add(self, tokens: int) -> None:
        message = Message("user", "x" * tokens)
        self.turns.append(NumberedTurn(len(self.turns) + 1, Turn(message, tokens, tokens)))


class Backend:
    """Answers every summary with ``words`` words, or refuses its hold."""

    def __init__(self, words: int, refuse: bool = False) -> None:
        self.words = words
        self.refuse = refuse
        self.requests: list[LLMRequest] = []

    async def complete(self, op: OperationTicket, request: LLMRequest) -> Completion:
        self.requests.append(request)
        if self.refuse:
            raise HoldRefused(Refusal(RefusalReason.LIMIT, Level.USER, Window.DAY))
        return Completion(" ".join(["w"] * self.words), "stop", "groq", "m", Usage(1, 1))


async def _raw(message: Message) -> int:
    return len(message.content) // 4 + 1


def _folder(store: Store, backend: Backend, history_max: int, summary_max: int) -> HistoryFolder:
    return HistoryFolder(
        summaries=store,
        backend=backend,
        raw_turn=_raw,
        scale=lambda raw: raw + raw // 4,
        clock=ManualClock(),
        history_max_tokens=history_max,
        summary_max_tokens=summary_max,
        router=RouterConfig(),
    )


@settings(max_examples=60, deadline=None)
@given(
    history_max=st.integers(60, 3000),
    summary_max=st.integers(4, 256),
    turns=st.lists(st.integers(1, 400), min_size=1, max_size=60),
    words=st.integers(1, 300),
)
async def test_history_stays_in_its_budget_and_folds_once_per_fold(
    history_max: int, summary_max: int, turns: list[int], words: int
) -> None:
    store, backend = Store(), Backend(words)
    folder = _folder(store, backend, history_max, summary_max)
    since_fold: int | None = None
    for tokens in turns:
        before = len(backend.requests)
        pending = sum(t.turn.tokens for t in await store.turns_after(WHERE, _through(store)))
        summary_tokens = store.summary.tokens if store.summary and store.summary.content else 0
        history = await folder.history(OP, WHERE)
        assert history.tokens <= history_max
        calls = len(backend.requests) - before
        assert calls <= 1
        if history.fold is None:
            assert calls == 0 and summary_tokens + pending <= history_max
        else:
            assert summary_tokens + pending > history_max, "folds only when it would not fit"
            kept = [m for m in history.messages if not m.content.startswith(SUMMARY_PREFIX)]
            assert sum(len(m.content) for m in kept) <= max(folder.keep_tokens, 0)
            if since_fold is not None and tokens <= folder.keep_tokens:
                # the turns added since the last fold filled more than it left free
                assert since_fold > history_max - folder.keep_tokens - summary_tokens
            since_fold = 0
        store.add(tokens)
        if since_fold is not None:
            since_fold += tokens
    assert all(r.origin is Origin.SUMMARY and r.small for r in backend.requests)


def _through(store: Store) -> int:
    return store.summary.through_turn_id if store.summary is not None else 0


@pytest.mark.parametrize("summary_max", [0, 64])
async def test_a_refused_or_disabled_summary_cuts_oldest_first(summary_max: int) -> None:
    store, backend = Store(), Backend(10, refuse=True)
    for _ in range(10):
        store.add(50)
    folder = _folder(store, backend, 200, summary_max)
    history = await folder.history(OP, WHERE)
    assert history.tokens <= 200
    assert [m.content for m in history.messages] == ["x" * 50] * (history.tokens // 50)
    if summary_max == 0:
        assert history.fold is None and backend.requests == [] and store.summary is None
    else:
        assert history.fold is not None and history.fold.kind is FoldKind.CUT
        assert history.fold.refusal is not None and history.fold.refusal.level is Level.USER
        assert store.summary is not None and store.summary.content == ""
        assert store.summary.dropped_turns == 10 - len(history.messages)
        again = await folder.history(OP, WHERE)
        assert again.fold is None and len(backend.requests) == 1, "not retried per message"
        assert store.summary.summarised_turns == 0
