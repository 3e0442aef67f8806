"""``/persona`` and ``/model``: a chat's system prompt and model.

Stored per chat (every topic of a group shares them); in groups only the group's admins
(Telegram's ``getChatMember``: creator or administrator) or the bot's ADMIN_IDS change
them, and never a message sent on behalf of a chat. Showing them is open to everyone.
A persona's tokens are part of every hold, and ``/persona`` says how many
(docs/decisions/160-personas-are-part-of-every-hold.md); ``/model`` offers exactly the
models the cascade can serve and CHAT_MODELS allows, with their list prices
(docs/decisions/161-model-choice-per-chat.md).
"""

from __future__ import annotations

import logging

from aiogram import Bot, Router
from aiogram.exceptions import ClientDecodeError, TelegramAPIError
from aiogram.filters import Command, CommandObject
from aiogram.types import Message
from sqlalchemy.exc import SQLAlchemyError

from bot.chat.delivery import send_text
from bot.chat.model_menu import ModelMenu
from bot.chat.persona import ChatPersona
from bot.chat.service import ChatService
from bot.middlewares.context import UserContext
from bot.storage.chat_prefs import ChatPrefs, ChatPrefsStore
from bot.text import model_texts, personas
from budget.errors import LedgerUnavailable
from budget.kernel.clock import Clock
from llm.sanitize import clean_prompt, has_visible, unsafe_characters

__all__ = ["create_persona_router", "persona_of"]

log = logging.getLogger(__name__)

_ADMIN_STATUSES = frozenset({"creator", "administrator"})


async def persona_of(chat_id: int, prefs_store: ChatPrefsStore, menu: ModelMenu) -> ChatPersona:
    """The chat's persona and model for one message, in the current locale. A stored
    model no longer offered (the configuration changed) is automatic; a store that
    cannot be read gives the defaults (logged): never a dearer model than chosen."""
    try:
        prefs = await prefs_store.get(chat_id)
    except (SQLAlchemyError, OSError, LedgerUnavailable):
        # a storage failure must not stop the answer (the message path's statements,
        # bot.storage.hot, raise LedgerUnavailable; the ORM SQLAlchemyError or OSError)
        log.warning("chat prefs of %s unreadable; default persona and model", chat_id)
        prefs = ChatPrefs()
    offer = menu.find(prefs.model)
    return ChatPersona(
        personas.persona_prompt(prefs.persona, prefs.persona_text),
        offer.model if offer is not None else None,
    )


async def _may_change(message: Message, bot: Bot, user_ctx: UserContext) -> str | None:
    """``None`` when the sender may change this chat's choices, else the refusal."""
    if message.sender_chat is not None:
        return personas.as_yourself_text()
    if message.chat.type == "private" or user_ctx.is_admin:
        return None
    try:
        member = await bot.get_chat_member(message.chat.id, user_ctx.user_id)
    except (TelegramAPIError, ClientDecodeError):  # refused, or a shape aiogram cannot read
        log.warning("getChatMember failed for chat %s", message.chat.id, exc_info=True)
        return personas.admin_check_failed_text()
    return None if member.status in _ADMIN_STATUSES else personas.not_chat_admin_text()


async def _reply(message: Message, bot: Bot, clock: Clock, text: str) -> None:
    # a topic's message is answered in that topic (bot/middlewares/topics.py)
    await send_text(bot, message.chat.id, text, clock=clock)


async def on_persona(
    message: Message,
    bot: Bot,
    clock: Clock,
    command: CommandObject,
    user_ctx: UserContext,
    chat_prefs: ChatPrefsStore,
    model_menu: ModelMenu,
    chat_service: ChatService,
    persona_max_chars: int,
) -> None:
    """/persona [NAME | custom TEXT | reset]: show or change the chat's persona."""
    arg = (command.args or "").strip()
    if not arg:
        prefs = await chat_prefs.get(message.chat.id)
        prompt = personas.persona_prompt(prefs.persona, prefs.persona_text)
        tokens = await chat_service.system_tokens(prompt)
        anchor = model_menu.paid_input_musd(tokens)
        text = personas.persona_menu_text(
            prefs.persona, tokens, anchor, persona_max_chars, prefs.persona_text
        )
        await _reply(message, bot, clock, text)
        return
    name, _, rest = arg.partition(" ")
    key, custom = name.lower(), None
    if key == personas.CUSTOM:
        custom = clean_prompt(rest).strip()
        if not has_visible(custom):  # also only zero-width or other invisible characters
            await _reply(message, bot, clock, personas.persona_empty_text())
            return
        if unsafe := unsafe_characters(custom):
            await _reply(message, bot, clock, personas.persona_unsafe_text(unsafe))
            return
        if len(custom) > persona_max_chars:
            text = personas.persona_too_long_text(len(custom), persona_max_chars)
            await _reply(message, bot, clock, text)
            return
    elif key in ("reset", "default"):
        key = ""
    elif personas.persona_by_key(key) is None:
        await _reply(message, bot, clock, personas.persona_unknown_text())
        return
    refusal = await _may_change(message, bot, user_ctx)
    if refusal is not None:
        await _reply(message, bot, clock, refusal)
        return
    await chat_prefs.set_persona(message.chat.id, key, custom, by=user_ctx.user_id, now=clock.now())
    tokens = await chat_service.system_tokens(personas.persona_prompt(key, custom))
    text = personas.persona_set_text(key, tokens, model_menu.paid_input_musd(tokens))
    await _reply(message, bot, clock, text)


async def on_model(
    message: Message,
    bot: Bot,
    clock: Clock,
    command: CommandObject,
    user_ctx: UserContext,
    chat_prefs: ChatPrefsStore,
    model_menu: ModelMenu,
) -> None:
    """/model [NAME | auto]: list the models with their prices, or choose one."""
    arg = (command.args or "").strip()
    if not arg:
        prefs = await chat_prefs.get(message.chat.id)
        offer = model_menu.find(prefs.model)
        text = model_texts.model_menu_text(model_menu, offer, stale=prefs.model is not None)
        await _reply(message, bot, clock, text)
        return
    chosen = None
    if arg.lower() not in ("auto", "reset", "default"):
        chosen = model_menu.find(arg)
        if chosen is None:
            served = model_menu.served(arg)
            await _reply(message, bot, clock, model_texts.model_unknown_text(served))
            return
    refusal = await _may_change(message, bot, user_ctx)
    if refusal is not None:
        await _reply(message, bot, clock, refusal)
        return
    await chat_prefs.set_model(
        message.chat.id,
        chosen.model if chosen is not None else None,
        by=user_ctx.user_id,
        now=clock.now(),
    )
    await _reply(message, bot, clock, model_texts.model_set_text(model_menu, chosen))


def create_persona_router() -> Router:
    """/persona and /model."""
    router = Router(name="persona")
    router.message.register(on_persona, Command("persona"))
    router.message.register(on_model, Command("model"))
    return router
