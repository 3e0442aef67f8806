"""User commands: /start, /help, /reset, /tz, /lang or /language (and the unknown-command
fallback)."""

from __future__ import annotations

from functools import lru_cache
from zoneinfo import available_timezones

from aiogram import Bot, F, Router
from aiogram.filters import Command, CommandObject, CommandStart
from aiogram.types import Message
from aiogram.utils.i18n import I18n
from aiogram.utils.i18n import gettext as _

from bot.access.sales import PlanSales
from bot.chat.delivery import send_text
from bot.middlewares.context import ProfileStore, UserContext
from bot.middlewares.topics import topic_of
from bot.storage.repos import Conversation, History
from bot.text import commands, templates
from bot.text.i18n import LANGUAGE_NAMES, SUPPORTED_LANGUAGES
from budget.kernel.clock import Clock
from budget.kernel.shown import echoed

__all__ = ["create_common_router", "create_fallback_router"]


@lru_cache(maxsize=1)
def _zones_by_folded_name() -> dict[str, str]:
    return {name.casefold(): name for name in available_timezones()}


def canonical_zone(name: str) -> str | None:
    """The IANA zone whose name matches ``name`` ignoring case (``europe/berlin`` →
    ``Europe/Berlin``), or ``None``."""
    return _zones_by_folded_name().get(name.strip().casefold())


async def on_start(message: Message, bot: Bot, clock: Clock) -> None:
    """/start: the greeting."""
    name = echoed(message.from_user.first_name) if message.from_user else ""
    await send_text(bot, message.chat.id, templates.start_text(name), clock=clock)


async def on_help(
    message: Message,
    bot: Bot,
    clock: Clock,
    admin_ids: frozenset[int] = frozenset(),
    plan_sales: PlanSales | None = None,
) -> None:
    """/help: the commands this sender may use here (:mod:`bot.text.commands`; for an
    admin in a private chat, the admin commands too)."""
    sender = message.from_user.id if message.from_user is not None else None
    # never from sender_chat: an anonymous admin's message is the group's, not an admin's
    admin = sender in admin_ids and message.sender_chat is None
    selling = plan_sales is not None and any(
        p.stars is not None for p in plan_sales.plans.by_name.values()
    )
    text = commands.help_text(admin=admin, private=message.chat.type == "private", selling=selling)
    await send_text(bot, message.chat.id, text, clock=clock)


async def on_reset(
    message: Message, bot: Bot, clock: Clock, user_ctx: UserContext, history: History
) -> None:
    """/reset: forget this chat's (and topic's) history of the sender."""
    # history is per chat and topic: this one's goes, the user's other chats keep theirs
    thread_id = topic_of(message)
    await history.clear(Conversation(message.chat.id, thread_id, user_ctx.user_id))
    if thread_id is None:
        text = _("🧹 Your conversation history in this chat is cleared; other chats keep theirs.")
    else:
        text = _(
            "🧹 Your conversation history in this topic is cleared; "
            "other topics and chats keep theirs."
        )
    await send_text(bot, message.chat.id, text, clock=clock)


async def on_tz(
    message: Message,
    bot: Bot,
    clock: Clock,
    command: CommandObject,
    user_ctx: UserContext,
    profiles: ProfileStore,
) -> None:
    """/tz [Area/City]: show or set the sender's timezone."""
    arg = (command.args or "").strip()
    if not arg:
        text = _("Your timezone is {tz}. Change it with /tz Area/City, e.g. /tz Europe/Berlin.")
        await send_text(bot, message.chat.id, text.format(tz=user_ctx.tz), clock=clock)
        return
    # Only names of the zone database are zones: "Europe" is a folder and a long
    # name is an OSError inside ZoneInfo, neither may reach ZoneInfo.
    zone = canonical_zone(arg)
    if zone is None:
        text = _("Unknown timezone. Use an IANA name such as Europe/Berlin or Asia/Tokyo.")
        await send_text(bot, message.chat.id, text, clock=clock)
        return
    arg = zone
    await profiles.set_tz(user_ctx.user_id, arg)
    await send_text(bot, message.chat.id, _("Timezone set to {tz}.").format(tz=arg), clock=clock)


async def on_lang(
    message: Message,
    bot: Bot,
    clock: Clock,
    command: CommandObject,
    user_ctx: UserContext,
    profiles: ProfileStore,
    i18n: I18n,
) -> None:
    """/lang (or /language) [CODE]: list the languages, or set the sender's."""
    arg = (command.args or "").strip().lower().replace("_", "-")
    code = arg.split("-")[0] if arg else ""
    if code not in SUPPORTED_LANGUAGES:
        choices = ", ".join(f"{c} ({name})" for c, name in LANGUAGE_NAMES.items())
        text = _("Your language: {current}. Choose one with /lang CODE: {choices}.").format(
            current=LANGUAGE_NAMES[user_ctx.language], choices=choices
        )
        if arg:  # a code was given: say it is not one of them
            text = _("Unknown language code: {code}. Known: {choices}.").format(
                code=echoed(arg, 40), choices=choices
            )
        await send_text(bot, message.chat.id, text, clock=clock)
        return
    await profiles.set_language(user_ctx.user_id, code)
    with i18n.use_locale(code):
        await send_text(bot, message.chat.id, _("Language set: English."), clock=clock)


def create_common_router() -> Router:
    """/start, /help, /reset, /tz, /lang."""
    router = Router(name="common")
    router.message.register(on_start, CommandStart())
    router.message.register(on_help, Command("help"))
    router.message.register(on_reset, Command("reset"))
    # /tz and /lang set a person's profile; a message sent on behalf of a chat has none
    router.message.register(on_tz, Command("tz"), F.sender_chat.is_(None))
    router.message.register(on_lang, Command("lang", "language"), F.sender_chat.is_(None))
    return router


async def on_unknown(message: Message, bot: Bot, clock: Clock) -> None:
    """A command no router took: "unknown command" in private chats, nothing in groups."""
    if message.chat.type != "private":
        return
    await send_text(bot, message.chat.id, templates.unknown_command_text(), clock=clock)


def create_fallback_router() -> Router:
    """Any command no other router took — including admin commands from non-admins,
    which must look exactly like a typo.

    Private chats get the "unknown command" template. Groups get nothing: Telegram
    delivers every command to every bot in a group (privacy mode off), so a command we
    do not know (``/frobnicate``) or one addressed to another bot (``/help@other_bot``,
    which aiogram's ``Command`` filter does not match: it compares the mention with our
    username from getMe) is another bot's business.

    A file whose caption is a command no router took (``/budget`` from a non-admin on a
    document) is the same: the caption is that command's (the command routers read
    captions as aiogram's ``Command`` does), so it is never sent to a model as the
    file's prompt.
    """
    router = Router(name="fallback")
    router.message.register(on_unknown, F.text.startswith("/") | F.caption.startswith("/"))
    return router
