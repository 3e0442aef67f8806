"""History that stays within CHAT_HISTORY_MAX_TOKENS: the oldest turns folded into a
running summary, charged as a step of the message that needed it.

The rule (docs/decisions/150-history-summaries-are-charged-steps.md):

* A conversation (user, chat, topic) is sent as its summary (if any) and the turns
  stored after it. While those fit CHAT_HISTORY_MAX_TOKENS, nothing is called.
* When they would not, the message folds: the newest turns that fit in half of what is
  left beside a summary (``keep``) stay; every older one is summarised, with the previous
  summary, by the cheapest available model (the router's small model, free first) in a
  request of the message's own operation — held and settled like any call, booked with
  ``origin=summary``, counted in OPERATION_MAX_USD and OPERATION_MAX_REQUESTS.
* Halving makes the next fold wait for about half a history's worth of new turns: one
  summary per fold, never one per message.
* When the summary cannot be afforded (a limit, the operation's cap) or no provider
  makes it, the folded turns are cut as before (the old summary, if any, is kept) and
  the answer still goes out, with a note saying so; the fold point moves on either way,
  so a failed summary is not retried on every following message. A refusal that stops
  the whole message (kill switch, in-flight slots, start rate, the ledger down) is raised
  and nothing is stored.

Privacy stays per (chat, topic, user): a summary is made of, stored with and sent to
that conversation only. ``/reset`` deletes it with the turns.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Protocol

from bot.storage.repos import Conversation
from bot.storage.summaries import NumberedTurn, StoredSummary
from bot.storage.values import Turn
from budget.errors import HoldRefused
from budget.kernel.clock import Clock
from budget.pricing.tokens import TOKENS_REPLY_PRIMING, count_off_loop
from budget.protocol import OperationTicket
from budget.types import Origin, Refusal, RefusalReason
from llm.cascade.cascade import fingerprint
from llm.errors import EmptyCompletion, LLMError
from llm.router import Route, RouterConfig, Work, route
from llm.types import Completion, LLMRequest, Message, Priority

__all__ = [
    "SUMMARY_PREFIX",
    "FoldKind",
    "FoldNote",
    "HistoryFolder",
    "PromptHistory",
    "SummaryStore",
    "raw_turn_counter",
]

log = logging.getLogger(__name__)

#: How a summary is put in later prompts: one system message after the system prompt.
SUMMARY_PREFIX = "Summary of the earlier conversation: "

SUMMARISER_PROMPT = (
    "You summarise a conversation so that it can continue without its older turns. "
    "Write one compact paragraph with every fact, name, number, preference, decision "
    "and open question in it, in the language of the conversation. "
    "Output only the summary."
)

#: Refusals that stop the whole message, not only its summary (the answer would be
#: refused the same way): raised to the service.
_MESSAGE_REFUSALS = frozenset(
    {
        RefusalReason.KILL,
        RefusalReason.INFLIGHT,
        RefusalReason.RATE,
        RefusalReason.UNAVAILABLE,
        RefusalReason.MESSAGES,
    }
)


class SummaryStore(Protocol):
    """What folding needs of :class:`bot.storage.summaries.Summaries`."""

    async def conversation(
        self, where: Conversation
    ) -> tuple[StoredSummary | None, list[NumberedTurn]]: ...

    async def save(self, where: Conversation, summary: StoredSummary, now: datetime) -> None: ...


class CompletionBackend(Protocol):
    """What folding needs of ``llm.cascade.cascade.Cascade``."""

    async def complete(self, op: OperationTicket, request: LLMRequest) -> Completion: ...


class FoldKind(StrEnum):
    """What a fold did."""

    SUMMARISED = "summarised"
    CUT = "cut"


@dataclass(frozen=True, slots=True)
class FoldNote:
    """A fold made for this message.

    Attributes:
        kind: the older turns were summarised, or cut (no summary could be made).
        turns: how many turns were folded.
        refusal: why a cut happened when the ledger refused the summary's hold
            (``None``: summarised, or no provider made it).
        cost_musd: what the summary's answering attempt was settled at (µUSD).
    """

    kind: FoldKind
    turns: int
    refusal: Refusal | None = None
    cost_musd: int = 0


@dataclass(frozen=True, slots=True)
class PromptHistory:
    """The history sent with one message.

    Attributes:
        messages: the summary (a system message) if any, then the turns, oldest first.
        raw_tokens: their raw counts summed (tokens, no factor, no priming).
        tokens: their ceiling counts summed (tokens; what CHAT_HISTORY_MAX_TOKENS bounds).
        fold: the fold this message made, ``None``: none.
    """

    messages: tuple[Message, ...]
    raw_tokens: int
    tokens: int
    fold: FoldNote | None = None

    @classmethod
    async def of(
        cls, turns: Sequence[Turn], raw_turn: Callable[[Message], Awaitable[int]]
    ) -> PromptHistory:
        """``turns`` as a prompt's history (a turn stored without its raw count is
        counted now)."""
        raw = 0
        for turn in turns:
            known = turn.raw_tokens
            raw += known if known is not None else await raw_turn(turn.message)
        return cls(tuple(t.message for t in turns), raw, sum(t.tokens for t in turns))


class HistoryFolder:
    """Builds a message's history, folding it when it would not fit.

    Args:
        summaries: the stored summaries and the turns after them.
        backend: the cascade (the summary is a request of the message's operation).
        raw_turn: a message's raw count as one prompt turn (tokens).
        scale: raw tokens → ceiling tokens (TOKEN_SAFETY_FACTOR).
        clock: the one clock.
        history_max_tokens: CHAT_HISTORY_MAX_TOKENS.
        summary_max_tokens: CHAT_SUMMARY_MAX_TOKENS (0: never summarise, cut).
        router: the router's knobs (a summary goes to the small model unless it is off).
    """

    def __init__(
        self,
        *,
        summaries: SummaryStore,
        backend: CompletionBackend,
        raw_turn: Callable[[Message], Awaitable[int]],
        scale: Callable[[int], int],
        clock: Clock,
        history_max_tokens: int,
        summary_max_tokens: int,
        router: RouterConfig,
    ) -> None:
        self._summaries = summaries
        self._backend = backend
        self._raw_turn = raw_turn
        self._scale = scale
        self._clock = clock
        self._max = history_max_tokens
        self._summary_max = summary_max_tokens
        self._router = router

    def __repr__(self) -> str:
        return f"HistoryFolder(max={self._max}, summary_max={self._summary_max})"

    @property
    def keep_tokens(self) -> int:
        """The most tokens of recent turns a fold keeps: half of what is left beside a
        summary at its cap (the summary's ceiling count, reply priming included)."""
        room = self._max - self._scale(self._summary_max + TOKENS_REPLY_PRIMING + 8)
        return max(0, room) // 2

    async def history(self, op: OperationTicket, where: Conversation) -> PromptHistory:
        """The history for the next message of ``where`` (folding it first if needed).

        Raises:
            HoldRefused: the summary's hold was refused for a reason that stops the
                whole message (kill switch, in-flight, rate, ledger unavailable).
            budget.errors.BudgetError: the ledger failed.
        """
        if self._max <= 0:
            return PromptHistory((), 0, 0)
        stored, turns = await self._summaries.conversation(where)
        summary_tokens = stored.tokens if stored is not None and stored.content else 0
        if summary_tokens + sum(t.turn.tokens for t in turns) <= self._max:
            return await self._assemble(stored, [t.turn for t in turns])
        if self._summary_max <= 0 or not turns:  # summaries off: cut oldest-first
            room = self._max - summary_tokens if turns else self._max
            return await self._assemble(stored if turns else None, _newest_fitting(turns, room))
        cut_at = _fold_point(turns, self.keep_tokens)
        folded, recent = turns[:cut_at], turns[cut_at:]
        new, note = await self._fold(op, stored, folded)
        try:
            await self._summaries.save(where, new, self._clock.now())
        except Exception:  # the answer matters more than the stored fold
            log.exception("history summary not stored (storage failure)")
        room = self._max - (new.tokens if new.content else 0)
        prompt = await self._assemble(new, _newest_fitting(recent, room))
        return PromptHistory(prompt.messages, prompt.raw_tokens, prompt.tokens, note)

    async def _fold(
        self, op: OperationTicket, stored: StoredSummary | None, folded: Sequence[NumberedTurn]
    ) -> tuple[StoredSummary, FoldNote]:
        """Summarise ``folded`` with ``stored``'s text; the new summary row and the note."""
        summarised = stored.summarised_turns if stored is not None else 0
        dropped = stored.dropped_turns if stored is not None else 0
        through = folded[-1].turn_id
        refusal: Refusal | None = None
        try:
            completion = await self._backend.complete(op, self._request(stored, folded))
        except HoldRefused as exc:
            if exc.refusal.reason in _MESSAGE_REFUSALS:
                raise
            refusal = exc.refusal
        except (LLMError, EmptyCompletion) as exc:
            log.info("history summary not made (%s): the older turns are cut", type(exc).__name__)
        else:
            text = completion.text.strip()
            if text:
                message = Message("system", SUMMARY_PREFIX + text)
                raw = await self._raw_turn(message)
                tokens = self._scale(raw + TOKENS_REPLY_PRIMING)
                if tokens <= self._max:
                    row = StoredSummary(
                        through, text, tokens, raw, summarised + len(folded), dropped
                    )
                    note = FoldNote(FoldKind.SUMMARISED, len(folded), None, completion.cost_musd)
                    return row, note
        # cut: the older summary (if any) stays; the folded turns are dropped
        keep = stored if stored is not None else None
        row = StoredSummary(
            through,
            keep.content if keep is not None else "",
            keep.tokens if keep is not None else 0,
            keep.raw_tokens if keep is not None else 0,
            summarised,
            dropped + len(folded),
        )
        return row, FoldNote(FoldKind.CUT, len(folded), refusal)

    def _request(self, stored: StoredSummary | None, folded: Sequence[NumberedTurn]) -> LLMRequest:
        """The summary request: the summariser prompt, the older summary and the
        folded turns as one transcript (small model unless routing is off)."""
        lines = []
        if stored is not None and stored.content:
            lines.append("Earlier summary:\n" + stored.content + "\n")
        lines.append("Conversation to add:")
        for item in folded:
            who = "Assistant" if item.turn.message.role == "assistant" else "User"
            lines.append(f"{who}: {item.turn.message.content}")
        messages = (Message("system", SUMMARISER_PROMPT), Message("user", "\n".join(lines)))
        small = route(Work.SUMMARY, self._router) is Route.SMALL
        return LLMRequest(
            messages=messages,
            max_tokens=self._summary_max,
            allow_paid=True,
            priority=Priority.CHAT,
            fingerprint=fingerprint(messages),
            small=small,
            origin=Origin.SUMMARY,
        )

    async def _assemble(
        self, summary: StoredSummary | None, turns: Sequence[Turn]
    ) -> PromptHistory:
        """The prompt's history: the summary message (if any), then ``turns``."""
        plain = await PromptHistory.of(turns, self._raw_turn)
        if summary is None or not summary.content:
            return plain
        message = Message("system", SUMMARY_PREFIX + summary.content)
        return PromptHistory(
            (message, *plain.messages),
            plain.raw_tokens + summary.raw_tokens,
            plain.tokens + summary.tokens,
        )


def raw_turn_counter(
    raw_messages: Callable[[Sequence[Message]], int],
) -> Callable[[Message], Awaitable[int]]:
    """A message's raw count as one turn of a prompt (no factor, no priming), counted
    in the counting thread as the chat service counts its turns
    (:func:`budget.pricing.tokens.count_off_loop`)."""

    async def raw_turn(message: Message) -> int:
        raw = await count_off_loop(raw_messages, [message], chars=len(message.content))
        return raw - TOKENS_REPLY_PRIMING

    return raw_turn


def _fold_point(turns: Sequence[NumberedTurn], keep: int) -> int:
    """Index of the first turn kept: the newest turns whose counts sum to at most
    ``keep`` stay (at least one turn is folded)."""
    total = 0
    index = len(turns)
    while index > 1 and total + turns[index - 1].turn.tokens <= keep:
        total += turns[index - 1].turn.tokens
        index -= 1
    return index


def _newest_fitting(turns: Sequence[NumberedTurn], budget: int) -> list[Turn]:
    """The newest turns whose counts sum to at most ``budget``, oldest first (the
    cut-oldest-first rule)."""
    kept: list[Turn] = []
    total = 0
    for item in reversed(turns):
        if total + item.turn.tokens > budget:
            break
        total += item.turn.tokens
        kept.append(item.turn)
    kept.reverse()
    return kept
