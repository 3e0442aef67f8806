"""Governed chat: the one place where a chat message meets the budget. One message = one
*operation* (``budget.types``): :class:`ChatService` admits it through the ledger, builds
the prompt (persona, history, message), calls the cascade (each call holds, then settles
or releases; the tool loop's steps too) and returns an outcome value with what the
operation was charged, for :mod:`bot.chat.reply`; never user-facing or exception text.
The prompt and the stored turn (building the request, counting turns, recording the
answer) are :mod:`bot.chat.prompting`'s; this module is the queue, the operation, the
call and its outcome.

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
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager, nullcontext
from dataclasses import replace

from bot.chat import outcome
from bot.chat.contracts import ChatConfig, CompletionBackend, PromptCounter
from bot.chat.draining import CANCEL_WAIT_S, STOP_WAIT_S, Draining
from bot.chat.folding import HistoryFolder
from bot.chat.lanes import LaneStore
from bot.chat.outcome import ChatAnswer, ChatFailed, ChatOutcome, FailureKind, refused_outcome
from bot.chat.persona import ChatPersona
from bot.chat.prompting import SYSTEM_PROMPT, ChatPrompts
from bot.chat.tool_loop import ToolLoop, ToolRun
from bot.chat.tools import ChatTools
from bot.chat.turns import MediaTurn, PlanTurn
from bot.chat.user_lanes import UserLanes
from bot.chat.user_queue import MessageKey
from bot.media.refusals import MediaRefused
from bot.storage.repos import Conversation, History
from budget.errors import BudgetError, HoldRefused
from budget.kernel.clock import Clock
from budget.plans import Plan
from budget.pricing.tokens import TOKENS_REPLY_PRIMING
from budget.protocol import LedgerPort, OperationTicket
from budget.types import Origin
from llm.errors import EmptyCompletion, LLMError, ProviderRejected
from llm.stream import StreamControl
from llm.types import Completion, LLMRequest, Message, Priority

__all__ = [
    "CANCEL_WAIT_S",
    "SHED_LONG",
    "STOP_WAIT_S",
    "SYSTEM_PROMPT",
    "ChatConfig",
    "ChatPersona",
    "ChatService",
    "CompletionBackend",
]

#: The degradation step named on an answer asked with a shed max_tokens (its note).
SHED_LONG = "shed_long_answers"

log = logging.getLogger(__name__)


class ChatService(Draining):
    """Admits, prompts, calls, records.

    Args:
        ledger: the reservation ledger.
        backend: the provider cascade.
        history, count_tokens, short_answers, folder: the prompt's parts, as
            :class:`bot.chat.prompting.ChatPrompts` takes them (the prompt's count, the
            sum of the stored counts, is handed to the cascade; an answer stopped at a
            shed max_tokens says so).
        clock: the one clock.
        config: chat knobs.
        count_messages: count each message against the courtesy daily cap
            (USER_DAILY_MESSAGES) in its operation's admission (``HoldRefused``, reason
            ``messages``, past it; docs/decisions/132-two-ledger-steps.md).
        lanes: the other replicas' unfinished messages of a user (``None``: one process).
        tools: the model's tools (CHAT_TOOLS; ``None`` or none enabled: one call per
            message); each step of the loop is a request of the message's operation
            (:mod:`bot.chat.tool_loop`).
        vision: the cascade of vision keys, which answers a turn with images
            (``None``: none configured; the handlers refuse photos before this).
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
        tools: ChatTools | None = None,
        short_answers: Callable[[], bool] | None = None,
        vision: CompletionBackend | None = None,
        folder: HistoryFolder | None = None,
    ) -> None:
        self._ledger = ledger
        self.vision = vision
        self._count_messages = count_messages
        self._backend = backend
        self._count = count_tokens
        self._prompts = ChatPrompts(
            history=history,
            count_tokens=count_tokens,
            clock=clock,
            config=config,
            short_answers=short_answers,
            folder=folder,
        )
        self._tool_loop: ToolLoop | None = None
        if tools is not None:
            self.use_tools(tools)
        self._config = config
        self._clock = clock  # the drain's grace runs on it (bot.chat.draining)
        self._lanes = UserLanes(lanes, clock)
        self._tasks: set[asyncio.Task[object]] = set()
        self._anonymous = itertools.count(1)
        self.closing = False

    def __repr__(self) -> str:
        return f"ChatService(lanes={len(self._lanes)}, in_flight={len(self._tasks)})"

    def use_tools(self, tools: ChatTools) -> None:
        """Give the model ``tools`` from now on (none enabled: one call per message)."""
        self._tool_loop = (
            ToolLoop(self._backend.complete, tools, self._prompts.raw_turn, self._count.scale)
            if tools.specs
            else None
        )

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
        self._lanes.arrive(user_id, key)

    def depart(self, user_id: int, key: MessageKey) -> None:
        """Forget a message (answered, refused, or not a chat message after all)."""
        self._lanes.depart(user_id, key)

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
        persona: ChatPersona | asyncio.Task[ChatPersona] | None = None,
        media: MediaTurn | None = None,
        plan: Plan | None = None,
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
            persona: the chat's system prompt and model (``/persona``, ``/model``), or
                the task reading them (awaited once the history is read);
                ``None``: the default prompt, the cascade's own models.
            media: what a voice note, photo, document or link adds (``None``: typed text).
            plan: the user's plan: its concurrency replaces USER_MAX_INFLIGHT in the
                queue, and its priority orders the provider-call slot (``None``: neither).
        """
        if key is None:
            key = (0, -next(self._anonymous))
        self.arrive(user_id, key)
        turn = PlanTurn.of(plan, self._config.user_max_inflight)
        try:
            where = Conversation(chat_id, thread_id, user_id)
            return await self._in_turn(where, key, text, activity, stream, media, turn, persona)
        finally:
            self.depart(user_id, key)

    async def _in_turn(
        self,
        where: Conversation,
        key: MessageKey,
        text: str,
        activity: Callable[[], AbstractAsyncContextManager[object]] | None,
        stream: StreamControl | None = None,
        media: MediaTurn | None = None,
        turn: PlanTurn | None = None,
        persona: ChatPersona | asyncio.Task[ChatPersona] | None = None,
    ) -> ChatOutcome:
        if self.closing:
            return ChatFailed(FailureKind.SHUTDOWN)
        user_id = where.user_id
        lane = self._lanes[user_id]
        turn = turn or PlanTurn.of(None, self._config.user_max_inflight)
        slots = turn.slots
        try:
            place = await self._lanes.place(user_id, key)
        except HoldRefused as exc:  # the shared queue cannot be read: fail closed
            return refused_outcome(exc, running=False)
        if place >= slots + self._config.user_queue_max:
            return ChatFailed(FailureKind.QUEUE_FULL, running=True)
        user_msg = Message("user", text, media.images if media is not None else ())
        user_raw = await self._prompts.raw_turn(user_msg)
        tokens = self._count.scale(user_raw + TOKENS_REPLY_PRIMING)
        limit = self._prompts.input_limit(media)
        if tokens > limit:
            return ChatFailed(FailureKind.TOO_LONG, tokens=tokens, limit=limit)
        try:
            # a place within the slots stays so (only earlier messages leave): read
            # again only while waiting, not a second identical read per message
            while place >= slots and (place := await self._lanes.place(user_id, key)) >= slots:
                await self._lanes.wait_turn(user_id)
        except HoldRefused as exc:  # the shared queue cannot be read: only ours is known
            return refused_outcome(exc, running=lane.order.index(key) > 0)
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        try:
            others = place > 0 and await self._lanes.running_ahead(user_id, key)
            return await self._admitted(
                where,
                user_msg,
                (tokens, user_raw),
                others,
                activity,
                stream,
                media,
                turn.priority,
                persona,
            )
        finally:
            if task is not None:
                self._tasks.discard(task)

    async def _admitted(
        self,
        where: Conversation,
        user_msg: Message,
        user_tokens: tuple[int, int],
        others_running: bool,
        activity: Callable[[], AbstractAsyncContextManager[object]] | None,
        stream: StreamControl | None = None,
        media: MediaTurn | None = None,
        priority: int = Priority.CHAT,
        persona: ChatPersona | asyncio.Task[ChatPersona] | None = None,
    ) -> ChatOutcome:
        if self.closing:
            return ChatFailed(FailureKind.SHUTDOWN)
        # a value until the ledger's first call on it, which admits it (with its first
        # hold, the message counted, in that hold's step where the store defers
        # admission: decisions 011 "Deferred admission", 132); its refusal then comes
        # from the cascade, handled below. A group (negative id) pays too (decision 110)
        group = where.chat_id if where.chat_id < 0 else None
        op = OperationTicket.open(
            where.user_id, Origin.CHAT, count_message=self._count_messages, chat_id=group
        )
        completion: Completion | None = None
        step = "answer"  # what a refused hold was for (the refusal names it)
        try:
            if media is not None and media.transcribe is not None:
                step = "transcription"
                heard = await self._transcribed(op, media, media.transcribe)
                if isinstance(heard, ChatFailed):
                    return heard
                user_msg, user_tokens = heard
            step = media.answer_step if media is not None else "answer"
            request, fold = await self._prompts.request(
                op, where, user_msg, user_tokens, priority, persona
            )
            run = await self._run(op, request, where.user_id, activity, stream)
            completion = run.completion
            if request.max_tokens < self._config.max_output_tokens:
                completion = replace(completion, degraded=(*completion.degraded, SHED_LONG))
            if media is not None and media.stored is not None:
                user_msg = Message("user", media.stored)
                user_tokens = await self._prompts.turn_tokens(user_msg)
            await self._prompts.remember(where, user_msg, user_tokens, completion)
            # the answering attempt's cost is the whole bill when it was the one call and
            # no other provider was tried first; otherwise one of them may have been billed
            # too: ask the ledger (and a history summary, when this message folded one)
            alone = run.steps == 1 and not completion.fallbacks and fold is None
            charged = completion.cost_musd if alone else await self._booked_musd(op)
            return ChatAnswer(completion, charged, run.steps, run.calls, run.stop, fold)
        except HoldRefused as exc:
            called = self._ledger.held_any(op)
            return refused_outcome(exc, running=others_running, called=called, step=step)
        except MediaRefused as exc:
            booked = await self._booked_musd(op)
            return ChatFailed(FailureKind.MEDIA, media=exc.refusal, charged_musd=booked)
        except ProviderRejected:
            return ChatFailed(FailureKind.REJECTED, charged_musd=await self._booked_musd(op))
        except EmptyCompletion as exc:
            # billed, and its template claims nothing about money: cost_musd says what
            return ChatFailed(FailureKind.EMPTY, cost_musd=exc.cost_musd)
        except LLMError as exc:
            return outcome.unavailable_outcome(exc, await self._booked_musd(op))
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

    async def _run(
        self,
        op: OperationTicket,
        request: LLMRequest,
        user_id: int,
        activity: Callable[[], AbstractAsyncContextManager[object]] | None,
        stream: StreamControl | None,
    ) -> ToolRun:
        """``request`` answered: by the tool loop (CHAT_TOOLS), else one call; a turn
        with images by the vision keys (which take no tools)."""
        images = request.messages[-1].images
        backend = self.vision if images and self.vision else self._backend
        async with activity() if activity is not None else nullcontext():
            if self._tool_loop is not None and backend is self._backend:
                return await self._tool_loop.run(op, request, user_id, stream)
            if stream is None:
                return ToolRun(await backend.complete(op, request), 1, ())
            return ToolRun(await backend.complete(op, request, stream=stream), 1, ())

    async def _transcribed(
        self,
        op: OperationTicket,
        media: MediaTurn,
        transcribe: Callable[[OperationTicket], Awaitable[str]],
    ) -> tuple[Message, tuple[int, int]] | ChatFailed:
        """The operation's first step for a voice note: its transcript as the user's
        turn with its counts, or ``too_long`` (the transcription stays booked)."""
        user_msg = Message("user", await transcribe(op))
        tokens = await self._prompts.turn_tokens(user_msg)
        limit = self._prompts.input_limit(media)
        if tokens[0] <= limit:
            return user_msg, tokens
        booked = await self._booked_musd(op)
        return ChatFailed(FailureKind.TOO_LONG, tokens=tokens[0], limit=limit, charged_musd=booked)

    async def system_tokens(self, prompt: str) -> int:
        """What ``prompt`` as the system message adds to every request's input, tokens
        (scaled by TOKEN_SAFETY_FACTOR, as held), for ``/persona``."""
        return await self._prompts.system_tokens(prompt)

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
