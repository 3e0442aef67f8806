"""Delivering one message's :class:`~bot.chat.reply.Reply`: the delivery policy.

* An **answer** (paid for) goes into the streamed message when the stream owns one
  (edit mode), else through the outbox: under a flood wait it is kept and sent when the
  wait ends. A send the chat refuses (400/403, :mod:`bot.chat.failures`) ends delivery
  for that message — nothing more is sent, and the message is recorded
  ``undeliverable`` so its answer is never generated again. Any other refusal is told
  with the error template naming what the operation was charged.
* A **template** (free) replaces the streamed message's text and Stop button when there
  is one (a failure there is logged and the template is sent as a message), else it is
  sent. A template the chat refuses makes the message ``undeliverable`` too.
* A message **interrupted** by a shutdown keeps what its user already saw, marked
  interrupted; else it gets the "send it again" template.

Everything goes to the message's chat (and forum topic: the bot's session puts each
send of the handler into it, :mod:`bot.middlewares.topics`).
"""

from __future__ import annotations

import contextlib
import logging

from aiogram import Bot
from aiogram.exceptions import TelegramAPIError
from prometheus_client import Counter

from bot.chat.delivery import send_text
from bot.chat.failures import UNDELIVERABLE, record_delivery_failure
from bot.chat.outbox import Outbox
from bot.chat.reply import Delivery, Reply
from bot.chat.streaming.session import StreamSession
from bot.middlewares.context import IntakeStatus
from bot.text import templates
from budget.kernel.clock import Clock
from llm.sanitize import has_visible

__all__ = ["Courier"]

log = logging.getLogger(__name__)


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
