"""What a chat message gets back: a :class:`Reply`, chosen from the service's outcome.

Nothing here does I/O: :func:`screen` refuses a message before any model is asked (no
visible text; sent while the bot was down), :func:`reply_of` turns a
:class:`~bot.chat.service.ChatOutcome` into the reply — its text (the answer with its
note, or the template naming the limit or failure), what it cost, how it must be
delivered and what the message's intake record says once it was. Delivering it is
:class:`bot.chat.courier.Courier`'s job (``docs/decisions/021-chat-reply.md``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import timedelta
from enum import StrEnum

from bot.chat.outcome import ChatAnswer, ChatFailed, ChatOutcome, ChatRefused, FailureKind
from bot.middlewares.context import IntakeStatus
from bot.text import templates
from llm.sanitize import has_visible
from llm.types import Completion

__all__ = ["Delivery", "Reply", "reply_of", "screen"]

log = logging.getLogger(__name__)


class Delivery(StrEnum):
    """How a reply must go out."""

    #: the paid-for answer: into the streamed message (edit mode), else through the
    #: outbox (kept and sent when a flood wait ends); a refusal of it is told with the
    #: error template naming what was charged
    ANSWER = "answer"
    #: a template (costs nothing): into the streamed message when there is one, else
    #: sent as a message
    TEMPLATE = "template"


@dataclass(frozen=True, slots=True)
class Reply:
    """One message's reply.

    Attributes:
        text: what is sent (Markdown, for an answer; a template's text otherwise).
        status: the message's intake record once the reply is delivered (a send the
            chat refuses makes it ``undeliverable`` instead).
        delivery: how it goes out.
        reply_to: the message it answers as a Telegram reply, ``None``: none.
        refusal: the ``kopek_refusals`` label to count, ``None``: not a refusal.
        charged_musd: what the operation was charged (µUSD; ``None``: the ledger could
            not say), for the error template when an answer cannot be delivered.
    """

    text: str
    status: IntakeStatus
    delivery: Delivery = Delivery.TEMPLATE
    reply_to: int | None = None
    refusal: str | None = None
    charged_musd: int | None = 0


def screen(prompt: str, *, age: timedelta, stale_after: timedelta) -> Reply | None:
    """The template for a message no model is asked about, or ``None`` to ask.

    Args:
        prompt: the cleaned prompt (hidden tag characters removed).
        age: how old the message was when the bot first saw it.
        stale_after: STALE_MESSAGE_SECONDS: older than this, it was sent while the bot
            was down and gets a template asking to resend.
    """
    if not has_visible(prompt):
        return Reply(templates.empty_message_text(), IntakeStatus.REFUSED)
    if age > stale_after:
        return Reply(templates.stale_text(), IntakeStatus.STALE, refusal="stale")
    return None


def reply_of(outcome: ChatOutcome, *, tz: str, message_id: int, answer_to: int | None) -> Reply:
    """The reply to an outcome of :meth:`bot.chat.service.ChatService.handle`.

    Args:
        outcome: the service's answer, refusal or failure.
        tz: the user's IANA zone (refusals say when a limit resets in it).
        message_id: the message answered (a refusal quotes it: in a burst, the user
            sees which message it refuses).
        answer_to: what an answer quotes (the message in a group, ``None`` in private).
    """
    if isinstance(outcome, ChatAnswer):
        return _answer_reply(outcome, answer_to)
    if isinstance(outcome, ChatRefused):
        text = templates.refusal_text(outcome.refusal, tz=tz, running=outcome.running)
        return Reply(
            text, IntakeStatus.REFUSED, reply_to=message_id, refusal=outcome.refusal.reason.value
        )
    refused = outcome.kind in (FailureKind.TOO_LONG, FailureKind.QUEUE_FULL)
    status = IntakeStatus.REFUSED if refused else IntakeStatus.FAILED
    return Reply(_failure_text(outcome), status, reply_to=message_id, refusal=outcome.kind.value)


def _answer_reply(answer: ChatAnswer, answer_to: int | None) -> Reply:
    completion = answer.completion
    if not has_visible(completion.text):
        if completion.stopped == "shutdown":
            return Reply(templates.shutting_down_text(), IntakeStatus.ANSWERED, reply_to=answer_to)
        if completion.stopped:
            text = templates.stopped_empty_text(completion.stopped == "kill")
            return Reply(text, IntakeStatus.ANSWERED, reply_to=answer_to)
        log.warning("empty answer from %s", completion.provider)
        return Reply(templates.empty_answer_text(), IntakeStatus.FAILED, refusal="empty_answer")
    return Reply(
        with_notes(completion),
        IntakeStatus.ANSWERED,
        Delivery.ANSWER,
        reply_to=answer_to,
        charged_musd=answer.charged_musd,
    )


def _failure_text(result: ChatFailed) -> str:
    if result.kind is FailureKind.TOO_LONG:
        return templates.too_long_text(result.tokens, result.limit)
    if result.kind is FailureKind.QUEUE_FULL:
        return templates.too_many_queued_text()
    if result.kind is FailureKind.REJECTED:
        return templates.rejected_text()
    if result.kind is FailureKind.UNAVAILABLE:
        return templates.unavailable_text(result.charged_musd)
    if result.kind is FailureKind.SHUTDOWN:
        return templates.shutting_down_text()
    if result.kind is FailureKind.EMPTY:
        return templates.could_not_answer_text()
    return templates.error_text(result.charged_musd)


def with_notes(completion: Completion) -> str:
    """The answer text plus a short note when it was stopped (by its user, an admin or
    the bot shutting down), cut off by a dropped stream, cut (longer than its output
    limit allows) or stopped at a max_tokens the degradation ladder shrank."""
    text = completion.text
    if completion.stopped == "shutdown":
        text += "\n\n" + templates.shutdown_note()
    elif completion.stopped:
        text += "\n\n" + templates.stopped_note(by_admin=completion.stopped == "kill")
    elif completion.stream_cut:
        text += "\n\n" + templates.stream_cut_note()
    elif completion.cut:
        text += "\n\n" + templates.cut_note()
    elif completion.finish_reason == "length" and "shrunk_max_tokens" in completion.degraded:
        text += "\n\n" + templates.shortened_note()
    return text
