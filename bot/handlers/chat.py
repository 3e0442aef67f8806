"""Chat: private text messages, and group messages that mention or reply to the bot."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from datetime import timedelta
from typing import Any

from aiogram import Bot, F, Router
from aiogram.exceptions import TelegramAPIError
from aiogram.filters import Filter
from aiogram.types import Message
from aiogram.utils.chat_action import ChatActionSender
from prometheus_client import Counter

from bot.chat.delivery import send_text
from bot.chat.failures import UNDELIVERABLE, record_delivery_failure
from bot.chat.outbox import Outbox
from bot.chat.paste import PasteTicket
from bot.chat.service import (
    ChatAnswer,
    ChatFailed,
    ChatRefused,
    ChatService,
    FailureKind,
    run_guarded,
)
from bot.chat.streaming.metrics import StreamMetrics
from bot.chat.streaming.registry import StreamRegistry
from bot.chat.streaming.session import StreamConfig, StreamSession
from bot.middlewares.context import IntakeStatus, UserContext
from bot.middlewares.topics import topic_of
from bot.text import templates
from budget.books.stops import StopBook
from budget.kernel.clock import Clock
from llm.sanitize import clean_prompt, has_visible
from llm.types import Completion

__all__ = ["create_chat_router", "create_non_text_router"]

log = logging.getLogger(__name__)

#: Telegram shows a chat action for 5 s; renew it every 4 s (Bot API, sendChatAction).
TYPING_INTERVAL_S = 4.0
#: "typing…" is first sent when the answer is not there after this many seconds: an
#: answer that comes sooner needs no indicator, and skipping it saves a Bot API call
#: per fast answer (issue 10: the call was ~7 % of the bot's CPU per message).
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


def create_chat_router(*, stale_after_s: int) -> Router:
    """The chat router: text that is not a command. No other router handles such a
    message, so the bot includes this one first (issue 10: a chat message no longer
    walks every command router's filters; ~19 % of the loop's samples in a burst).

    Args:
        stale_after_s: a message older than this when first seen was sent while the
            bot was down: it gets a template asking to resend, no LLM call.

    Everything sent about a message goes to its chat (and forum topic, see
    :mod:`bot.middlewares.topics`). A send Telegram refuses with 400/403 ends delivery for that
    message (:mod:`bot.chat.failures`): no template follows, and the message is
    recorded ``undeliverable`` so its answer is never generated again.
    """
    router = Router(name="chat")

    @router.message(F.text, ~F.text.startswith("/"), AddressedToBot())
    async def on_text(
        message: Message,
        bot: Bot,
        prompt: str,
        user_ctx: UserContext,
        chat_service: ChatService,
        clock: Clock,
        refusals: Counter,
        outbox: Outbox,
        delivery_failures: Counter | None = None,
        paste: PasteTicket | None = None,
        streams: StreamRegistry | None = None,
        stream_config: StreamConfig | None = None,
        stream_metrics: StreamMetrics | None = None,
        stop_book: StopBook | None = None,
    ) -> IntakeStatus:
        received_at = clock.monotonic()
        if paste is not None:
            if not paste.is_lead and paste.contribute(prompt):
                return IntakeStatus.JOINED  # answered with the paste's first part
            if paste.is_lead:
                paste.contribute(prompt)
                prompt = await paste.joined()
        chat_id = message.chat.id
        reply_to = message.message_id if message.chat.type != "private" else None
        refused_send = False

        async def template(text: str, *, reply: int | None = None) -> None:
            nonlocal refused_send
            try:
                await send_text(bot, chat_id, text, clock=clock, reply_to=reply)
            except UNDELIVERABLE as exc:
                refused_send = True
                record_delivery_failure(
                    exc, chat_id=chat_id, what="template", failures=delivery_failures
                )

        def settled(outcome: IntakeStatus) -> IntakeStatus:
            return IntakeStatus.UNDELIVERABLE if refused_send else outcome

        async def in_streamed(text: str) -> bool:
            """Put a template into the message already streamed (edit mode), replacing
            its text and Stop button; False when there is none (or it failed)."""
            if session is None:
                return False
            try:
                return await session.finish(text, outbox)
            except TelegramAPIError as exc:
                log.info("template not put into the streamed message: %s", exc.message)
                return False

        prompt = clean_prompt(prompt)  # hidden tag-character instructions never reach a model
        if not has_visible(prompt):
            await template(templates.empty_message_text())
            return settled(IntakeStatus.REFUSED)
        age = clock.now() - message.date
        if age > timedelta(seconds=stale_after_s):
            refusals.labels("stale").inc()
            await template(templates.stale_text())
            return settled(IntakeStatus.STALE)

        def typing() -> ChatActionSender:
            return ChatActionSender.typing(
                bot=bot,
                chat_id=chat_id,
                interval=TYPING_INTERVAL_S,
                initial_sleep=TYPING_DELAY_S,
                message_thread_id=topic_of(message),
            )

        session = (
            StreamSession.open(
                bot=bot,
                chat_id=chat_id,
                private=message.chat.type == "private",
                reply_to=reply_to,
                owner_id=user_ctx.user_id,
                config=stream_config,
                registry=streams,
                metrics=stream_metrics,
                clock=clock,
                received_at=received_at,
            )
            if streams is not None and stream_config is not None
            else None
        )
        try:
            result = await run_guarded(
                chat_service.handle(
                    user_ctx.user_id,
                    prompt,
                    chat_id=chat_id,
                    thread_id=topic_of(message),
                    key=(chat_id, message.message_id),
                    activity=typing,
                    stream=session.control if session is not None else None,
                )
            )
        except asyncio.CancelledError:  # the intake middleware records it as failed
            # what the user already saw stays theirs, marked; else: send it again later
            if session is None or not (session.control.shown and has_visible(session.control.text)):
                if session is not None:
                    await session.close()
                await template(templates.shutting_down_text())
                raise
            await session.close()
            partial = session.control.text + "\n\n" + templates.shutdown_note()
            with contextlib.suppress(TelegramAPIError):
                if not await session.finish(partial, outbox):
                    await outbox.deliver(chat_id, partial, reply_to=reply_to)
            raise
        if session is not None:
            await session.close()
        if isinstance(result, ChatAnswer) and result.completion.stopped:
            await _book_stop(result.completion, stop_book, stream_metrics)
            if not has_visible(result.completion.text):
                if result.completion.stopped == "shutdown":
                    empty = templates.shutting_down_text()
                else:
                    empty = templates.stopped_empty_text(result.completion.stopped == "kill")
                if session is None or not await session.finish(empty, outbox):
                    await template(empty, reply=reply_to)
                return settled(IntakeStatus.ANSWERED)
        if isinstance(result, ChatAnswer):
            if not has_visible(result.completion.text):
                log.warning("empty answer from %s", result.completion.provider)
                refusals.labels("empty_answer").inc()
                if not await in_streamed(templates.empty_answer_text()):
                    await template(templates.empty_answer_text())
                return settled(IntakeStatus.FAILED)
            try:
                answer = _with_notes(result.completion)
                if session is None or not await session.finish(answer, outbox):
                    # Paid for: under a flood wait it is kept and sent when the wait ends.
                    await outbox.deliver(chat_id, answer, reply_to=reply_to)
            except UNDELIVERABLE as exc:
                # that chat will not take it: nothing more is sent for this message, and
                # the intake record keeps the answer from ever being generated again
                record_delivery_failure(
                    exc, chat_id=chat_id, what="answer", failures=delivery_failures
                )
                return IntakeStatus.UNDELIVERABLE
            except TelegramAPIError as exc:
                record_delivery_failure(
                    exc, chat_id=chat_id, what="answer", failures=delivery_failures
                )
                charged = await chat_service.booked_musd(result.operation)
                with contextlib.suppress(TelegramAPIError):
                    await template(templates.error_text(charged))
                return settled(IntakeStatus.FAILED)
            return IntakeStatus.ANSWERED
        if isinstance(result, ChatRefused):
            outcome = IntakeStatus.REFUSED
            refusals.labels(result.refusal.reason.value).inc()
            text = templates.refusal_text(result.refusal, tz=user_ctx.tz, running=result.running)
        else:
            refused = result.kind in (FailureKind.TOO_LONG, FailureKind.QUEUE_FULL)
            outcome = IntakeStatus.REFUSED if refused else IntakeStatus.FAILED
            refusals.labels(result.kind).inc()
            text = _failure_text(result)
        # a refusal answers the message it refuses (in a burst, the user sees which)
        if not await in_streamed(text):
            await template(text, reply=message.message_id)
        return settled(outcome)

    return router


def create_non_text_router() -> Router:
    """Private messages without text (a photo, a sticker, a document) that no other
    router took: the "text only" template. Included last: a document whose caption
    is a command (``/reconcile`` with its CSV) belongs to that command's router."""
    router = Router(name="chat-non-text")

    @router.message(F.chat.type == "private", ~F.text)
    async def on_non_text(message: Message, bot: Bot, clock: Clock) -> None:
        await send_text(bot, message.chat.id, templates.non_text_text(), clock=clock)

    return router


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


async def _book_stop(
    completion: Completion, stop_book: StopBook | None, metrics: StreamMetrics | None
) -> None:
    """Flag a stopped answer's hold in the ledger (for /budget) and count it."""
    if metrics is not None:
        metrics.stops.labels(by=completion.stopped).inc()
        saved = completion.max_tokens - completion.usage.output_tokens
        if saved > 0:
            metrics.tokens_saved.inc(saved)
    if stop_book is not None and completion.hold_id:
        try:
            await stop_book.mark(completion.hold_id)
        except Exception:  # the answer and its settlement stand; only the flag is lost
            log.exception("could not flag hold %s as stopped", completion.hold_id)


def _with_notes(completion: Completion) -> str:
    """The answer text plus a short note when it was stopped (by its user, an admin or
    the bot shutting down), cut off by a dropped
    stream, cut (longer than its output limit allows) or stopped at a max_tokens the
    degradation ladder shrank."""
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
