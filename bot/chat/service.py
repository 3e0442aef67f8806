"""Governed chat: the one place where a chat message meets the budget.

One private message = one *operation* (see ``budget.types``). :class:`ChatService`
admits it through the ledger (kill switch, in-flight slots, start rate), builds the
prompt from stored history, sends one request through the cascade (each attempt
holds, then settles or releases), and returns an outcome value — with what the
operation was charged — that :mod:`bot.chat.reply` turns into the reply.
It never builds user-facing text and never lets an exception's text out.

Per-user queue: a user's messages take an in-flight slot in the order Telegram
delivered them (USER_MAX_INFLIGHT slots); up to USER_QUEUE_MAX more wait for one, and
take their hold only when they start. The newest messages beyond that are refused at
once. Lanes are dropped when empty, so the per-user map does not grow without bound.
With replicas sharing a PostgreSQL database (``lanes``: :mod:`bot.chat.lanes`) a message's
place also counts the user's earlier unfinished messages in that chat held by the other
live replicas, so the queue and its order hold across them.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager, nullcontext
from dataclasses import dataclass
from typing import Protocol

from bot.chat.lanes import POLL_S, LaneStore
from bot.chat.outcome import ChatAnswer, ChatFailed, ChatOutcome, ChatRefused, FailureKind
from bot.storage.repos import Conversation, History
from bot.storage.values import Turn
from budget.errors import BudgetError, HoldRefused
from budget.kernel.clock import Clock
from budget.kernel.tasks import ended_within
from budget.pricing.tokens import TOKENS_REPLY_PRIMING, count_off_loop
from budget.protocol import LedgerPort, OperationTicket
from budget.types import Origin
from llm.cascade.cascade import fingerprint
from llm.errors import EmptyCompletion, LLMError, ProviderRejected
from llm.stream import StreamControl
from llm.types import Completion, LLMRequest, Message, Priority

__all__ = ["ChatConfig", "ChatService", "CompletionBackend", "run_guarded"]

log = logging.getLogger(__name__)

#: Seconds a drain gives stopped streams to settle and deliver their text before it
#: cancels them (a stop closes the provider connection at once; what remains is a
#: ledger write and one or two Bot API calls).
STOP_WAIT_S = 5.0
#: Seconds a drain gives the operations it cancelled to end (each settles its hold).
CANCEL_WAIT_S = 5.0

SYSTEM_PROMPT = (
    "You are Kopek, a concise and helpful assistant in a Telegram chat. "
    "Answer in the language of the user's message. Use Markdown sparingly."
)


class PromptCounter(Protocol):
    """What the chat needs of ``budget.pricing.tokens.TokenCounter``."""

    def raw_messages(self, messages: Sequence[Message]) -> int: ...

    def scale(self, raw: int) -> int: ...


class CompletionBackend(Protocol):
    """What the chat needs of ``llm.cascade.cascade.Cascade``."""

    async def complete(
        self, op: OperationTicket, request: LLMRequest, *, stream: StreamControl | None = None
    ) -> Completion: ...


@dataclass(frozen=True, slots=True)
class ChatConfig:
    """Chat knobs (tokens; counts)."""

    max_output_tokens: int = 1024
    max_input_tokens: int = 4000
    history_max_tokens: int = 3000
    user_max_inflight: int = 2
    user_queue_max: int = 3


#: A message's place in its user's queue: (chat id, message id).
MessageKey = tuple[int, int]


class _UserQueue:
    """One user's messages in arrival order: the first USER_MAX_INFLIGHT run, the next
    USER_QUEUE_MAX wait, anything after that is refused."""

    __slots__ = ("changed", "order")

    def __init__(self) -> None:
        self.order: list[MessageKey] = []
        self.changed = asyncio.Event()

    def notify(self) -> None:
        self.changed.set()
        self.changed = asyncio.Event()


class ChatService:
    """Admits, prompts, calls, records.

    Args:
        ledger: the reservation ledger.
        backend: the provider cascade.
        history: stored conversation turns (each with its raw token count).
        count_tokens: the token counter (``budget.pricing.tokens.TokenCounter``). Each text is
            counted once: the message when it arrives, the answer when it is stored;
            the prompt's count is the sum of the stored counts (exactly what counting
            the whole prompt would give), handed to the cascade.
        clock: the one clock.
        config: chat knobs.
        count_messages: count each message against the courtesy daily cap
            (USER_DAILY_MESSAGES) in its operation's admission (``HoldRefused``, reason
            ``messages``, past it; docs/decisions/132-two-ledger-steps.md).
        lanes: the other replicas' unfinished messages of a user (``None``: one process).
    """

    def __init__(
        self,
        *,
        ledger: LedgerPort,
        backend: CompletionBackend,
        history: History,
        count_tokens: PromptCounter,
        clock: Clock,
        config: ChatConfig,
        count_messages: bool = False,
        lanes: LaneStore | None = None,
    ) -> None:
        self._ledger = ledger
        self._shared_lanes = lanes
        self._count_messages = count_messages
        self._backend = backend
        self._history = history
        self._count = count_tokens
        self._system_raw: int | None = None
        self._clock = clock
        self._config = config
        self._lanes: dict[int, _UserQueue] = {}
        self._tasks: set[asyncio.Task[object]] = set()
        self._anonymous = itertools.count(1)
        self.closing = False

    def __repr__(self) -> str:
        return f"ChatService(lanes={len(self._lanes)}, in_flight={len(self._tasks)})"

    @property
    def in_flight(self) -> int:
        """Chat operations being handled now."""
        return len(self._tasks)

    def arrive(self, user_id: int, key: MessageKey) -> None:
        """Register a message in its user's order *before* anything awaits.

        aiogram handles updates as concurrent tasks, and the awaits in the middlewares
        finish in any order; the first (synchronous) middleware calls this so messages
        are served in the order Telegram delivered them. ``key`` is (chat id, message id).
        """
        lane = self._lanes.get(user_id)
        if lane is None:
            lane = self._lanes[user_id] = _UserQueue()
        if key not in lane.order:
            lane.order.append(key)

    def depart(self, user_id: int, key: MessageKey) -> None:
        """Forget a message (answered, refused, or not a chat message after all)."""
        lane = self._lanes.get(user_id)
        if lane is None or key not in lane.order:
            return
        lane.order.remove(key)
        lane.notify()
        if not lane.order:
            del self._lanes[user_id]

    async def handle(
        self,
        user_id: int,
        text: str,
        *,
        chat_id: int,
        thread_id: int | None,
        key: MessageKey | None = None,
        activity: Callable[[], AbstractAsyncContextManager[object]] | None = None,
        stream: StreamControl | None = None,
    ) -> ChatOutcome:
        """Answer one message, or say why not. Never raises for expected failures.

        Args:
            user_id: the Telegram user charged.
            text: the message.
            chat_id: the chat it was sent in, and
            thread_id: its forum topic (``None``: none) — the history sent with it
                and stored after it is the user's in that chat and topic only
                (:class:`bot.storage.repos.Conversation`).
            key: (chat id, message id) registered with :meth:`arrive` (its place in the
                user's queue); ``None`` puts it at the end now.
            activity: a context manager factory shown while the model works
                (the handler passes a "typing…" sender); entered once the
                operation is admitted, left on every outcome.
            stream: stream the answer through this control (see
                :meth:`llm.cascade.cascade.Cascade.complete`); ``None`` = one piece.
        """
        if key is None:
            key = (0, -next(self._anonymous))
        self.arrive(user_id, key)
        try:
            where = Conversation(chat_id, thread_id, user_id)
            return await self._in_turn(where, key, text, activity, stream)
        finally:
            self.depart(user_id, key)

    async def _in_turn(
        self,
        where: Conversation,
        key: MessageKey,
        text: str,
        activity: Callable[[], AbstractAsyncContextManager[object]] | None,
        stream: StreamControl | None = None,
    ) -> ChatOutcome:
        if self.closing:
            return ChatFailed(FailureKind.SHUTDOWN)
        user_id = where.user_id
        lane = self._lanes[user_id]
        slots = self._config.user_max_inflight
        try:
            place = await self._place(user_id, lane, key)
        except HoldRefused as exc:  # the shared queue cannot be read: fail closed
            return ChatRefused(exc.refusal, running=False)
        if place >= slots + self._config.user_queue_max:
            return ChatFailed(FailureKind.QUEUE_FULL, running=True)
        user_msg = Message("user", text)
        user_raw = await self._raw_turn(user_msg)
        tokens = self._count.scale(user_raw + TOKENS_REPLY_PRIMING)
        if tokens > self._config.max_input_tokens:
            return ChatFailed(
                FailureKind.TOO_LONG, tokens=tokens, limit=self._config.max_input_tokens
            )
        try:
            while (place := await self._place(user_id, lane, key)) >= slots:
                await self._wait_turn(lane)
        except HoldRefused as exc:
            return ChatRefused(exc.refusal, running=place > 0)
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        try:
            others = place > 0
            return await self._admitted(
                where, user_msg, (tokens, user_raw), others, activity, stream
            )
        finally:
            if task is not None:
                self._tasks.discard(task)

    async def _place(self, user_id: int, lane: _UserQueue, key: MessageKey) -> int:
        """``key``'s place in its user's queue (0 = first): this process's messages
        before it, plus (shared) the other live replicas' unfinished earlier ones.

        Raises:
            budget.errors.LedgerUnavailable: the shared queue cannot be read.
        """
        place = lane.order.index(key)
        if self._shared_lanes is not None and key[1] > 0:
            place += await self._shared_lanes.ahead(user_id, key[0], key[1])
        return place

    async def _wait_turn(self, lane: _UserQueue) -> None:
        """Until one of this process's messages of the user ends or (shared) for
        :data:`bot.chat.lanes.POLL_S` seconds."""
        if self._shared_lanes is None:
            await lane.changed.wait()
            return
        changed = asyncio.ensure_future(lane.changed.wait())
        pause = asyncio.ensure_future(self._clock.sleep(POLL_S))
        try:
            await asyncio.wait({changed, pause}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in (changed, pause):
                waiter.cancel()
            await asyncio.gather(changed, pause, return_exceptions=True)

    async def _admitted(
        self,
        where: Conversation,
        user_msg: Message,
        user_tokens: tuple[int, int],
        others_running: bool,
        activity: Callable[[], AbstractAsyncContextManager[object]] | None,
        stream: StreamControl | None = None,
    ) -> ChatOutcome:
        if self.closing:
            return ChatFailed(FailureKind.SHUTDOWN)
        try:
            # admitted with its first hold (and the message counted), in that hold's
            # ledger step (docs/decisions/011-sqlite-single-writer.md, "Deferred
            # admission"; 132); a refusal of the admission then comes from the
            # cascade, handled below
            op = await self._ledger.begin_operation(
                where.user_id, Origin.CHAT, deferred=True, count_message=self._count_messages
            )
        except HoldRefused as exc:
            return ChatRefused(exc.refusal, running=others_running)
        completion: Completion | None = None
        try:
            request = await self._request(where, user_msg, user_tokens[1])
            ctx = activity() if activity is not None else nullcontext()
            async with ctx:
                if stream is None:
                    completion = await self._backend.complete(op, request)
                else:
                    completion = await self._backend.complete(op, request, stream=stream)
            await self._remember(where, user_msg, user_tokens, completion)
            # the answering attempt's cost is the whole bill when no other provider was
            # tried first; otherwise one of them may have been billed too: ask the ledger
            charged = (
                completion.cost_musd if not completion.fallbacks else await self._booked_musd(op)
            )
            return ChatAnswer(completion, charged)
        except HoldRefused as exc:
            return ChatRefused(exc.refusal, running=others_running)
        except ProviderRejected:
            return ChatFailed(FailureKind.REJECTED, charged_musd=await self._booked_musd(op))
        except EmptyCompletion as exc:
            # billed, and its template claims nothing about money: cost_musd says what
            return ChatFailed(FailureKind.EMPTY, cost_musd=exc.cost_musd)
        except LLMError:
            return ChatFailed(FailureKind.UNAVAILABLE, charged_musd=await self._booked_musd(op))
        except Exception:  # last-resort guard inside the operation: what did it cost?
            log.exception("chat operation failed unexpectedly")
            return ChatFailed(FailureKind.ERROR, charged_musd=await self._booked_musd(op))
        finally:
            try:
                if completion is None or not completion.operation_ended:
                    await self._ledger.end_operation(op)
            except BudgetError:
                # storage failed: the slot expires with the operation's TTL; an answer
                # that exists is still delivered
                log.exception("could not end operation %s", op.operation_id)

    async def _request(self, where: Conversation, user_msg: Message, user_raw: int) -> LLMRequest:
        """The request for ``user_msg``: the system prompt, the stored history of ``where``
        (at most CHAT_HISTORY_MAX_TOKENS) and the message; its input tokens are the sum
        of the stored raw counts (``user_raw``: the message's), scaled once."""
        turns = await self._history.load_turns(where, self._config.history_max_tokens)
        history = [turn.message for turn in turns]
        system = Message("system", SYSTEM_PROMPT)
        if self._system_raw is None:
            self._system_raw = await self._raw_turn(system)
        raw = TOKENS_REPLY_PRIMING + self._system_raw + user_raw
        for turn in turns:
            known = turn.raw_tokens
            raw += known if known is not None else await self._raw_turn(turn.message)
        messages = (system, *history, user_msg)
        cheaper = (system, *history[-2:], user_msg) if len(history) > 2 else None
        return LLMRequest(
            messages=messages,
            max_tokens=self._config.max_output_tokens,
            allow_paid=True,
            priority=Priority.CHAT,
            cheaper_messages=cheaper,
            fingerprint=fingerprint(messages),
            input_tokens=self._count.scale(raw),
            ends_operation=True,  # one request per message: its settle ends the operation
        )

    async def _raw_turn(self, message: Message) -> int:
        """``message``'s raw count as one turn of a prompt (no factor, no priming),
        counted in the counting thread (a short one on the loop: see
        :data:`budget.pricing.tokens.INLINE_COUNT_CHARS`)."""
        raw = await count_off_loop(self._count.raw_messages, [message], chars=len(message.content))
        return raw - TOKENS_REPLY_PRIMING

    async def _remember(
        self,
        where: Conversation,
        user_msg: Message,
        user_tokens: tuple[int, int],
        completion: Completion,
    ) -> None:
        """Store the turn; the answer's tokens are the ones Kopek counts for the
        stored (possibly cut) text, never the provider's claim. A storage failure
        loses the turn, not the answer."""
        try:
            answer = Message("assistant", completion.text)
            answer_raw = await self._raw_turn(answer)
            answer_tokens = self._count.scale(answer_raw + TOKENS_REPLY_PRIMING)
            await self._history.append(
                where,
                [
                    Turn(user_msg, user_tokens[0], user_tokens[1]),
                    Turn(answer, answer_tokens, answer_raw),
                ],
                self._clock.now(),
            )
        except Exception:
            log.exception("chat history not stored (storage failure); the answer is delivered")

    async def _booked_musd(self, op: OperationTicket | None) -> int | None:
        """What the ledger booked for ``op`` (µUSD; 0 for no operation), ``None`` when
        the ledger cannot answer — so a template never guesses "nothing was charged"."""
        if op is None:
            return 0
        try:
            return await self._ledger.operation_booked_musd(op)
        except Exception:  # an unreadable ledger must not hide the failure being reported
            log.warning("could not read what operation %s booked", op.operation_id, exc_info=True)
            return None

    async def drain(
        self,
        grace_s: float,
        *,
        stop_streams: Callable[[], int] | None = None,
        stop_wait_s: float = STOP_WAIT_S,
    ) -> None:
        """Refuse new work; let in-flight operations finish for ``grace_s`` seconds.
        Then streams still running are stopped (``stop_streams``, e.g.
        ``StreamRegistry.stop_all("shutdown")``: each settles on what it received, as a
        Stop does, and its handler sends the text so far, marked) and given
        ``stop_wait_s`` seconds to do so; whatever is left is cancelled (the cascade
        settles interrupted calls by the ledger's rule). Seconds of the injected clock
        (``docs/decisions/020-clock-rule.md``)."""
        self.closing = True
        pending = set(self._tasks)
        if not pending:
            return
        still = await self._ended_within(pending, grace_s)
        if still and stop_streams is not None and stop_streams():
            still = await self._ended_within(still, stop_wait_s)
        for task in still:
            task.cancel()
        if still:
            await self._ended_within(still, CANCEL_WAIT_S)

    async def _ended_within(
        self, tasks: set[asyncio.Task[object]], seconds: float
    ) -> set[asyncio.Task[object]]:
        """Wait until every task of ``tasks`` ended or the clock slept ``seconds``; the
        tasks still running then (none is cancelled here)."""
        return await ended_within(tasks, seconds, self._clock)


async def run_guarded(coro: Awaitable[ChatOutcome]) -> ChatOutcome:
    """Await ``coro``; any unexpected exception becomes a ``FailureKind.ERROR`` (logged)."""
    try:
        return await coro
    except asyncio.CancelledError:
        raise
    except Exception:  # last-resort guard: the user gets a template, not a trace
        log.exception("chat operation failed unexpectedly")
        return ChatFailed(FailureKind.ERROR)
