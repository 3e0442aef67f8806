"""Chat: private text messages, and group messages that mention or reply to the bot.

The handler asks the chat service (:mod:`bot.chat.service`), turns its outcome into a
reply and hands it to the courier (:mod:`bot.chat.reply`: the reply value and the
delivery policy — stream finish, outbox or template, undeliverable marking).
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from functools import partial
from typing import Any

from aiogram import Bot, F, Router
from aiogram.filters import Filter
from aiogram.types import Message
from aiogram.utils.chat_action import ChatActionSender
from prometheus_client import Counter

from bot.chat.deferral import FloodDeferral
from bot.chat.delivery import send_text
from bot.chat.outbox import Outbox
from bot.chat.outcome import ChatAnswer
from bot.chat.paste import PasteTicket
from bot.chat.reply import Courier, reply_of, screen
from bot.chat.service import ChatService, run_guarded
from bot.chat.streaming.metrics import StreamMetrics
from bot.chat.streaming.registry import StreamRegistry
from bot.chat.streaming.session import StreamConfig, StreamSession, book_stop
from bot.middlewares.context import IntakeStatus, UserContext
from bot.middlewares.topics import topic_of
from bot.text import templates
from budget.books.stops import StopBook
from budget.kernel.clock import Clock
from llm.sanitize import clean_prompt

__all__ = ["AddressedToBot", "create_chat_router", "create_non_text_router", "on_text"]

#: Telegram shows a chat action for 5 s; renew it every 4 s (Bot API, sendChatAction).
TYPING_INTERVAL_S = 4.0
#: "typing…" is first sent when the answer is not there after this many seconds: an
#: answer that comes sooner needs no indicator, and skipping it saves a Bot API call
#: per fast answer (docs/decisions/022-message-path.md).
TYPING_DELAY_S = 0.5


class AddressedToBot(Filter):
    """Private chats always; in groups only when the bot is mentioned or replied to —
    or when the message continues a long paste whose first part was (its mention is
    in that first part only)."""

    async def __call__(
        self, message: Message, bot: Bot, paste: PasteTicket | None = None
    ) -> bool | dict[str, Any]:
        if message.chat.type == "private":
            return {"prompt": message.text or ""}
        text = message.text or ""
        if paste is not None and not paste.is_lead and paste.lead_accepted:
            return {"prompt": text}
        me = await bot.me()
        reply = message.reply_to_message
        if reply is not None and reply.from_user is not None and reply.from_user.id == me.id:
            return {"prompt": text}
        mention = f"@{me.username}".lower() if me.username else None
        for entity in message.entities or []:
            if entity.type == "mention" and mention:
                part = entity.extract_from(text)
                if part.lower() == mention:
                    return {"prompt": (text.replace(part, "", 1)).strip() or text}
        return False


async def on_text(
    message: Message,
    bot: Bot,
    prompt: str,
    user_ctx: UserContext,
    chat_service: ChatService,
    clock: Clock,
    refusals: Counter,
    outbox: Outbox,
    stale_after_s: int,
    flood_deferral: FloodDeferral | None = None,
    delivery_failures: Counter | None = None,
    paste: PasteTicket | None = None,
    streams: StreamRegistry | None = None,
    stream_config: StreamConfig | None = None,
    stream_metrics: StreamMetrics | None = None,
    stop_book: StopBook | None = None,
) -> IntakeStatus:
    """Answer one chat message, or say why not; returns what its intake record says."""
    received_at = clock.monotonic()
    if paste is not None:
        question = await paste.question(prompt)
        if question is None:
            return IntakeStatus.JOINED  # answered with the paste's first part
        prompt = question
    chat_id = message.chat.id
    if flood_deferral is not None and await flood_deferral.defer(
        chat_id, templates.flood_deferred_text
    ):
        return IntakeStatus.DEFERRED  # no hold, no provider call: the chat cannot receive it
    answer_to = message.message_id if message.chat.type != "private" else None
    courier = Courier(bot, chat_id, clock=clock, outbox=outbox, failures=delivery_failures)
    prompt = clean_prompt(prompt)  # hidden tag-character instructions never reach a model
    stale_after = timedelta(seconds=stale_after_s)
    reply = screen(prompt, age=clock.now() - message.date, stale_after=stale_after)
    if reply is None:
        if streams is not None and stream_config is not None:
            courier.stream = StreamSession.open(
                bot=bot,
                chat_id=chat_id,
                private=message.chat.type == "private",
                reply_to=answer_to,
                owner_id=user_ctx.user_id,
                config=stream_config,
                registry=streams,
                metrics=stream_metrics,
                clock=clock,
                received_at=received_at,
            )
        try:
            outcome = await run_guarded(
                chat_service.handle(
                    user_ctx.user_id,
                    prompt,
                    chat_id=chat_id,
                    thread_id=topic_of(message),
                    key=(chat_id, message.message_id),
                    activity=partial(_typing, bot, message),
                    stream=courier.stream.control if courier.stream is not None else None,
                )
            )
        except asyncio.CancelledError:  # the intake middleware records it as failed
            await courier.interrupted(answer_to)
            raise
        if courier.stream is not None:
            await courier.stream.close()
        if isinstance(outcome, ChatAnswer) and outcome.completion.stopped:
            await book_stop(outcome.completion, stop_book, stream_metrics)
        reply = reply_of(
            outcome, tz=user_ctx.tz, message_id=message.message_id, answer_to=answer_to
        )
    if reply.refusal is not None:
        refusals.labels(reply.refusal).inc()
    return await courier.deliver(reply)


def _typing(bot: Bot, message: Message) -> ChatActionSender:
    """The "typing…" indicator shown while the model works (renewed every
    :data:`TYPING_INTERVAL_S`, first sent after :data:`TYPING_DELAY_S`)."""
    return ChatActionSender.typing(
        bot=bot,
        chat_id=message.chat.id,
        interval=TYPING_INTERVAL_S,
        initial_sleep=TYPING_DELAY_S,
        message_thread_id=topic_of(message),
    )


async def on_non_text(message: Message, bot: Bot, clock: Clock) -> None:
    """The "text only" template."""
    await send_text(bot, message.chat.id, templates.non_text_text(), clock=clock)


def create_chat_router() -> Router:
    """The chat router: text that is not a command. No other router handles such a
    message, so the bot includes this one first (a chat message walks no command
    router's filters: docs/decisions/022-message-path.md)."""
    router = Router(name="chat")
    router.message.register(on_text, F.text, ~F.text.startswith("/"), AddressedToBot())
    return router


def create_non_text_router() -> Router:
    """Private messages without text (a photo, a sticker, a document) that no other
    router took: the "text only" template. Included last: a document whose caption
    is a command (``/reconcile`` with its CSV) belongs to that command's router."""
    router = Router(name="chat-non-text")
    router.message.register(on_non_text, F.chat.type == "private", ~F.text)
    return router
