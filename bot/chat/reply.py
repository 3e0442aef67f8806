"""What a chat message gets back: a :class:`Reply`, chosen from the service's outcome,
and the :class:`Courier` that delivers it.

Choosing does no I/O: :func:`screen` refuses a message before any model is asked (no
visible text; sent while the bot was down), :func:`reply_of` turns a
:class:`~bot.chat.outcome.ChatOutcome` into the reply — its text (the answer with its
note, or the template naming the limit or failure), what it cost, how it must be
delivered and what the message's intake record says once it was
(``docs/decisions/021-chat-reply.md``).

Delivering is the policy:

* An **answer** (paid for) goes into the streamed message when the stream owns one
  (edit mode), else through the outbox: under a flood wait it is kept and sent when the
  wait ends. A send the chat refuses (400/403, :mod:`bot.chat.failures`) ends delivery
  for that message — nothing more is sent, and the message is recorded
  ``undeliverable`` so its answer is never generated again. Any other refusal is told
  with the error template naming what the operation was charged.
* A **template** (free) replaces the streamed message's text and Stop button when there
  is one (a failure there is logged and the template is sent as a message), else it is
  sent. A template the chat refuses makes the message ``undeliverable`` too.
* A **silent** refusal (one its user was already told in its window,
  :mod:`bot.chat.notices`) is not sent.
* A message **interrupted** by a shutdown keeps what its user already saw, marked
  interrupted; else it gets the "send it again" template.

Everything goes to the message's chat (and forum topic: the bot's session puts each
send of the handler into it, :mod:`bot.middlewares.topics`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from dataclasses import dataclass
from datetime import timedelta
from enum import StrEnum

from aiogram import Bot
from aiogram.exceptions import TelegramAPIError
from prometheus_client import Counter

from bot.chat.delivery import send_text
from bot.chat.failures import UNDELIVERABLE, record_delivery_failure
from bot.chat.folding import FoldKind
from bot.chat.notices import RateNotices
from bot.chat.outbox import Outbox
from bot.chat.outcome import ChatAnswer, ChatFailed, ChatOutcome, ChatRefused, FailureKind
from bot.chat.streaming.session import StreamSession
from bot.middlewares.context import IntakeStatus
from bot.text import conversation, templates, tool_texts
from bot.text import media as media_texts
from bot.text import operator as operator_texts
from budget.kernel.clock import Clock
from budget.types import RefusalReason
from llm.sanitize import has_visible
from llm.types import Completion

__all__ = ["Courier", "Delivery", "Reply", "hushed", "reply_of", "screen"]

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
    #: a refusal its user was already told in its window (bot.chat.notices): nothing is
    #: sent, unless a streamed message is already shown (it gets the template, so that
    #: it is not left open)
    SILENT = "silent"


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


def reply_of(
    outcome: ChatOutcome,
    *,
    tz: str,
    message_id: int,
    answer_to: int | None,
    footer: str | None = None,
) -> Reply:
    """The reply to an outcome of :meth:`bot.chat.service.ChatService.handle`.

    Args:
        outcome: the service's answer, refusal or failure.
        tz: the user's IANA zone (refusals say when a limit resets in it).
        message_id: the message answered (a refusal quotes it: in a burst, the user
            sees which message it refuses).
        answer_to: what an answer quotes (the message in a group, ``None`` in private).
        footer: the ``/cost`` line put under an answer (``bot.chat.costs``), if any.
    """
    if isinstance(outcome, ChatAnswer):
        return _answer_reply(outcome, answer_to, tz, footer)
    if isinstance(outcome, ChatRefused):
        text = templates.refusal_text(
            outcome.refusal, tz=tz, running=outcome.running, step=outcome.step
        )
        return Reply(
            text, IntakeStatus.REFUSED, reply_to=message_id, refusal=outcome.refusal.reason.value
        )
    if outcome.kind is FailureKind.MEDIA and outcome.media is not None:
        # a media step refused its input inside the operation (nothing heard, an empty
        # clip, one longer than held, a failed download): its own template, as before one
        text = media_texts.media_refusal_text(outcome.media, tz=tz)
        label = outcome.media.problem.value
        return Reply(text, IntakeStatus.REFUSED, reply_to=message_id, refusal=label)
    refused = outcome.kind in (FailureKind.TOO_LONG, FailureKind.QUEUE_FULL)
    status = IntakeStatus.REFUSED if refused else IntakeStatus.FAILED
    return Reply(_failure_text(outcome), status, reply_to=message_id, refusal=outcome.kind.value)


def hushed(reply: Reply, outcome: ChatOutcome, user_id: int, notices: RateNotices | None) -> Reply:
    """``reply``, made silent when ``outcome`` is a USER_MAX_PER_MINUTE refusal its user
    was already told in its window (``notices``; ``None``: every refusal is told)."""
    if notices is None or not isinstance(outcome, ChatRefused):
        return reply
    if outcome.refusal.reason is not RefusalReason.RATE:
        return reply
    if notices.first(user_id, outcome.refusal.resets_at):
        return reply
    return dataclasses.replace(reply, delivery=Delivery.SILENT)


def _answer_reply(answer: ChatAnswer, answer_to: int | None, tz: str, footer: str | None) -> Reply:
    completion = answer.completion
    if answer.steps > 1 or answer.tool_stop is not None:
        return _tool_reply(answer, answer_to, tz, footer)
    if not has_visible(completion.text):
        if completion.stopped == "shutdown":
            return Reply(templates.shutting_down_text(), IntakeStatus.ANSWERED, reply_to=answer_to)
        if completion.stopped:
            text = templates.stopped_empty_text(completion.stopped == "kill")
            return Reply(text, IntakeStatus.ANSWERED, reply_to=answer_to)
        log.warning("empty answer from %s", completion.provider)
        return Reply(templates.empty_answer_text(), IntakeStatus.FAILED, refusal="empty_answer")
    text = with_notes(completion)
    if answer.fold is not None and answer.fold.kind is FoldKind.CUT:
        text += "\n\n" + conversation.summary_cut_note(answer.fold.refusal, tz=tz)
    if footer:
        text += "\n\n" + footer
    return Reply(
        text,
        IntakeStatus.ANSWERED,
        Delivery.ANSWER,
        reply_to=answer_to,
        charged_musd=answer.charged_musd,
    )


def _tool_reply(answer: ChatAnswer, answer_to: int | None, tz: str, footer: str | None) -> Reply:
    """An answer that took tool steps: the text (so far), the stop note when a cap ended
    the loop, the footer with the model calls and what they cost, then the history cut
    note and the /cost footer as any answer has them."""
    parts = [with_notes(answer.completion)] if has_visible(answer.completion.text) else []
    if answer.tool_stop is not None:
        parts.append(tool_texts.tool_stop_note(answer.tool_stop, answer.steps))
    parts.append(tool_texts.tool_footer(answer.steps, answer.tools_called, answer.charged_musd))
    if answer.fold is not None and answer.fold.kind is FoldKind.CUT:
        parts.append(conversation.summary_cut_note(answer.fold.refusal, tz=tz))
    if footer:
        parts.append(footer)
    return Reply(
        "\n\n".join(parts),
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
    elif completion.finish_reason == "length" and "shed_long_answers" in completion.degraded:
        text += "\n\n" + operator_texts.shed_short_note()
    elif completion.finish_reason == "length" and "shrunk_max_tokens" in completion.degraded:
        text += "\n\n" + templates.shortened_note()
    return text


class Courier:
    """The replies of one message, to its chat.

    Args:
        bot: the bot.
        chat_id: the message's chat.
        clock: the one clock.
        outbox: keeps an answer a flood wait holds back.
        failures: the ``kopek_delivery_failures`` counter, if metrics are wired.
        stream: the message's stream, once open (``None``: not streamed).

    Attributes:
        refused: a send of this message was refused by the chat (400/403).
    """

    __slots__ = ("_bot", "_chat_id", "_clock", "_failures", "_outbox", "refused", "stream")

    def __init__(
        self,
        bot: Bot,
        chat_id: int,
        *,
        clock: Clock,
        outbox: Outbox,
        failures: Counter | None,
        stream: StreamSession | None = None,
    ) -> None:
        self._bot = bot
        self._chat_id = chat_id
        self._clock = clock
        self._outbox = outbox
        self._failures = failures
        self.stream = stream
        self.refused = False

    def __repr__(self) -> str:
        return f"Courier(chat={self._chat_id}, streamed={self.stream is not None})"

    async def deliver(self, reply: Reply) -> IntakeStatus:
        """Send ``reply`` as its :class:`~bot.chat.reply.Delivery` says.

        Returns:
            The message's intake status: the reply's own, ``undeliverable`` when the
            chat refused a send, ``failed`` when an answer could not be sent otherwise.
        """
        if reply.delivery is Delivery.ANSWER:
            return await self._answer(reply)
        if reply.delivery is Delivery.SILENT:
            shown = self.stream is not None and self.stream.control.shown
            if shown:
                await self._into_stream(reply.text)
            return IntakeStatus.UNDELIVERABLE if self.refused else reply.status
        if not await self._into_stream(reply.text):
            await self._template(reply.text, reply_to=reply.reply_to)
        return IntakeStatus.UNDELIVERABLE if self.refused else reply.status

    async def _answer(self, reply: Reply) -> IntakeStatus:
        try:
            if self.stream is None or not await self.stream.finish(reply.text, self._outbox):
                await self._outbox.deliver(self._chat_id, reply.text, reply_to=reply.reply_to)
        except UNDELIVERABLE as exc:
            # that chat will not take it: nothing more is sent for this message, and
            # the intake record keeps the answer from ever being generated again
            self._record(exc, "answer")
            return IntakeStatus.UNDELIVERABLE
        except TelegramAPIError as exc:
            self._record(exc, "answer")
            with contextlib.suppress(TelegramAPIError):
                await self._template(templates.error_text(reply.charged_musd))
            return IntakeStatus.UNDELIVERABLE if self.refused else IntakeStatus.FAILED
        return IntakeStatus.ANSWERED

    async def interrupted(self, reply_to: int | None) -> None:
        """The message's handling is being cancelled (shutdown): what the user already
        saw of a streamed answer stays theirs, marked interrupted (``reply_to``: what it
        quotes when sent anew); else the "send it again" template (the intake record
        makes it ``failed``, so it is not answered twice). Closes the stream."""
        stream = self.stream
        if stream is None or not (stream.control.shown and has_visible(stream.control.text)):
            if stream is not None:
                await stream.close()
            await self._template(templates.shutting_down_text())
            return
        await stream.close()
        partial = stream.control.text + "\n\n" + templates.shutdown_note()
        with contextlib.suppress(TelegramAPIError):
            if not await stream.finish(partial, self._outbox):
                await self._outbox.deliver(self._chat_id, partial, reply_to=reply_to)

    async def _template(self, text: str, *, reply_to: int | None = None) -> None:
        try:
            await send_text(self._bot, self._chat_id, text, clock=self._clock, reply_to=reply_to)
        except UNDELIVERABLE as exc:
            self.refused = True
            self._record(exc, "template")

    async def _into_stream(self, text: str) -> bool:
        """Put a template into the message already streamed (edit mode), replacing its
        text and Stop button; False when there is none (or it failed)."""
        if self.stream is None:
            return False
        try:
            return await self.stream.finish(text, self._outbox)
        except TelegramAPIError as exc:
            log.info("template not put into the streamed message: %s", exc.message)
            return False

    def _record(self, exc: TelegramAPIError, what: str) -> None:
        record_delivery_failure(exc, chat_id=self._chat_id, what=what, failures=self._failures)
