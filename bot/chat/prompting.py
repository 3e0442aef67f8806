"""The prompt-and-record half of governed chat (:class:`bot.chat.service.ChatService`
is the admission half: the queue, the operation, the call and its outcome). A
:class:`ChatPrompts` builds one message's :class:`llm.types.LLMRequest` (the persona's
system prompt, the conversation's history — folded or cut to CHAT_HISTORY_MAX_TOKENS —
and the message, routed to the main or small models), counts each turn once (raw and
scaled by TOKEN_SAFETY_FACTOR) and stores the answered turn. Counts are tokens; nothing
here touches the ledger but through the history folder's summary holds.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from bot.chat.contracts import ChatConfig, PromptCounter
from bot.chat.folding import FoldNote, HistoryFolder, PromptHistory
from bot.chat.persona import DEFAULT_PROMPT, ChatPersona, SystemCounts
from bot.chat.turns import MediaTurn
from bot.storage.repos import Conversation, History
from bot.storage.values import Turn
from budget.kernel.clock import Clock
from budget.pricing.tokens import TOKENS_REPLY_PRIMING, count_off_loop
from budget.protocol import OperationTicket
from budget.types import Origin
from llm.cascade.cascade import fingerprint
from llm.router import Route, Work, route
from llm.types import Completion, LLMRequest, Message, Priority

__all__ = ["SYSTEM_PROMPT", "ChatPrompts"]

log = logging.getLogger(__name__)

SYSTEM_PROMPT = DEFAULT_PROMPT


class ChatPrompts:
    """Builds requests, counts turns, records answers.

    Args:
        history: stored conversation turns (each with its raw token count).
        count_tokens: the token counter (``budget.pricing.tokens.TokenCounter``). Each text is
            counted once: the message when it arrives, the answer when it is stored;
            the prompt's count is the sum of the stored counts.
        clock: the one clock (a stored turn's time).
        config: chat knobs.
        short_answers: true while shedding caps answers (``long_answers``,
            :mod:`bot.ops.shedding`): max_tokens is then a quarter of
            CHAT_MAX_OUTPUT_TOKENS.
        folder: folds long histories into summaries (:mod:`bot.chat.folding`);
            ``None``: the newest turns that fit are sent, older ones cut.
    """

    def __init__(
        self,
        *,
        history: History,
        count_tokens: PromptCounter,
        clock: Clock,
        config: ChatConfig,
        short_answers: Callable[[], bool] | None = None,
        folder: HistoryFolder | None = None,
    ) -> None:
        self._history = history
        self._count = count_tokens
        self._clock = clock
        self._config = config
        self._short = short_answers
        self._folder = folder
        self._system_raw = SystemCounts(self.raw_turn)

    async def request(
        self,
        op: OperationTicket,
        where: Conversation,
        user_msg: Message,
        user_tokens: tuple[int, int],
        priority: int = Priority.CHAT,
        persona: ChatPersona | asyncio.Task[ChatPersona] | None = None,
    ) -> tuple[LLMRequest, FoldNote | None]:
        """The request for ``user_msg``: the system prompt, the history of ``where`` (at
        most CHAT_HISTORY_MAX_TOKENS: its summary and recent turns, folded first when
        needed — :mod:`bot.chat.folding`) and the message, routed to the main or small
        models (:mod:`llm.router`); its input tokens are the sum of the stored raw
        counts (``user_tokens``: the message's ceiling and raw counts), scaled once.
        The system prompt is the chat's persona (``persona``, or the task reading it,
        awaited after the history's read; ``None``: the default),
        its count part of the input held and of the router's context. A chosen model
        (``persona.model``) wins over the router's small one. Also the fold this
        message made, if any.

        Raises:
            HoldRefused: the summary's hold was refused for the whole message.
        """
        history = await self._history_of(op, where)
        if isinstance(persona, asyncio.Task):  # read while the history was (decision 302)
            persona = await persona
        system = Message("system", persona.prompt if persona is not None else SYSTEM_PROMPT)
        system_raw = await self._system_raw.raw(system.content)
        raw = TOKENS_REPLY_PRIMING + system_raw + user_tokens[1] + history.raw_tokens
        turns = list(history.messages)
        messages = (system, *turns, user_msg)
        # a photo's shorter prompt would still carry the image: the vision keys have no
        # ladder, and no small model either
        cheaper = (system, *turns[-2:], user_msg) if len(turns) > 2 else None
        chosen = route(
            Work.CHAT,
            self._config.router,
            text=user_msg.content,
            message_tokens=user_tokens[0],
            context_tokens=history.tokens + self._count.scale(system_raw),
        )
        if user_msg.images:
            cheaper, chosen = None, Route.MAIN
        model = persona.model if persona is not None else None
        cap = self._config.max_output_tokens
        if self._short is not None and self._short():
            cap = max(1, cap // 4)  # docs/decisions/141-shedding-in-a-set-order.md
        request = LLMRequest(
            messages=messages,
            max_tokens=cap,
            allow_paid=True,
            priority=priority,
            cheaper_messages=cheaper,
            fingerprint=fingerprint(messages),
            input_tokens=self._count.scale(raw),
            model=model,
            small=chosen is Route.SMALL and model is None,
            origin=Origin.VISION if user_msg.images else None,
            ends_operation=True,  # its settle ends the operation (the message's last step)
        )
        return request, history.fold

    async def _history_of(self, op: OperationTicket, where: Conversation) -> PromptHistory:
        """``where``'s history for the next prompt: folded (summaries on), else the
        newest turns that fit CHAT_HISTORY_MAX_TOKENS."""
        if self._folder is not None:
            return await self._folder.history(op, where)
        turns = await self._history.load_turns(where, self._config.history_max_tokens)
        return await PromptHistory.of(turns, self.raw_turn)

    def input_limit(self, media: MediaTurn | None) -> int:
        """The input cap of a turn, tokens: its media's, else CHAT_MAX_INPUT_TOKENS."""
        if media is not None and media.max_input_tokens is not None:
            return media.max_input_tokens
        return self._config.max_input_tokens

    async def turn_tokens(self, message: Message) -> tuple[int, int]:
        """``message``'s (scaled, raw) counts as one turn."""
        raw = await self.raw_turn(message)
        return self._count.scale(raw + TOKENS_REPLY_PRIMING), raw

    async def system_tokens(self, prompt: str) -> int:
        """What ``prompt`` as the system message adds to every request's input, tokens
        (scaled by TOKEN_SAFETY_FACTOR, as held), for ``/persona``."""
        return self._count.scale(await self._system_raw.raw(prompt))

    async def raw_turn(self, message: Message) -> int:
        """``message``'s raw count as one turn of a prompt (no factor, no priming),
        counted in the counting thread (a short one on the loop: see
        :data:`budget.pricing.tokens.INLINE_COUNT_CHARS`)."""
        raw = await count_off_loop(self._count.raw_messages, [message], chars=len(message.content))
        return raw - TOKENS_REPLY_PRIMING

    async def remember(
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
            answer_raw = await self.raw_turn(answer)
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
