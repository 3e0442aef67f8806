"""The bot's own membership of a group changed (``my_chat_member``): stay where it may
work, leave where it may not (``docs/access.md``).

In ``allowlist`` mode a group the bot is added to is enabled when an admin (ADMIN_IDS)
added it — from then on every member may use it there — and otherwise told once that it
is not enabled and left (``leaveChat``). A banned group is left in silence, in any mode.
"""

from __future__ import annotations

import logging

from aiogram import Bot, Router
from aiogram.types import ChatMemberUpdated
from aiogram.utils.i18n import I18n

from bot.access.store import AccessBook
from bot.chat.delivery import send_text
from bot.middlewares.languages import TELEGRAM_ONLY, ReplyLanguages
from bot.text.access import group_not_enabled_text
from bot.text.i18n import in_locale
from budget.kernel.clock import Clock

__all__ = ["create_access_router", "on_my_chat_member"]

log = logging.getLogger(__name__)

_IN = frozenset({"member", "administrator", "restricted"})


async def on_my_chat_member(
    event: ChatMemberUpdated,
    bot: Bot,
    clock: Clock,
    access: AccessBook,
    i18n: I18n,
    admin_ids: frozenset[int],
    languages: ReplyLanguages = TELEGRAM_ONLY,
) -> None:
    """The bot was added to (or removed from) a chat."""
    chat = event.chat
    if chat.type not in ("group", "supergroup") or event.new_chat_member.status not in _IN:
        return
    if event.old_chat_member.status in _IN:
        return  # its rights changed; it was in already
    lists = await access.lists()
    if chat.id in lists.banned:
        log.info("leaving banned chat %s", chat.id)
        await bot.leave_chat(chat.id)
        return
    adder = event.from_user
    if adder.id in admin_ids and not adder.is_bot:
        if access.allowlist and chat.id not in lists.chats:
            await access.store.allow(chat.id, by=adder.id, source="admin_added")
            access.changed()
            log.info("chat %s enabled: added by admin %s", chat.id, adder.id)
        return
    if not access.allowlist or chat.id in lists.chats:
        return
    if await access.store.notice_due(chat.id, every=None):
        language = await languages.of(adder)
        with in_locale(i18n, language):
            text = group_not_enabled_text()
        await send_text(bot, chat.id, text, clock=clock)
    log.info("leaving chat %s: added by %s, not enabled there", chat.id, adder.id)
    await bot.leave_chat(chat.id)


def create_access_router() -> Router:
    """The ``my_chat_member`` router."""
    router = Router(name="access")
    router.my_chat_member.register(on_my_chat_member)
    return router
