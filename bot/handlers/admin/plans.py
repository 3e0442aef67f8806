"""/plan: put a user on a plan (until a date), and list the plans (``docs/access.md``)."""

from __future__ import annotations

import re
from datetime import date, datetime, time, timedelta
from zoneinfo import ZoneInfo

from aiogram import Bot
from aiogram.filters import CommandObject
from aiogram.types import Message

from bot.access.invites import parse_ttl, ttl_problem
from bot.access.store import AccessBook
from bot.chat.plans import UserPlans
from bot.handlers.admin.access import banned_note
from bot.handlers.admin.base import USER_ID_RULE, AdminView, parse_user_id, reply
from budget.kernel.clock import Clock
from budget.kernel.shown import echoed
from budget.ledger import Ledger
from budget.plans import Plan, Plans
from budget.policy.money import usd
from budget.policy.windows import local_instant
from budget.types import Window

__all__ = ["PLAN_USAGE", "on_plan", "parse_until", "render_plans"]

PLAN_USAGE = "Usage: /plan <user id> <plan | default> [until: YYYY-MM-DD or 30d], or /plan list"
_DATE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")


def parse_until(text: str, now: datetime, tz: str) -> datetime | None:
    """``YYYY-MM-DD`` (the plan ends at that day's local midnight in ``tz``) or a
    duration (``12h``, ``30d``, ``2w``) from ``now``; ``None``: neither, or not in the
    future."""
    if _DATE.fullmatch(text):
        try:
            day = date.fromisoformat(text)
        except ValueError:
            return None
        until = local_instant(day, time(0, 0), ZoneInfo(tz))
    else:
        hours = parse_ttl(text)
        if hours is None:
            return None
        until = now + timedelta(hours=hours)
    return until if until > now else None


def until_problem(text: str, now: datetime, tz: str) -> str:
    """Why :func:`parse_until` took no end from ``text``: a sentence naming it."""
    shown = echoed(text, 40)
    if _DATE.fullmatch(text):
        try:
            day = date.fromisoformat(text)
        except ValueError:
            return f"'{shown}' is no calendar date (YYYY-MM-DD)."
        start = local_instant(day, time(0, 0), ZoneInfo(tz))
        return (
            f"{day:%Y-%m-%d} is in the past: a plan ends at that day's midnight ({tz}),"
            f" and it is {now.astimezone(ZoneInfo(tz)):%Y-%m-%d %H:%M} there now."
            if start <= now
            else PLAN_USAGE
        )
    return ttl_problem(text) or PLAN_USAGE


def _limits(plan: Plan) -> str:
    parts = []
    for window in (Window.HOUR, Window.DAY, Window.MONTH):
        if window in plan.limits.user_musd:
            value = plan.limits.user_musd[window]
            parts.append(f"{window.value} {usd(value) if value is not None else 'off'}")
    money = ", ".join(parts) or "the BUDGET_USER_* defaults"
    extra = []
    if plan.limits.max_inflight is not None:
        extra.append(f"{plan.limits.max_inflight} at once")
    if plan.limits.per_minute is not None:
        extra.append(f"{plan.limits.per_minute}/min")
    if plan.stars is not None:
        extra.append(f"{plan.stars} Stars / {plan.period_days} days")
    return f"each member {money}" + (f"; {', '.join(extra)}" if extra else "")


def render_plans(plans: Plans) -> str:
    """``/plan list``."""
    lines = [f"Plans ({plans.source}; default {plans.default}):"]
    for plan in plans.by_name.values():
        lines.append(
            f"• {plan.name} ({echoed(plan.title, 64)}, priority {plan.priority}): {_limits(plan)}"
        )
    return "\n".join(lines)


async def on_plan(
    message: Message,
    bot: Bot,
    clock: Clock,
    command: CommandObject,
    ledger: Ledger,
    plans: Plans,
    settings_view: AdminView,
    user_plans: UserPlans | None = None,
    access: AccessBook | None = None,
) -> None:
    """/plan <user id> <plan | default> [until], /plan list (``access``: to say that a
    banned user stays refused on any plan)."""
    args = (command.args or "").split()
    if args == ["list"]:
        await reply(bot, message, render_plans(plans), clock)
        return
    if len(args) not in (2, 3):
        await reply(bot, message, PLAN_USAGE, clock)
        return
    uid = parse_user_id(args[0])
    if uid is None:
        await reply(bot, message, USER_ID_RULE, clock)
        return
    name = None if args[1] == "default" else args[1]
    if name is not None and name not in plans.by_name:
        known = ", ".join(plans.by_name)
        await reply(bot, message, f"No plan '{echoed(name)}'; the plans are {known}.", clock)
        return
    until = None
    if len(args) == 3:
        until = parse_until(args[2], clock.now(), settings_view.tz)
        if until is None:
            await reply(bot, message, until_problem(args[2], clock.now(), settings_view.tz), clock)
            return
    by = message.from_user.id if message.from_user else None
    await ledger.set_plan(uid, name, until=until, by=by)
    if user_plans is not None:
        user_plans.forget(uid)
    shown = name or f"the default plan ({plans.default})"
    end = "" if until is None else f" until {until:%Y-%m-%d %H:%M} UTC"
    banned = "" if access is None else await banned_note(access, uid)
    lines = [f"User {uid} is on {shown}{end}; messages from now on are held on its limits."]
    if banned:
        lines.append(banned.strip())
    lines += ["⚠️ " + w for w in await ledger.limit_warnings()]
    await reply(bot, message, "\n".join(lines), clock)
