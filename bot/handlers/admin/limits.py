"""/limit and /team: spending limits per level and window, and team membership."""

from __future__ import annotations

from dataclasses import dataclass

from aiogram import Bot
from aiogram.filters import CommandObject
from aiogram.types import Message

from bot.handlers.admin.base import (
    TEAM_NAME_RULE,
    USER_ID_RULE,
    parse_user_id,
    reply,
    valid_team_name,
)
from budget.kernel.clock import Clock
from budget.ledger import Ledger
from budget.policy.money import parse_usd, usd
from budget.types import Level, Window

__all__ = [
    "AMOUNT_RULE",
    "LIMIT_USAGE",
    "TEAM_USAGE",
    "LimitChange",
    "on_limit",
    "on_team",
    "parse_limit",
]

LIMIT_USAGE = "Usage: /limit <global|team NAME|user ID> <hour|day> <usd|off>"
TEAM_USAGE = "Usage: /team <NAME> add|remove <user id>, or /team list"
AMOUNT_RULE = "The amount is USD with at most 6 decimals, from 0 to 1000000, e.g. 0.50 (or 'off')."


@dataclass(frozen=True, slots=True)
class LimitChange:
    """What ``/limit`` sets.

    Attributes:
        level: global, team or user.
        scope: the team name or user id (``""`` for global).
        window: hour or day.
        amount_musd: the new limit in µUSD, ``None``: no limit (``off``).
    """

    level: Level
    scope: str
    window: Window
    amount_musd: int | None


def parse_limit(args: list[str]) -> LimitChange | str:
    """``global hour 0.5`` / ``team NAME day off`` / ``user 42 day 1.00``; a string is
    the reason the arguments were refused."""
    if args[:1] == ["global"] and len(args) == 3:
        level, scope, rest = Level.GLOBAL, "", args[1:]
    elif args[:1] == ["team"] and len(args) == 4:
        if not valid_team_name(args[1]):
            return TEAM_NAME_RULE
        level, scope, rest = Level.TEAM, args[1], args[2:]
    elif args[:1] == ["user"] and len(args) == 4:
        uid = parse_user_id(args[1])
        if uid is None:
            return USER_ID_RULE
        level, scope, rest = Level.USER, str(uid), args[2:]
    else:
        return LIMIT_USAGE
    windows = {"hour": Window.HOUR, "day": Window.DAY}
    if rest[0] not in windows:
        return "The window is 'hour' or 'day'.\n" + LIMIT_USAGE
    if rest[1] == "off":
        return LimitChange(level, scope, windows[rest[0]], None)
    amount = parse_usd(rest[1])
    if amount is None:
        return AMOUNT_RULE
    return LimitChange(level, scope, windows[rest[0]], amount)


async def on_limit(
    message: Message, bot: Bot, clock: Clock, command: CommandObject, ledger: Ledger
) -> None:
    """/limit <global|team NAME|user ID> <hour|day> <usd|off>."""
    words = (command.args or "").split()
    # the keywords in any case (GLOBAL, DAY, OFF); a team's name (the second word) as typed
    change = parse_limit([w if i == 1 else w.lower() for i, w in enumerate(words)])
    if isinstance(change, str):
        await reply(bot, message, change, clock)
        return
    by = message.from_user.id if message.from_user else None
    await ledger.set_limit(change.level, change.scope, change.window, change.amount_musd, by=by)
    what = f"{change.level.value}{' ' + change.scope if change.scope else ''} {change.window.value}"
    amount = usd(change.amount_musd) if change.amount_musd is not None else "off"
    text = f"Limit set: {what} = {amount}"
    if change.level is Level.TEAM and change.scope not in await ledger.teams():
        # a typo in the name would otherwise leave a limit nobody is under, silently
        text += f"\nTeam {change.scope} has no members yet: /team {change.scope} add USER_ID"
    await reply(bot, message, text, clock)


async def on_team(
    message: Message, bot: Bot, clock: Clock, command: CommandObject, ledger: Ledger
) -> None:
    """/team NAME add|remove USER_ID, or /team list."""
    args = (command.args or "").split()
    if args == ["list"]:
        teams = await ledger.teams()
        text = "\n".join(f"{n}: {', '.join(map(str, m))}" for n, m in sorted(teams.items()))
        await reply(bot, message, text or "No teams.", clock)
        return
    if len(args) != 3 or args[1] not in ("add", "remove"):
        await reply(bot, message, TEAM_USAGE, clock)
        return
    if not valid_team_name(args[0]):
        await reply(bot, message, TEAM_NAME_RULE, clock)
        return
    parsed_uid = parse_user_id(args[2])
    if parsed_uid is None:
        await reply(bot, message, USER_ID_RULE, clock)
        return
    name, action, uid = args[0], args[1], parsed_uid
    if action == "add":
        left = await ledger.team_add(name, uid)
        moved = f" (moved from {left})" if left and left != name else ""
        await reply(bot, message, f"User {uid} is in team {name}{moved}.", clock)
    else:
        removed = await ledger.team_remove(name, uid)
        text = f"User {uid} removed from {name}." if removed else f"User {uid} is not in {name}."
        await reply(bot, message, text, clock)
