"""The two displays of a streamed answer (``STREAM_MODE_PRIVATE`` / ``STREAM_MODE_GROUP``).

* **draft** (private chats, :class:`DraftDisplay`): ``sendMessageDraft`` with
  ``can_stop``; the text goes through the same Markdown pipeline as final answers (a
  draft Telegram refuses is retried as plain text); over 4096 UTF-16 units the draft
  shows the tail part. Drafts are ephemeral: the final answer is sent exactly as without
  streaming (``sendMessage``, split, entities). A Bot API server without
  ``sendMessageDraft`` (404) ends each answer's drafts and is logged once per process as
  a WARNING.
* **edit** (groups and topics, :class:`EditDisplay`): a first ``sendMessage`` (in the
  message's topic, as a reply) with an inline Stop button, then ``editMessageText``; at
  the end the same message is edited to the final answer's first part (no button) and
  the other parts follow as new messages.

Both are paced per chat (:mod:`bot.chat.streaming.pacing`): at most one draft per
``STREAM_DRAFT_INTERVAL_MS`` or edit per ``STREAM_EDIT_INTERVAL_MS``, and only when the
text grew.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from aiogram import Bot
from aiogram.exceptions import (
    TelegramAPIError,
    TelegramBadRequest,
    TelegramNotFound,
    TelegramRetryAfter,
)
from aiogram.types import (
    InlineKeyboardButton,
    InlineKeyboardMarkup,
    Message,
    MessageEntity,
    ReplyParameters,
)

from bot.chat.delivery import (
    OFF_LOOP_CHARS,
    TELEGRAM_TEXT_LIMIT,
    send_formatted,
    split_formatted,
    split_markdown,
)
from bot.chat.outbox import Outbox
from bot.chat.streaming.metrics import StreamMetrics
from bot.chat.streaming.pacing import EditPacer, PacedDisplay
from bot.chat.streaming.registry import STOP_PREFIX
from bot.text import templates
from budget.kernel.clock import Clock
from llm.stream import StreamControl

__all__ = ["DraftDisplay", "EditDisplay", "tail_part"]

log = logging.getLogger(__name__)

#: set once the Bot API server answered sendMessageDraft with 404 (warned once per process)
_drafts_unsupported_warned = False


def tail_part(text: str) -> tuple[str, list[MessageEntity]]:
    """The Markdown pipeline's last part of ``text`` (the tail over 4096 UTF-16 units)."""
    parts = split_markdown(text)
    if not parts:
        return text[-TELEGRAM_TEXT_LIMIT:], []
    return parts[-1]


#: Telegram's 400s for a message the bot can no longer edit: deleted by a user or an
#: admin, or older than editing allows (Bot API error texts, lower-cased).
_GONE = ("message to edit not found", "message can't be edited", "message_id_invalid")


def _message_gone(low: str) -> bool:
    return any(text in low for text in _GONE)


def _plain_tail(text: str) -> str:
    """The last ≤ 4096 UTF-16 units of ``text`` as plain text (never half a pair)."""
    out: list[str] = []
    units = 0
    for char in reversed(text):
        size = 2 if ord(char) > 0xFFFF else 1
        if units + size > TELEGRAM_TEXT_LIMIT:
            break
        out.append(char)
        units += size
    return "".join(reversed(out))


class DraftDisplay(PacedDisplay):
    """Drafts in a private chat (see the module docstring).

    Args:
        bot: the bot.
        chat_id: the private chat.
        draft_id: non-zero id shared by every draft of this answer.
        interval_s: STREAM_DRAFT_INTERVAL_MS ÷ 1000.
        control: the stream.
        clock: the one clock.
        on_shown: called once with the clock's monotonic time of the first draft accepted.
        metrics: counters (optional).
        pacer: the per-chat pacer shared by the chat's displays (the registry's).
    """

    __slots__ = ("_draft_id", "_plain")

    def __init__(
        self,
        bot: Bot,
        chat_id: int,
        draft_id: int,
        interval_s: float,
        control: StreamControl,
        clock: Clock,
        *,
        on_shown: Callable[[float], None] | None = None,
        metrics: StreamMetrics | None = None,
        pacer: EditPacer | None = None,
    ) -> None:
        super().__init__(
            bot,
            chat_id,
            interval_s,
            control,
            clock,
            on_shown=on_shown,
            metrics=metrics,
            pacer=pacer,
        )
        self._draft_id = draft_id
        self._plain = False

    async def _show(self, text: str) -> bool:
        body, entities = (_plain_tail(text), []) if self._plain else tail_part(text)
        try:
            await self._draft(body, entities)
        except TelegramBadRequest as exc:
            if self._plain:
                raise
            log.info("draft refused (%s); drafts go plain", exc.message)
            self._plain = True
            await self._draft(_plain_tail(text), [])
        return True

    def _failed(self, exc: TelegramAPIError) -> None:
        global _drafts_unsupported_warned
        if isinstance(exc, TelegramNotFound):
            # an older (local) Bot API server without the method: every answer's drafts
            # end here, so say it once, where an operator looks
            if not _drafts_unsupported_warned:
                _drafts_unsupported_warned = True
                log.warning(
                    "sendMessageDraft is not supported by the Bot API server (404 %s): "
                    "private answers are not streamed, each arrives in one piece; set "
                    "STREAM_MODE_PRIVATE=edit (stream by editing a message) or off",
                    exc.message,
                )
            return
        super()._failed(exc)

    async def _draft(self, text: str, entities: list[MessageEntity]) -> None:
        await self._bot.send_message_draft(
            chat_id=self._chat_id,
            draft_id=self._draft_id,
            text=text,
            entities=entities or None,
            parse_mode=None,
            can_stop=True,
        )
        if self._metrics is not None:
            self._metrics.drafts.inc()


class EditDisplay(PacedDisplay):
    """A message edited in place, with an inline Stop button (see the module docstring).

    Args:
        bot: the bot (its session puts the first message into the handler's topic).
        chat_id: the chat.
        reply_to: the message answered (groups), or ``None``.
        token: the Stop button's id.
        interval_s: STREAM_EDIT_INTERVAL_MS ÷ 1000.
        control: the stream.
        clock: the one clock.
        on_shown: called once with the clock's monotonic time of the first message sent.
        metrics: counters (optional).
        pacer: the per-chat pacer shared by the chat's displays (the registry's).
    """

    __slots__ = ("_message_id", "_reply_to", "_sending", "_token")

    def __init__(
        self,
        bot: Bot,
        chat_id: int,
        reply_to: int | None,
        token: str,
        interval_s: float,
        control: StreamControl,
        clock: Clock,
        *,
        on_shown: Callable[[float], None] | None = None,
        metrics: StreamMetrics | None = None,
        pacer: EditPacer | None = None,
    ) -> None:
        super().__init__(
            bot,
            chat_id,
            interval_s,
            control,
            clock,
            on_shown=on_shown,
            metrics=metrics,
            pacer=pacer,
        )
        self._reply_to = reply_to
        self._token = token
        self._message_id: int | None = None
        #: the first send, shielded: a close while it is in flight must not lose the
        #: message Telegram may already show (the answer would then be sent twice)
        self._sending: asyncio.Future[Message] | None = None

    @property
    def message_id(self) -> int | None:
        """The streamed message, once sent."""
        return self._message_id

    def _button(self) -> InlineKeyboardMarkup:
        return InlineKeyboardMarkup(
            inline_keyboard=[
                [
                    InlineKeyboardButton(
                        text=templates.stop_button_text(), callback_data=STOP_PREFIX + self._token
                    )
                ]
            ]
        )

    async def _show(self, text: str) -> bool:
        body, entities = tail_part(text)
        try:
            await self._put(body, entities)
        except TelegramBadRequest as exc:
            if "not modified" in exc.message.lower():
                return True
            if "parse entities" not in exc.message.lower():
                raise
            await self._put(_plain_tail(text), [])
        return True

    async def _put(self, text: str, entities: list[MessageEntity]) -> None:
        if self._message_id is None:
            reply = (
                ReplyParameters(message_id=self._reply_to, allow_sending_without_reply=True)
                if self._reply_to
                else None
            )
            self._sending = asyncio.ensure_future(
                self._bot.send_message(
                    self._chat_id,
                    text,
                    entities=entities or None,
                    parse_mode=None,
                    reply_parameters=reply,
                    reply_markup=self._button(),
                )
            )
            sent = await asyncio.shield(self._sending)
            self._message_id = sent.message_id
            return
        await self._bot.edit_message_text(
            text=text,
            chat_id=self._chat_id,
            message_id=self._message_id,
            entities=entities or None,
            parse_mode=None,
            reply_markup=self._button(),
        )
        if self._metrics is not None:
            self._metrics.edits.inc()

    async def finish(self, markdown: str, outbox: Outbox | None = None) -> bool:
        """Turn the streamed message into the final answer: its first part replaces the
        text (no button), the other parts follow as new messages. If Telegram refuses
        the entities, the whole answer goes plain (first plain part edited in, the rest
        sent). A flood wait (Telegram's 429, or the per-chat gate) on any of it hands
        what is not delivered yet to ``outbox``, sent when the wait ends: the whole
        answer as new messages if the final edit itself waited (the streamed message
        keeps its partial text), else the parts not yet sent.

        Returns:
            False when nothing was streamed yet, or when the streamed message is gone
            (deleted mid-stream, or too old to edit): the caller sends the whole answer
            as new messages, as usual, with no second provider call.

        Raises:
            aiogram.exceptions.TelegramRetryAfter: a flood wait, when no ``outbox``.
            aiogram.exceptions.TelegramAPIError: any other refusal.
        """
        await self.close()
        if await self._shown_message() is None:
            return False
        parts = (
            split_markdown(markdown)
            if len(markdown) <= OFF_LOOP_CHARS
            else await asyncio.to_thread(split_markdown, markdown)
        )
        delivered = 0

        def progress(n: int) -> None:
            nonlocal delivered
            delivered = n

        try:
            first_text, first_entities = parts[0]
            try:
                await self._final_edit(first_text, first_entities)
            except TelegramBadRequest as exc:
                low = exc.message.lower()
                if _message_gone(low):
                    # deleted while it streamed (or too old to edit): the answer is paid
                    # for, so the caller sends all of it as new messages, once
                    log.info("streamed message in chat %s is gone (%s)", self._chat_id, low)
                    self._message_id = None
                    return False
                if "parse entities" in low:
                    log.warning("telegram refused entities; the streamed answer goes plain")
                    parts = split_formatted("\n".join(p for p, _e in parts), [])
                    await self._final_edit(parts[0][0], [])
                elif "not modified" not in low:
                    raise
            delivered = 1
            if len(parts) > 1:
                await send_formatted(
                    self._bot,
                    self._chat_id,
                    parts,
                    clock=self._clock,
                    skip_parts=1,
                    on_part_sent=progress,
                )
        except TelegramRetryAfter as exc:
            if outbox is None:
                raise
            await outbox.keep(
                self._chat_id,
                markdown,
                reply_to=self._reply_to,
                parts_sent=delivered,
                wait_s=float(exc.retry_after),
            )
            log.info(
                "streamed answer for chat %s kept in the outbox (%d part(s) shown): flood "
                "wait %s s",
                self._chat_id,
                delivered,
                exc.retry_after,
            )
        return True

    async def _shown_message(self) -> int | None:
        """The streamed message's id; a first send still in flight when the stream
        ended is awaited (it is the message Telegram shows); ``None``: nothing shown."""
        if self._message_id is None and self._sending is not None:
            with contextlib.suppress(Exception):  # refused or lost: nothing is shown
                self._message_id = (await self._sending).message_id
        return self._message_id

    async def _final_edit(self, text: str, entities: list[MessageEntity]) -> None:
        assert self._message_id is not None
        await self._bot.edit_message_text(
            text=text,
            chat_id=self._chat_id,
            message_id=self._message_id,
            entities=entities or None,
            parse_mode=None,
            reply_markup=None,
        )
