"""The same question twice (``bot.chat.duplicates``): the notice a copy gets instead of
a second paid answer, and the "regenerate" button that asks again — paid, once, only
when pressed."""

from __future__ import annotations

import contextlib
import logging

from aiogram import Bot, F, Router
from aiogram.exceptions import TelegramAPIError
from aiogram.types import CallbackQuery, InlineKeyboardButton, InlineKeyboardMarkup
from aiogram.utils.i18n import I18n
from prometheus_client import Counter

from bot.chat.costs import HoldReader, cost_footer
from bot.chat.duplicates import (
    REGENERATE_PREFIX,
    Claim,
    DuplicateGate,
    Verdict,
    answered_in_full,
)
from bot.chat.outbox import Outbox
from bot.chat.outcome import ChatAnswer, ChatFailed, ChatOutcome, FailureKind, run_guarded
from bot.chat.reply import Courier, reply_of
from bot.chat.service import ChatService
from bot.middlewares.context import IntakeStatus
from bot.middlewares.languages import TELEGRAM_ONLY, ReplyLanguages
from bot.middlewares.topics import in_topic
from bot.storage.summaries import CostFooters
from bot.text import conversation
from bot.text.i18n import in_locale
from budget.kernel.clock import Clock

__all__ = ["create_regenerate_router", "send_duplicate_notice"]

log = logging.getLogger(__name__)


async def send_duplicate_notice(
    bot: Bot, chat_id: int, claim: Claim, *, reply_to: int
) -> IntakeStatus:
    """Tell a copy it joins the answer being written (``JOINED``) or that its answer is
    above, with the regenerate button (``RECENT``). Costs nothing."""
    if claim.verdict is Verdict.JOINED:
        text, markup = conversation.duplicate_joined_text(), None
    else:
        text = conversation.duplicate_recent_text()
        button = InlineKeyboardButton(
            text=conversation.regenerate_button_text(),
            callback_data=REGENERATE_PREFIX + claim.token,
        )
        markup = InlineKeyboardMarkup(inline_keyboard=[[button]])
    try:
        await bot.send_message(chat_id, text, reply_markup=markup, reply_to_message_id=reply_to)
    except TelegramAPIError as exc:
        log.info("duplicate notice not sent to chat %s: %s", chat_id, exc.message)
    return IntakeStatus.JOINED


async def on_regenerate(
    query: CallbackQuery,
    bot: Bot,
    clock: Clock,
    i18n: I18n,
    chat_service: ChatService,
    duplicates: DuplicateGate,
    outbox: Outbox,
    ledger: HoldReader,
    cost_footers: CostFooters,
    delivery_failures: Counter | None = None,
    languages: ReplyLanguages = TELEGRAM_ONLY,
) -> None:
    """The regenerate button: its own user's question, answered again (a new, paid
    request) in the chat and topic it was asked in; anyone else's press, an expired
    button or a copy being answered now changes nothing."""
    token = (query.data or "").removeprefix(REGENERATE_PREFIX)
    ask = duplicates.button(token, query.from_user.id)
    # the asker's language as asked; for a press on no live question, the presser's
    language = ask.language if ask else await languages.of(query.from_user)
    with in_locale(i18n, language):
        key = duplicates.start_regenerate(ask) if ask is not None else None
        with contextlib.suppress(TelegramAPIError):
            owner = duplicates.owner_of(token) if ask is None else None
            if owner is not None:  # a live button, someone else's
                await query.answer(conversation.regenerate_denied_text())
            elif ask is None:
                await query.answer(conversation.regenerate_gone_text())
            elif key is None:
                await query.answer(conversation.duplicate_joined_text())
            else:
                await query.answer()
        if ask is None or key is None:
            return
        outcome: ChatOutcome = ChatFailed(FailureKind.ERROR)
        try:
            outcome = await run_guarded(
                chat_service.handle(
                    ask.user_id, ask.text, chat_id=ask.chat_id, thread_id=ask.thread_id
                )
            )
        finally:
            duplicates.finish(key, answered=answered_in_full(outcome))
        footer = None
        if isinstance(outcome, ChatAnswer) and await cost_footers.wanted(ask.user_id):
            footer = await cost_footer(outcome, ledger)
        notice = query.message.message_id if query.message is not None else 0
        reply = reply_of(outcome, tz=ask.tz, message_id=notice, answer_to=None, footer=footer)
        courier = Courier(bot, ask.chat_id, clock=clock, outbox=outbox, failures=delivery_failures)
        with in_topic(ask.chat_id, ask.thread_id):
            await courier.deliver(reply)


def create_regenerate_router() -> Router:
    """The regenerate button's router."""
    router = Router(name="regenerate")
    router.callback_query.register(on_regenerate, F.data.startswith(REGENERATE_PREFIX))
    return router
