"""Digest commands: /sub, /unsub, /subs, /digest_time, /digest_off, /digest_on.

Digests go to a person's private chat, so in a group these commands are for members the
bot serves there too: in allowlist mode a member who is only in through the group's
allowance gets :func:`bot.text.access.group_guest_digests_text` and nothing changes
(:class:`GroupGuest`; decision 296).
"""

from __future__ import annotations

import unicodedata
from urllib.parse import urlsplit

from aiogram import Bot, F, Router
from aiogram.filters import Command, CommandObject, Filter
from aiogram.types import Message
from aiogram.utils.i18n import gettext as _
from aiogram.utils.i18n import ngettext

from bot.access.store import AccessBook
from bot.chat.delivery import send_text
from bot.chat.plans import UserPlans
from bot.middlewares.context import UserContext
from bot.text.access import group_guest_digests_text, plan_feature_text
from budget.kernel.clock import Clock
from budget.kernel.shown import echoed
from scheduler.service import DigestService
from scheduler.types import SubscribeResult, SubscribeStatus

__all__ = ["GroupGuest", "create_digest_router", "subscribe_text"]

#: The most characters of a source's title or address quoted in a reply.
_SHOWN = 256
#: The commands that set up or change a person's digest.
_COMMANDS = ("sub", "unsub", "subs", "digest_time", "digest_off", "digest_on")


class GroupGuest(Filter):
    """True for a message in a group from a person the bot does not serve in a private
    chat (allowlist mode, not an admin, not allowed, or banned since): the gate let them
    in for that group only (:func:`bot.access.rules.decide`)."""

    async def __call__(self, message: Message, access: AccessBook | None = None) -> bool:
        if message.chat.type == "private" or access is None or message.from_user is None:
            return False
        return not await access.serves_privately(message.from_user.id)


async def on_group_guest(message: Message, bot: Bot, clock: Clock) -> None:
    """A digest command from a :class:`GroupGuest`: the template, nothing subscribed."""
    await send_text(bot, message.chat.id, group_guest_digests_text(), clock=clock)


def subscribe_text(result: SubscribeResult, *, unsubscribing: bool = False) -> str:
    """The reply to /sub or /unsub."""
    # a channel's or feed's title is its owner's choice: quoted as a value (no bidi
    # override or control character reaches the chat as it is)
    name = echoed(result.title or (result.source.display if result.source else ""), _SHOWN)
    s = result.status
    if s is SubscribeStatus.OK:
        if unsubscribing:
            return _("Unsubscribed from {name}.").format(name=name)
        return _("✅ Subscribed to {name}. It will be in your next daily digest.").format(name=name)
    if s is SubscribeStatus.ALREADY:
        return _("You are already subscribed to {name}.").format(name=name)
    if s is SubscribeStatus.NO_PREVIEW:
        return _(
            "This channel has no public web preview, so I cannot read it. "
            "Only public channels with a preview at t.me/s/… work."
        )
    if s is SubscribeStatus.REFUSED_ADDRESS:
        return _("This address is not allowed: feeds must be on public internet hosts.")
    if s is SubscribeStatus.UNRESOLVED:
        host = urlsplit(result.source.key).hostname if result.source else None
        return _(
            "I could not resolve the host {host}, so nothing was subscribed. "
            "Please try again later or check the address."
        ).format(host=echoed(host) if host else name)
    if s is SubscribeStatus.TOO_MANY:
        return ngettext(
            "You have reached the limit of {limit} subscription.",
            "You have reached the limit of {limit} subscriptions.",
            result.limit,
        ).format(limit=result.limit)
    if s is SubscribeStatus.UNAVAILABLE:
        return _("I could not reach this source right now. Please try again later.")
    if s is SubscribeStatus.RATE_LIMITED:
        return _("Too many /sub look-ups in a short time. Please try again in {seconds} s.").format(
            seconds=result.retry_after_s
        )
    if s is SubscribeStatus.NOT_SUBSCRIBED:
        return _("You are not subscribed to {name}.").format(name=name)
    if unsubscribing:
        return _unsub_usage()
    return _("Usage: /sub @channel, /sub https://t.me/channel or /sub https://site/feed.xml")


def _unsub_usage() -> str:
    return _("Usage: /unsub @channel or /unsub <feed URL>; /subs lists them.")


def _source_argument(command: CommandObject) -> str:
    """The /sub or /unsub argument: without invisible format characters (category
    ``Cf``: zero-width spaces and joiners, direction marks and embeddings, a byte order
    mark — none is part of a channel name or a URL, and a client may paste one in) and
    without surrounding white space; ``""``: none."""
    text = command.args or ""
    return "".join(ch for ch in text if unicodedata.category(ch) != "Cf").strip()


async def on_sub(
    message: Message,
    bot: Bot,
    clock: Clock,
    command: CommandObject,
    user_ctx: UserContext,
    digests: DigestService,
    user_plans: UserPlans | None = None,
) -> None:
    """/sub @channel or a feed URL (within the user's plan: digests at all, and its
    number of subscriptions)."""
    limit = None
    if user_plans is not None:
        plan = await user_plans.of(user_ctx.user_id)
        if not plan.features.digests:
            text = plan_feature_text(_("channel digests"), plan.title)
            await send_text(bot, message.chat.id, text, clock=clock)
            return
        limit = plan.features.max_subscriptions
    result = await digests.subscribe(
        user_ctx.user_id, _source_argument(command), max_subscriptions=limit
    )
    await send_text(bot, message.chat.id, subscribe_text(result), clock=clock)


async def on_unsub(
    message: Message,
    bot: Bot,
    clock: Clock,
    command: CommandObject,
    user_ctx: UserContext,
    digests: DigestService,
) -> None:
    """/unsub @channel or a feed URL."""
    arg = _source_argument(command)
    if not arg:
        await send_text(bot, message.chat.id, _unsub_usage(), clock=clock)
        return
    result = await digests.unsubscribe(user_ctx.user_id, arg)
    text = subscribe_text(result, unsubscribing=True)
    await send_text(bot, message.chat.id, text, clock=clock)


async def on_subs(
    message: Message, bot: Bot, clock: Clock, user_ctx: UserContext, digests: DigestService
) -> None:
    """/subs: the sender's subscriptions."""
    subs = await digests.list_subscriptions(user_ctx.user_id)
    if not subs:
        text = _("No subscriptions yet. Add one with /sub @channel.")
    else:
        lines = [_("Your subscriptions:")]
        for sub in subs:
            lost = _(" (no public preview now)") if sub.preview_lost else ""
            title = f" — {echoed(sub.title, _SHOWN)}" if sub.title else ""
            lines.append(f"• {sub.source.display}{title}{lost}")
        text = "\n".join(lines)
    await send_text(bot, message.chat.id, text, clock=clock)


async def on_digest_time(
    message: Message,
    bot: Bot,
    clock: Clock,
    command: CommandObject,
    user_ctx: UserContext,
    digests: DigestService,
) -> None:
    """/digest_time HH:MM (the sender's local time)."""
    arg = (command.args or "").strip()
    try:
        profile = await digests.set_digest_time(user_ctx.user_id, arg)
    except ValueError:
        text = _("Usage: /digest_time HH:MM, e.g. /digest_time 08:30 (your local time).")
    else:
        text = _("Your digest will come daily at {time} ({tz}).").format(
            time=profile.digest_time, tz=user_ctx.tz
        )
    await send_text(bot, message.chat.id, text, clock=clock)


async def on_digest_off(
    message: Message, bot: Bot, clock: Clock, user_ctx: UserContext, digests: DigestService
) -> None:
    """/digest_off."""
    await digests.digest_off(user_ctx.user_id)
    text = _("Daily digests are off. /digest_on turns them back on.")
    await send_text(bot, message.chat.id, text, clock=clock)


async def on_digest_on(
    message: Message, bot: Bot, clock: Clock, user_ctx: UserContext, digests: DigestService
) -> None:
    """/digest_on."""
    profile = await digests.digest_on(user_ctx.user_id)
    text = _("Daily digests are on, at {time} ({tz}).").format(
        time=profile.digest_time, tz=user_ctx.tz
    )
    await send_text(bot, message.chat.id, text, clock=clock)


def create_digest_router() -> Router:
    """The digest commands router."""
    router = Router(name="digests")
    # subscriptions belong to a person's profile; a message sent on behalf of a chat
    # (anonymous admin, channel) has none and falls through like an unknown command
    router.message.filter(F.sender_chat.is_(None))
    router.message.register(on_group_guest, Command(*_COMMANDS), GroupGuest())
    router.message.register(on_sub, Command("sub"))
    router.message.register(on_unsub, Command("unsub"))
    router.message.register(on_subs, Command("subs"))
    router.message.register(on_digest_time, Command("digest_time"))
    router.message.register(on_digest_off, Command("digest_off"))
    router.message.register(on_digest_on, Command("digest_on"))
    return router
