"""/me: the user's own spend and what remains at each level, with reset times."""

from __future__ import annotations

from aiogram import Bot, Router
from aiogram.filters import Command
from aiogram.types import Message
from aiogram.utils.i18n import gettext as _

from bot.chat.delivery import send_text
from bot.middlewares.context import UserContext
from bot.text.templates import format_reset
from budget.errors import HoldRefused
from budget.kernel.clock import Clock
from budget.ledger import Ledger
from budget.policy.money import usd
from budget.status import BucketStatus, UserStatus
from budget.types import Level, Window

__all__ = ["create_me_router", "render_me"]


def _level_name(level: Level) -> str:
    if level is Level.USER:
        return _("user")
    if level is Level.TEAM:
        return _("team")
    if level is Level.PROVIDER:
        return _("provider")
    return _("global")


def _bucket_line(b: BucketStatus, tz: str) -> str:
    window = _("this hour") if b.window is Window.HOUR else _("today")
    if b.limit_musd is None:
        return _("{level}, {window}: spent {spent} (no limit)").format(
            level=_level_name(b.level), window=window, spent=usd(b.settled_musd)
        )
    remaining = b.remaining_musd or 0
    if remaining < 0:
        # spend above a limit lowered after it: nothing is left, never a negative amount
        return _(
            "{level}, {window}: spent {spent} of {limit}, limit reached (over by {over}); "
            "resets at {reset}"
        ).format(
            level=_level_name(b.level),
            window=window,
            spent=usd(b.settled_musd + b.held_musd),
            limit=usd(b.limit_musd),
            over=usd(-remaining),
            reset=format_reset(b.resets_at, tz),
        )
    return _(
        "{level}, {window}: spent {spent} of {limit}, {remaining} left; resets at {reset}"
    ).format(
        level=_level_name(b.level),
        window=window,
        spent=usd(b.settled_musd + b.held_musd),
        limit=usd(b.limit_musd),
        remaining=usd(remaining),
        reset=format_reset(b.resets_at, tz),
    )


def render_me(status: UserStatus, tz: str) -> str:
    """The /me text."""
    lines = [_("📊 Your usage (times in {tz})").format(tz=tz)]
    lines.append(_("Spent today: {spent}").format(spent=usd(status.settled_today_musd)))
    if status.team:
        lines.append(_("Team: {team}").format(team=status.team))
    order = {Level.USER: 0, Level.TEAM: 1, Level.GLOBAL: 2, Level.PROVIDER: 3}
    for b in sorted(status.buckets, key=lambda x: (order[x.level], x.window != Window.HOUR)):
        if b.window in (Window.HOUR, Window.DAY) and b.level is not Level.PROVIDER:
            lines.append("• " + _bucket_line(b, tz))
    if status.messages_limit is not None:
        left = max(0, status.messages_limit - status.messages_today)
        lines.append(
            _("Messages left today: {left} of {limit}").format(
                left=left, limit=status.messages_limit
            )
        )
    if status.inflight:
        lines.append(_("Requests running now: {n}").format(n=status.inflight))
    if status.killed is not None and status.killed.killed:
        if status.killed.scope_kind == "global":
            lines.append(_("⏸ The bot is paused by its administrators."))
        else:
            lines.append(_("⏸ Your access is paused by the administrators."))
    return "\n".join(lines)


async def on_me(
    message: Message, bot: Bot, clock: Clock, user_ctx: UserContext, ledger: Ledger
) -> None:
    """/me: the sender's spend and what remains, with reset times."""
    try:
        status = await ledger.user_status(user_ctx.user_id)
    except HoldRefused:
        text = _("⚠️ The budget ledger is unavailable right now. Please retry in a minute.")
    else:
        text = render_me(status, user_ctx.tz)
    await send_text(bot, message.chat.id, text, clock=clock)


def create_me_router() -> Router:
    """The /me router."""
    router = Router(name="me")
    router.message.register(on_me, Command("me"))
    return router
