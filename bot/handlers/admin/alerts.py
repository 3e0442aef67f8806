"""/alerts: the alert types, each told or muted, and ``/alerts mute TYPE`` /
``/alerts unmute TYPE`` (:mod:`bot.ops.mutes`; docs/decisions/181-alerts-can-be-muted.md).
The first filter is the admin router's (ADMIN_IDS). A change is for every replica and
survives restarts; it is logged with the admin's id, like /kill."""

from __future__ import annotations

import logging

from aiogram import Bot
from aiogram.filters import CommandObject
from aiogram.types import Message
from sqlalchemy.exc import SQLAlchemyError

from bot.handlers.admin.base import reply
from bot.ops.mutes import ALERT_TYPES, AlertMutes
from budget.kernel.clock import Clock

__all__ = ["USAGE", "on_alerts"]

log = logging.getLogger(__name__)

USAGE = "Usage: /alerts [mute TYPE | unmute TYPE]; types: " + ", ".join(ALERT_TYPES) + "."

#: What each type tells, as /alerts lists it.
WHAT = {
    "limits": "ALERT_AT fractions of the global, team and provider-account limits",
    "loop": "calls of digests and retries while no message arrives",
    "quota": "a free key's daily requests running out, and where chat goes next",
    "cost": "a model's cost per answered message against its 7 days before",
    "forecast": "the day's and the month's spend forecast at the current rate",
}


async def on_alerts(
    message: Message, bot: Bot, clock: Clock, command: CommandObject, alert_mutes: AlertMutes
) -> None:
    """/alerts [mute TYPE | unmute TYPE]."""
    assert message.from_user is not None  # the admin filter passed
    # "/alerts Mute Loop" means what "/alerts mute loop" means
    args = (command.args or "").lower().split()
    try:
        if not args:
            text = await _list(alert_mutes)
        elif len(args) == 2 and args[0] in ("mute", "unmute") and args[1] in ALERT_TYPES:
            text = await _change(alert_mutes, args[1], args[0] == "mute", message.from_user.id)
        else:
            text = USAGE
    except SQLAlchemyError as exc:
        log.warning("/alerts: the database failed (%s)", type(exc).__name__)
        text = "⚠️ The alert settings could not be read or written; nothing changed. Try again."
    await reply(bot, message, text, clock)


async def _list(mutes: AlertMutes) -> str:
    muted = await mutes.refresh()
    lines = ["🔔 Alert types (/alerts mute TYPE, /alerts unmute TYPE):"]
    for kind in ALERT_TYPES:
        off = mutes.off_by_setting.get(kind)
        state = "muted" if kind in muted else (f"off ({off})" if off else "on")
        lines.append(f"• {kind}: {state} — {WHAT[kind]}")
    return "\n".join(lines)


async def _change(mutes: AlertMutes, kind: str, mute: bool, by: int) -> str:
    changed = await mutes.set_muted(kind, mute, by)
    word = "muted" if mute else "unmuted"
    if not changed:
        return f"{kind} alerts were already {word}."
    log.warning("alerts: admin %s %s %s", by, word, kind)
    if mute:
        return f"🔕 {kind} alerts muted for every replica until /alerts unmute {kind}."
    off = mutes.off_by_setting.get(kind)
    tail = f" ({off}: nothing is sent until that is set)" if off else ""
    return f"🔔 {kind} alerts unmuted{tail}."
