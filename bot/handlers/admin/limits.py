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
from bot.ops.limit_overrides import SETTING_OF
from budget.kernel.clock import Clock
from budget.kernel.shown import echoed
from budget.ledger import Ledger
from budget.plans import Plans
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

LIMIT_USAGE = (
    "Usage: /limit <global|team NAME|user ID|chat ID|plan NAME> <hour|day|month> <usd|off|default>"
)
TEAM_USAGE = (
    "Usage: /team <NAME> add|remove <user id>, /team <NAME> guarantee <hour|day|month>"
    " <usd|off>, or /team list"
)
CHAT_ID_RULE = "The chat id is a group's or supergroup's id, negative (e.g. -1001234567890)."
_WINDOWS = {"hour": Window.HOUR, "day": Window.DAY, "month": Window.MONTH}
AMOUNT_RULE = "The amount is USD with at most 6 decimals, from 0 to 1000000, e.g. 0.50 (or 'off')."


@dataclass(frozen=True, slots=True)
class LimitChange:
    """What ``/limit`` sets.

    Attributes:
        level: global, team, user, chat (a group) or plan.
        scope: the team name, user id, chat id or plan name (``""`` for global).
        window: hour, day or month.
        amount_musd: the new limit in µUSD, ``None``: no limit (``off``).
        default: ``default``: the runtime limit is dropped, the configured one applies
            again (``amount_musd`` is then ``None``).
    """

    level: Level
    scope: str
    window: Window
    amount_musd: int | None
    default: bool = False


def parse_limit(args: list[str], plans: frozenset[str] = frozenset()) -> LimitChange | str:
    """``global hour 0.5`` / ``team NAME day off`` / ``user 42 day 1.00`` /
    ``chat -100123 month 5`` / ``plan pro day 2``; a string is the reason the arguments
    were refused (``plans``: the plans' names)."""
    scoped = _scope(args)
    if isinstance(scoped, str):
        return scoped
    if scoped[0] is Level.PLAN and scoped[1] not in plans:
        return f"No plan '{echoed(scoped[1])}'; the plans are {', '.join(sorted(plans))}."
    level, scope, rest = scoped
    if rest[0] not in _WINDOWS:
        return "The window is 'hour', 'day' or 'month'.\n" + LIMIT_USAGE
    if rest[1] == "off":
        return LimitChange(level, scope, _WINDOWS[rest[0]], None)
    if rest[1] == "default":
        return LimitChange(level, scope, _WINDOWS[rest[0]], None, default=True)
    amount = parse_usd(rest[1])
    if amount is None:
        return AMOUNT_RULE
    return LimitChange(level, scope, _WINDOWS[rest[0]], amount)


def _scope(args: list[str]) -> tuple[Level, str, list[str]] | str:
    """The level and scope ``/limit``'s first words name, and the rest."""
    if args[:1] == ["global"] and len(args) == 3:
        return Level.GLOBAL, "", args[1:]
    if len(args) != 4:
        return LIMIT_USAGE
    kind, name, rest = args[0], args[1], args[2:]
    if kind == "team":
        return (Level.TEAM, name, rest) if valid_team_name(name) else TEAM_NAME_RULE
    if kind == "user":
        uid = parse_user_id(name)
        return (Level.USER, str(uid), rest) if uid is not None else USER_ID_RULE
    if kind == "chat":
        chat = int(name) if name.startswith("-") and name[1:].isdigit() else None
        if chat is None or chat < -(2**63) or name[1:2] == "0":
            return CHAT_ID_RULE
        return Level.CHAT, str(chat), rest
    if kind == "plan":
        return Level.PLAN, name, rest
    return LIMIT_USAGE


async def on_limit(
    message: Message,
    bot: Bot,
    clock: Clock,
    command: CommandObject,
    ledger: Ledger,
    plans: Plans,
) -> None:
    """/limit <global|team NAME|user ID|chat ID|plan NAME> <hour|day|month>
    <usd|off|default>."""
    words = (command.args or "").split()
    # the keywords in any case (GLOBAL, DAY, OFF); a team's or plan's name as typed
    named = bool(words) and words[0].lower() in ("team", "plan")
    change = parse_limit(
        [w if i == 1 and named else w.lower() for i, w in enumerate(words)],
        frozenset(plans.by_name),
    )
    if isinstance(change, str):
        await reply(bot, message, change, clock)
        return
    if change.level is Level.TEAM and change.amount_musd is not None:
        teams = await ledger.teams()
        if change.scope not in teams:
            # a typo in the name would store a limit nobody is under, that nothing shows
            await reply(bot, message, _no_team(change.scope, sorted(teams)), clock)
            return
    by = message.from_user.id if message.from_user else None
    what = f"{change.level.value}{' ' + change.scope if change.scope else ''} {change.window.value}"
    if change.default:
        await ledger.clear_limit(change.level, change.scope, change.window, by=by)
        lines = [_back_to_default(ledger, change, what)]
    else:
        await ledger.set_limit(change.level, change.scope, change.window, change.amount_musd, by=by)
        amount = usd(change.amount_musd) if change.amount_musd is not None else "off"
        lines = [f"Limit set: {what} = {amount}"]
    lines += ["⚠️ " + w for w in await ledger.limit_warnings()]
    await reply(bot, message, "\n".join(lines), clock)


def _back_to_default(ledger: Ledger, change: LimitChange, what: str) -> str:
    """The reply to ``/limit … default``: the runtime limit dropped, and for a global
    window the setting that applies again."""
    setting = SETTING_OF.get(change.window) if change.level is Level.GLOBAL else None
    if setting is None:
        return f"Runtime limit removed: {what} follows the configured default again."
    configured = ledger.config.default_limit(Level.GLOBAL, "", change.window)
    shown = "not set: no limit" if configured is None else usd(configured)
    return f"Runtime limit removed: {what} follows {setting} again ({shown})."


def _no_team(name: str, teams: list[str]) -> str:
    """The refusal of a limit for team ``name``, which has no members (valid name)."""
    known = f"the teams are {', '.join(teams)}" if teams else "there are no teams yet"
    return (
        f"No team named {name} ({known}); nothing was stored. A team is made by adding"
        f" its first member: /team {name} add USER_ID, then set its limit."
    )


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
    if len(args) == 4 and args[1] == "guarantee":
        await _guarantee(message, bot, clock, ledger, args)
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
        lines = [f"User {uid} is in team {name}{moved}."]
        lines += ["⚠️ " + w for w in await ledger.limit_warnings()]
        await reply(bot, message, "\n".join(lines), clock)
    else:
        removed = await ledger.team_remove(name, uid)
        text = f"User {uid} removed from {name}." if removed else f"User {uid} is not in {name}."
        if removed:
            text += await _left_limits(ledger, name)
        await reply(bot, message, text, clock)


async def _guarantee(
    message: Message, bot: Bot, clock: Clock, ledger: Ledger, args: list[str]
) -> None:
    """/team NAME guarantee <hour|day|month> <usd|off>: keep a share of the global window
    for the team while it has not used it (docs/money.md, "Who pays")."""
    name, window, amount_text = args[0], _WINDOWS.get(args[2]), args[3]
    if not valid_team_name(name):
        await reply(bot, message, TEAM_NAME_RULE, clock)
        return
    amount = None if amount_text == "off" else parse_usd(amount_text)
    if window is None or (amount is None and amount_text != "off"):
        await reply(bot, message, TEAM_USAGE, clock)
        return
    by = message.from_user.id if message.from_user else None
    await ledger.set_guarantee(name, window, amount, by=by)
    if amount is None:
        lines = [f"Team {name}: no guaranteed share of the global {window.value} any more."]
    else:
        # never more than the team may spend: decision 285
        own = next(
            (b.limit_musd for b in (await ledger.team_status(name)).buckets if b.window is window),
            None,
        )
        kept = amount if own is None else min(amount, own)
        lines = [
            f"Team {name}: {usd(kept)} of the global {window.value} limit is kept for it"
            " while it has not used it."
        ]
    lines += ["⚠️ " + w for w in await ledger.limit_warnings()]
    await reply(bot, message, "\n".join(lines), clock)


async def _left_limits(ledger: Ledger, name: str) -> str:
    """After a removal: when the team has no members left but limits stored, what stays
    (docs/decisions/297-a-team-keeps-its-limits-without-members.md); else nothing."""
    status = await ledger.team_status(name)
    if status.members:
        return ""
    kept = [
        f"{b.window.value} {usd(b.limit_musd)}" for b in status.buckets if b.limit_musd is not None
    ]
    if not kept:
        return ""
    return (
        f"\n{name} has no members now; its limits stay ({', '.join(kept)}) and bind anyone "
        f"added to it again. /limit team {name} <window> off removes one."
    )
