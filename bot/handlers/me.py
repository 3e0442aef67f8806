"""/me: the user's own spend and what remains at each level, with reset times."""

from __future__ import annotations

from aiogram import Bot, Router
from aiogram.filters import Command
from aiogram.types import Message
from aiogram.utils.i18n import gettext as _

from bot.chat.delivery import send_text
from bot.middlewares.context import UserContext
from bot.text.access import shown_title
from bot.text.templates import format_reset
from bot.text.wallet import wallet_line
from budget.errors import HoldRefused
from budget.kernel.clock import Clock
from budget.ledger import Ledger
from budget.plans import Plans
from budget.policy.levels import LEVEL_ORDER
from budget.policy.money import usd
from budget.policy.wallet import WalletState
from budget.status import BucketStatus, UserStatus
from budget.types import Level, Window

__all__ = ["create_me_router", "render_me"]


def _level_name(level: Level) -> str:
    if level is Level.USER:
        return _("user")
    if level is Level.PLAN:
        return _("plan")
    if level is Level.CHAT:
        return _("group")
    if level is Level.TEAM:
        return _("team")
    if level is Level.PROVIDER:
        return _("provider")
    return _("global")


def _window_name(window: Window) -> str:
    if window is Window.HOUR:
        return _("this hour")
    if window is Window.MONTH:
        return _("this month")
    return _("today")


def _bucket_line(b: BucketStatus, tz: str) -> str:
    window = _window_name(b.window)
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
            reset=format_reset(b.resets_at, tz, with_date=b.window is Window.MONTH),
        )
    return _(
        "{level}, {window}: spent {spent} of {limit}, {remaining} left; resets at {reset}"
    ).format(
        level=_level_name(b.level),
        window=window,
        spent=usd(b.settled_musd + b.held_musd),
        limit=usd(b.limit_musd),
        remaining=usd(remaining),
        reset=format_reset(b.resets_at, tz, with_date=b.window is Window.MONTH),
    )


def render_me(
    status: UserStatus,
    tz: str,
    plan_title: str | None = None,
    wallet: WalletState | None = None,
) -> str:
    """The /me text (``plan_title``: what users see of the user's plan; default its
    name; ``wallet``: the user's wallet, shown once a payment credited it)."""
    plan_title = plan_title or status.plan or ""
    lines = [_("📊 Your usage (times in {tz})").format(tz=tz)]
    lines.append(_("Spent today: {spent}").format(spent=usd(status.settled_today_musd)))
    if status.plan and status.plan_until is not None:
        lines.append(
            _("Plan: {plan}, until {until}").format(
                plan=plan_title, until=format_reset(status.plan_until, tz, with_date=True)
            )
        )
    elif status.plan:
        lines.append(_("Plan: {plan}").format(plan=plan_title))
    if status.team:
        lines.append(_("Team: {team}").format(team=status.team))
    if wallet is not None and wallet.payments:
        lines.append(wallet_line(wallet.left_musd, wallet.spent_musd, wallet.held_musd))
    windows = (Window.HOUR, Window.DAY, Window.MONTH)
    # the user's own windows always; another level's only where it has a limit
    shown = [
        b
        for b in status.buckets
        if b.window in windows
        and b.level is not Level.PROVIDER
        and (b.level is Level.USER or b.limit_musd is not None)
    ]
    for b in sorted(shown, key=lambda x: (LEVEL_ORDER.index(x.level), windows.index(x.window))):
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
    message: Message,
    bot: Bot,
    clock: Clock,
    user_ctx: UserContext,
    ledger: Ledger,
    plans: Plans | None = None,
) -> None:
    """/me: the sender's spend and what remains, with reset times."""
    try:
        status = await ledger.user_status(user_ctx.user_id)
        wallet = await ledger.wallet(user_ctx.user_id)
    except HoldRefused:
        text = _("⚠️ The budget ledger is unavailable right now. Please retry in a minute.")
    else:
        plan = plans.get(status.plan) if plans is not None and status.plan else None
        title = shown_title(plan.title) if plan is not None else None
        text = render_me(status, user_ctx.tz, title, wallet)
    await send_text(bot, message.chat.id, text, clock=clock)


def create_me_router() -> Router:
    """The /me router."""
    router = Router(name="me")
    router.message.register(on_me, Command("me"))
    return router
