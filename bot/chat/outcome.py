"""What the chat service returns for one message: an answer, a refusal or a failure.

Values only: :class:`bot.chat.service.ChatService` makes them, :mod:`bot.chat.reply`
turns them into the reply. None carries text for the user (templates do).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from dataclasses import dataclass
from enum import StrEnum

from bot.chat.folding import FoldNote
from bot.media.refusals import MediaProblem, MediaRefusal
from budget.errors import HoldRefused, LedgerUnavailable
from budget.types import Refusal
from llm.errors import AllProvidersFailed, LLMError, MediaTooLarge
from llm.types import Completion

__all__ = [
    "ChatAnswer",
    "ChatFailed",
    "ChatOutcome",
    "ChatRefused",
    "FailureKind",
    "refused_outcome",
    "run_guarded",
    "unavailable_outcome",
]

log = logging.getLogger("bot.chat.service")  # the chat service's own lines


@dataclass(frozen=True, slots=True)
class ChatAnswer:
    """The model answered.

    Attributes:
        completion: the answer, as the cascade settled it.
        charged_musd: what the ledger booked for the whole operation (µUSD): the
            answering attempt's settled cost when it was the only provider tried,
            else the operation's total read from the ledger once it ended (a provider
            passed over after its call started may have been billed too); ``None``
            when the ledger could not answer. Told the user only when the answer
            could not be delivered (``docs/decisions/021-chat-reply.md``).
        steps: model calls the answer took (more than 1: tools were called).
        tools_called: the tools called, in order.
        tool_stop: the ledger's refusal that ended the tool loop early (the answer is
            the text so far).
        fold: the history fold this message made (summarised or cut), ``None``: none.
    """

    completion: Completion
    charged_musd: int | None = 0
    steps: int = 1
    tools_called: tuple[str, ...] = ()
    tool_stop: Refusal | None = None
    fold: FoldNote | None = None


@dataclass(frozen=True, slots=True)
class ChatRefused:
    """The ledger refused; ``running`` = another of the user's requests is still in flight;
    ``retry`` = the ledger failed closed before any provider call was made for the
    message (no hold granted): it may be tried again whole (:mod:`bot.chat.ledger_wait`)."""

    refusal: Refusal
    running: bool
    retry: bool = False
    #: what the refused hold was for (:func:`bot.text.templates.refusal_text`'s ``step``)
    step: str = "answer"


class FailureKind(StrEnum):
    """Why a chat message got no answer (the value is also the refusal metric's label)."""

    TOO_LONG = "too_long"  # the prompt exceeds CHAT_MAX_INPUT_TOKENS
    QUEUE_FULL = "queue_full"  # USER_QUEUE_MAX messages already wait
    REJECTED = "rejected"  # a provider refused the content
    UNAVAILABLE = "unavailable"  # no provider could answer
    ERROR = "error"  # an unexpected exception (logged)
    SHUTDOWN = "shutdown"  # the bot is stopping
    EMPTY = "empty"  # the model answered (billed) with no usable text
    MEDIA = "media"  # a media step refused its input (``ChatFailed.media`` says why)


@dataclass(frozen=True, slots=True)
class ChatFailed:
    """No answer. ``tokens``/``limit`` are set for ``too_long``. ``empty``: the model
    answered with no usable text — billed (``cost_musd`` µUSD booked), not an answer.

    ``media``: for ``media``, the refusal of the media step (a transcript with no words).

    ``charged_musd``: what the ledger booked for the operation (µUSD), asked after the
    failure — 0 when nothing was charged (also when no operation was started), ``None``
    when the ledger could not answer.
    """

    kind: FailureKind
    tokens: int = 0
    limit: int = 0
    running: bool = False
    cost_musd: int = 0
    charged_musd: int | None = 0
    media: MediaRefusal | None = None


ChatOutcome = ChatAnswer | ChatRefused | ChatFailed


async def run_guarded(coro: Awaitable[ChatOutcome]) -> ChatOutcome:
    """Await ``coro``; any unexpected exception becomes a ``FailureKind.ERROR`` (logged)."""
    try:
        return await coro
    except asyncio.CancelledError:
        raise
    except Exception:  # last-resort guard: the user gets a template, not a trace
        log.exception("chat operation failed unexpectedly")
        return ChatFailed(FailureKind.ERROR)


def refused_outcome(
    exc: HoldRefused, *, running: bool, called: bool = False, step: str = "answer"
) -> ChatRefused:
    """The refusal ``exc`` as an outcome; one of a ledger that failed closed for a while
    (not its file lost) before any provider call (``called``: a hold was granted) may be
    tried again. ``step``: what the refused hold was for."""
    passing = isinstance(exc, LedgerUnavailable) and not exc.lasting
    return ChatRefused(exc.refusal, running=running, retry=passing and not called, step=step)


def unavailable_outcome(exc: LLMError, booked_musd: int | None) -> ChatFailed:
    """No provider answered (``exc``; ``booked_musd``: what the operation booked). When
    every provider tried refused the upload as too large (HTTP 413 or over its documented
    cap) and nothing was booked, the file is the problem, not the providers' state: the
    media refusal saying so, not "retry in a few minutes"."""
    too_large = (
        isinstance(exc, AllProvidersFailed)
        and bool(exc.attempts)
        and all(isinstance(a, MediaTooLarge) for a in exc.attempts)
    )
    if too_large and booked_musd == 0:
        refusal = MediaRefusal(MediaProblem.TOO_LARGE_FOR_MODELS)
        return ChatFailed(FailureKind.MEDIA, media=refusal, charged_musd=0)
    return ChatFailed(FailureKind.UNAVAILABLE, charged_musd=booked_musd)
