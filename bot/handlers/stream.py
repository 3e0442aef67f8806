"""Stopping a streamed answer: the draft's Stop (``stopped_message_generation``), the
inline Stop button of an edited message, and ``/stop``.

Only the message's own sender or an admin may stop an answer. A draft is shown only
to its private chat's user, so its Stop is the sender's; a button pressed by anyone
else changes nothing: the presser alone is told (a callback answer) who can stop it.
A press on an answer no longer being written says so; with replicas, a press on an
answer another replica is writing is relayed to it (:mod:`bot.ops.stop_relay`).
"""

from __future__ import annotations

import contextlib
import logging

from aiogram import Bot, F, Router
from aiogram.exceptions import TelegramAPIError
from aiogram.filters import Command
from aiogram.types import CallbackQuery, Message, MessageGenerationStopped
from aiogram.utils.i18n import I18n

from bot.chat.delivery import send_text
from bot.chat.payer import payer_id
from bot.chat.streaming.registry import STOP_PREFIX, StopResult, StreamRegistry
from bot.chat.streaming.session import StreamConfig
from bot.middlewares.languages import TELEGRAM_ONLY, ReplyLanguages
from bot.middlewares.rate import NOT_RATE_LIMITED
from bot.text import operator as operator_texts
from bot.text import templates
from bot.text.i18n import in_locale
from budget.kernel.clock import Clock

__all__ = ["create_stream_router"]

log = logging.getLogger(__name__)


async def on_draft_stopped(event: MessageGenerationStopped, streams: StreamRegistry) -> None:
    """The draft's Stop: only the private chat's user sees the draft, so it is theirs."""
    result = streams.stop_draft(event.chat.id, event.draft_id)
    log.info("draft %s in chat %s: stop %s", event.draft_id, event.chat.id, result.value)
    if result is StopResult.GONE and streams.stop_relay is not None:
        await streams.stop_relay.relay_draft(event.chat.id, event.draft_id)


async def on_stop_button(
    query: CallbackQuery,
    streams: StreamRegistry,
    i18n: I18n,
    admin_ids: frozenset[int],
    over_rate: bool = False,
    languages: ReplyLanguages = TELEGRAM_ONLY,
) -> None:
    """The inline Stop button of an edited message: the sender or an admin stops it;
    the presser alone is told what the press did."""
    token = (query.data or "").removeprefix(STOP_PREFIX)
    user_id = query.from_user.id
    is_admin = user_id in admin_ids
    result = streams.stop_token(token, user_id, is_admin=is_admin)
    if result is StopResult.GONE and streams.stop_relay is not None:
        # behind a webhook the press may reach a replica that is not writing the answer
        result = await streams.stop_relay.relay(token, user_id, is_admin=is_admin)
    log.info(
        "stop button in chat %s: %s",
        query.message.chat.id if query.message else "?",
        result.value,
    )
    if over_rate and result is not StopResult.STOPPED:
        return  # a flood of presses gets no answer each (the spinner clears by itself)
    # the presser's language, read once the press did its work: a stop never waits for it
    language = await languages.of(query.from_user)
    with in_locale(i18n, language):
        text = {
            StopResult.STOPPED: templates.stopping_text,
            StopResult.DENIED: templates.stop_denied_text,
            StopResult.GONE: templates.stop_gone_text,
        }[result]()
    with contextlib.suppress(TelegramAPIError):  # the spinner clears by itself anyway
        await query.answer(text)


async def on_stop(
    message: Message,
    bot: Bot,
    clock: Clock,
    streams: StreamRegistry,
    admin_ids: frozenset[int],
    over_rate: bool = False,
    stream_config: StreamConfig | None = None,
) -> None:
    """/stop: the sender's answers streaming in this chat (an admin's: all of them)."""
    user_id = payer_id(message)
    if user_id is None:
        return
    is_admin = user_id in admin_ids
    stopped = streams.stop_user(message.chat.id, user_id, is_admin=is_admin)
    if not stopped and streams.stop_relay is not None:  # writing on another replica?
        stopped = await streams.stop_relay.relay_user(message.chat.id, user_id, is_admin=is_admin)
    if stopped or over_rate:  # over the rate, "nothing to stop" is not said
        return
    private = message.chat.type == "private"
    config = stream_config or StreamConfig()
    if config.shed is not None and config.shed():
        text = operator_texts.shed_stop_text()  # answers are sent whole while shed
    elif config.mode(private) == "off":
        # a one-piece answer cannot be stopped: cancelling its call would still be
        # booked at its ceiling (an interrupted call) and lose the answer
        text = templates.stop_not_streamed_text()
    else:
        text = templates.nothing_to_stop_text()
    await send_text(bot, message.chat.id, text, clock=clock)


def create_stream_router() -> Router:
    """The router for stops (see the module docstring). Controls only stop work: they
    are never dropped by the update rate (``NOT_RATE_LIMITED``, bot/middlewares/rate.py)."""
    router = Router(name="stream")
    router.stopped_message_generation.register(on_draft_stopped, flags=NOT_RATE_LIMITED)
    router.callback_query.register(
        on_stop_button, F.data.startswith(STOP_PREFIX), flags=NOT_RATE_LIMITED
    )
    router.message.register(on_stop, Command("stop"), flags=NOT_RATE_LIMITED)
    return router
