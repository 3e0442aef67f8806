"""Voice notes, audio files, video notes, photos, documents and one-link messages.

In private chats always; in groups when addressed as text is (a mention in the caption,
or a reply to the bot). Each input is prepared without spending
(:class:`bot.media.desk.MediaDesk`): refused with a template naming its limit, or turned
into a chat turn. Then its price is weighed (:mod:`bot.chat.quote`): above
CONFIRM_ABOVE_USD, or above half of what the user has left in a window, the bot asks
first — Go ahead / Cancel, answered only for the sender, within CONFIRM_TTL_SECONDS — and
nothing is held until Go ahead; otherwise the turn goes down the chat path like typed
text (history, streaming, Stop), its holds sized on its provable worst case.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

from aiogram import Bot, F, Router
from aiogram.dispatcher.event.handler import CallbackType
from aiogram.exceptions import TelegramAPIError
from aiogram.filters import Filter
from aiogram.types import CallbackQuery, InlineKeyboardButton, InlineKeyboardMarkup, Message
from aiogram.utils.i18n import I18n
from prometheus_client import Counter

from bot.chat.confirm import Confirmations, Taken
from bot.chat.delivery import send_text
from bot.chat.persona import DEFAULT_PROMPT
from bot.chat.plans import UserPlans
from bot.handlers.chat import addressed_prompt, answer_turn
from bot.handlers.persona import persona_of
from bot.media.desk import FileRef, MediaDesk, Prepared
from bot.media.links import find_link
from bot.media.refusals import MediaRefusal
from bot.middlewares.context import IntakeStatus, UserContext
from bot.middlewares.languages import TELEGRAM_ONLY, ReplyLanguages
from bot.middlewares.rate import SPENDS
from bot.middlewares.topics import topic_of
from bot.storage.repos import Conversation
from bot.text import media as texts
from bot.text import templates
from bot.text.access import plan_no_media_text
from bot.text.i18n import in_locale
from budget.errors import BudgetError, HoldRefused
from budget.types import Refusal, RefusalReason
from llm.providers.vision import PhotoSize

__all__ = ["CONFIRM_PREFIX", "OneLink", "create_media_router", "link_route"]

log = logging.getLogger(__name__)

#: ``callback_data`` of the price question's buttons: ``mc:go:<token>``, ``mc:no:<token>``.
CONFIRM_PREFIX = "mc:"

#: The workflow data a media turn passes on to the chat answer (as a typed one has them;
#: ``user_plans``: the plan's queue slots, priority and streaming apply as to typed text).
_TURN_PARTS = (
    "flood_deferral",
    "ledger",
    "cost_footers",
    "user_plans",
    "chat_prefs",
    "model_menu",
    "rate_notices",
)


class MediaAddressed(Filter):
    """A media message for the bot (see :func:`bot.handlers.chat.addressed_prompt`);
    gives the caption, mention taken out, as ``prompt``."""

    async def __call__(self, message: Message, bot: Bot) -> bool | dict[str, Any]:
        caption = message.caption or ""
        prompt = await addressed_prompt(message, bot, caption, message.caption_entities or [])
        return False if prompt is None else {"prompt": prompt}


class OneLink(Filter):
    """A text that is one link (or "summarise <link>"), after a leading mention of
    anyone (a group's "@bot <link>": :class:`~bot.handlers.chat.AddressedToBot` then
    decides whether it is for this bot): gives it as ``url``. Checked before that
    filter, so ordinary text pays one regular expression, not a second ``getMe``."""

    async def __call__(self, message: Message) -> bool | dict[str, Any]:
        text = (message.text or "").strip()
        if text.startswith("@"):
            text = text.partition(" ")[2]
        url = find_link(text)
        return False if url is None else {"url": url}


def _ref(file: Any) -> FileRef:
    return FileRef(
        file.file_id,
        file.file_unique_id,
        file.file_size,
        getattr(file, "file_name", None) or "",
        getattr(file, "mime_type", None) or "",
    )


async def on_document(
    message: Message, prompt: str, media_desk: MediaDesk, **data: Any
) -> IntakeStatus:
    """A document: read, then answered (or refused, or asked about first)."""
    if (refused := await _media_refused(message, data)) is not None:
        return refused
    document = message.document
    assert document is not None
    if (document.mime_type or "").startswith("image/"):  # an image sent as a file
        question = prompt.strip() or texts.default_question("photo")
        prepared = await media_desk.image_file(_ref(document), question)
        return await _proceed(message, prepared, media_desk, data)
    question = prompt.strip() or texts.default_question("document")
    prepared = await media_desk.document(_ref(document), question)
    return await _proceed(message, prepared, media_desk, data)


async def on_link(message: Message, url: str, media_desk: MediaDesk, **data: Any) -> IntakeStatus:
    """A one-link message: the page read, then answered."""
    if (refused := await _media_refused(message, data)) is not None:
        return refused
    prepared = await media_desk.link(url, texts.default_question("link"))
    return await _proceed(message, prepared, media_desk, data)


async def on_photo(
    message: Message, prompt: str, media_desk: MediaDesk, **data: Any
) -> IntakeStatus:
    """A photo: its best size sent to a vision model with the caption."""
    if (refused := await _media_refused(message, data)) is not None:
        return refused
    sizes = [(_ref(p), PhotoSize(p.width, p.height, p.file_size)) for p in message.photo or []]
    question = prompt.strip() or texts.default_question("photo")
    prepared = await media_desk.photo(sizes, question)
    return await _proceed(message, prepared, media_desk, data)


async def on_recording(
    message: Message, bot: Bot, media_desk: MediaDesk, **data: Any
) -> IntakeStatus:
    """A voice note, audio file or video note: transcribed inside the operation, what
    was heard shown, then the transcript answered like typed text."""
    if (refused := await _media_refused(message, {**data, "bot": bot})) is not None:
        return refused
    if message.voice is not None:
        file: Any = message.voice
        name = "voice.ogg"
    elif message.audio is not None:
        file = message.audio
        name = message.audio.file_name or "audio.mp3"
    else:
        assert message.video_note is not None
        file = message.video_note
        name = "video_note.mp4"
    ref = _ref(file)
    if message.video_note is not None:
        ref = FileRef(ref.file_id, ref.unique_id, ref.size, name, "video/mp4")
    chat_id = message.chat.id
    reply_to = message.message_id if message.chat.type != "private" else None

    async def heard(text: str) -> None:
        with contextlib.suppress(TelegramAPIError):  # the answer matters more
            await send_text(
                bot, chat_id, texts.heard_text(text), clock=data["clock"], reply_to=reply_to
            )

    prepared = media_desk.recording(ref, int(file.duration or 0), name, heard)
    return await _proceed(message, prepared, media_desk, {**data, "bot": bot})


async def _media_refused(message: Message, data: dict[str, Any]) -> IntakeStatus | None:
    """The template when the user's plan does not include media (``media = false``),
    before anything is read, fetched or held; ``None``: it does (or there are no plans;
    a ledger that cannot be read refuses the hold later)."""
    user_plans: UserPlans | None = data.get("user_plans")
    if user_plans is None:
        return None
    user_ctx: UserContext = data["user_ctx"]
    try:
        plan = await user_plans.of(user_ctx.user_id)
    except HoldRefused:
        return None
    if plan.features.media:
        return None
    return await _refuse(message, plan_no_media_text(plan.title), "plan_media", data)


async def _refuse(message: Message, text: str, label: str, data: dict[str, Any]) -> IntakeStatus:
    refusals: Counter = data["refusals"]
    refusals.labels(label).inc()
    reply_to = message.message_id if message.chat.type != "private" else None
    await send_text(data["bot"], message.chat.id, text, clock=data["clock"], reply_to=reply_to)
    return IntakeStatus.REFUSED


async def _proceed(
    message: Message,
    prepared: Prepared | MediaRefusal,
    desk: MediaDesk,
    data: dict[str, Any],
) -> IntakeStatus:
    """Refuse, ask the price first, or answer."""
    user_ctx: UserContext = data["user_ctx"]
    if isinstance(prepared, MediaRefusal):
        text = texts.media_refusal_text(prepared, tz=user_ctx.tz)
        return await _refuse(message, text, prepared.problem.value, data)
    tokens = await desk.turn_tokens(prepared)
    if tokens is not None and tokens > desk.max_input_tokens:
        text = texts.media_too_long_text(tokens, desk.max_input_tokens)
        return await _refuse(message, text, "too_long", data)
    where = Conversation(message.chat.id, topic_of(message), user_ctx.user_id)
    try:
        ceiling, size = await desk.ceiling(where, prepared, await _system_prompt(message, data))
        quote = await desk.quoter.quote(user_ctx.user_id, ceiling)
    except BudgetError:  # the ledger cannot be read: fail closed, as a hold would
        text = templates.refusal_text(Refusal(RefusalReason.UNAVAILABLE), tz=user_ctx.tz)
        return await _refuse(message, text, "unavailable", data)

    async def run() -> IntakeStatus:
        # also run from a Go ahead press, whose update has no user_ctx: its language
        with in_locale(data["i18n"], user_ctx.language):
            return await answer_turn(
                message,
                data["bot"],
                prepared.text,
                user_ctx,
                data["chat_service"],
                data["clock"],
                data["refusals"],
                data["outbox"],
                data["stale_after_s"],
                data.get("delivery_failures"),
                data.get("streams"),
                data.get("stream_config"),
                data.get("stream_metrics"),
                data.get("stop_book"),
                media=prepared.turn,
                **{key: data.get(key) for key in _TURN_PARTS},
            )

    if not quote.ask:
        return await run()
    confirmations: Confirmations = data["confirmations"]
    token = confirmations.ask(user_ctx.user_id, message.chat.id, run)
    if prepared.turn.transcribe is not None:
        what = texts.what_recording(size)
    elif prepared.turn.images:
        what = texts.what_photo(size)  # the image's bound at the dearest vision key
    else:
        what = texts.what_document(tokens or 0)
    level = _window_name(quote.level, quote.window.value if quote.window else "")
    text = texts.confirm_text(
        what,
        quote.ceiling_musd,
        quote.left_musd,
        level,
        recording=prepared.turn.transcribe is not None,
        wallet_musd=quote.wallet_musd,
        wallet_short_musd=quote.wallet_short_musd,
    )
    reply_to = message.message_id if message.chat.type != "private" else None
    bot: Bot = data["bot"]
    await bot.send_message(
        message.chat.id,
        text,
        reply_markup=_confirm_markup(token),
        reply_to_message_id=reply_to,
        message_thread_id=topic_of(message),
    )
    return IntakeStatus.ANSWERED


async def _system_prompt(message: Message, data: dict[str, Any]) -> str:
    """The chat's persona, as the answer will be sent it: its tokens are in the answer's
    hold, so they are in its price (docs/decisions/160-personas-are-part-of-every-hold.md)."""
    prefs, menu = data.get("chat_prefs"), data.get("model_menu")
    if prefs is None or menu is None:
        return DEFAULT_PROMPT
    return (await persona_of(message.chat.id, prefs, menu)).prompt


def _confirm_markup(token: str) -> InlineKeyboardMarkup:
    """The price question's Go ahead / Cancel buttons."""
    go, cancel = texts.confirm_buttons()
    return InlineKeyboardMarkup(
        inline_keyboard=[
            [
                InlineKeyboardButton(text=go, callback_data=f"{CONFIRM_PREFIX}go:{token}"),
                InlineKeyboardButton(text=cancel, callback_data=f"{CONFIRM_PREFIX}no:{token}"),
            ]
        ]
    )


def _window_name(level: str, window: str) -> str:
    """``user, day`` → the words of that window (``today``, ``this hour``…)."""
    return texts.window_words(level, window)


async def on_confirm(
    query: CallbackQuery,
    bot: Bot,
    confirmations: Confirmations,
    i18n: I18n,
    languages: ReplyLanguages = TELEGRAM_ONLY,
) -> None:
    """Go ahead / Cancel on a price question: only its sender's press counts, once,
    within CONFIRM_TTL_SECONDS. The presser is told in his language; the answer that
    Go ahead starts speaks its message's (the work's own ``in_locale``)."""
    _, action, token = (query.data or "::").split(":", 2)
    message = query.message
    if message is None:
        return
    chat_id = message.chat.id
    user_id = query.from_user.id
    with in_locale(i18n, await languages.of(query.from_user)):
        if action == "no":
            result = confirmations.cancel(token, user_id, chat_id)
            pending = None
        else:
            result, pending = confirmations.take(token, user_id, chat_id)
        log.info("price question in chat %s: %s %s", chat_id, action, result.value)
        if result in (Taken.NOT_YOURS, Taken.GONE):  # the presser alone is told
            text = (
                texts.confirm_not_yours_text()
                if result is Taken.NOT_YOURS
                else texts.confirm_gone_text()
            )
            with contextlib.suppress(TelegramAPIError):
                await query.answer(text, show_alert=result is Taken.NOT_YOURS)
            return
        if result is Taken.EXPIRED:
            text = texts.confirm_expired_text(max(1, round(confirmations.ttl_s / 60)))
        elif action == "no":
            text = texts.cancelled_text()
        else:
            text = texts.going_ahead_text()
        with contextlib.suppress(TelegramAPIError):
            await query.answer()
        with contextlib.suppress(TelegramAPIError):
            await bot.edit_message_text(
                text, chat_id=chat_id, message_id=message.message_id, reply_markup=None
            )
    if pending is not None and result is Taken.GO:
        await pending.run()


def link_route() -> tuple[CallbackType, Filter]:
    """The one-link handler and its filter, for :func:`bot.handlers.chat.create_chat_router`
    (tried before ordinary text, in the chat router that comes first)."""
    return on_link, OneLink()


def create_media_router() -> Router:
    """Documents, photos and recordings (included after the command routers: a document
    whose caption is a command belongs to that command), and the price questions'
    buttons."""
    router = Router(name="media")
    addressed = MediaAddressed()
    # SPENDS: an admin's captioned "/…" file is counted against the update rate
    router.message.register(on_document, F.document, addressed, flags=SPENDS)
    router.message.register(on_photo, F.photo, addressed, flags=SPENDS)
    router.message.register(on_recording, F.voice | F.audio | F.video_note, addressed, flags=SPENDS)
    router.callback_query.register(on_confirm, F.data.startswith(CONFIRM_PREFIX))
    return router
