"""/allow, /deny, /ban, /unban, /access and /invite: who may use the bot, at runtime
(``docs/access.md``). Behind the admin router's filter like every admin command."""

from __future__ import annotations

import re
from datetime import timedelta

from aiogram import Bot
from aiogram.filters import CommandObject
from aiogram.types import Message

from bot.access.invites import code_hash, invite_link, new_code, parse_invite_args
from bot.access.store import AccessBook
from bot.handlers.admin.base import reply
from budget.kernel.clock import Clock
from budget.kernel.shown import echoed
from budget.plans import Plans

__all__ = [
    "ALLOW_USAGE",
    "BAN_USAGE",
    "banned_note",
    "on_access",
    "on_allow",
    "on_ban",
    "on_deny",
    "on_invite",
    "on_unban",
    "parse_subject",
]

ALLOW_USAGE = (
    "Usage: /allow <user id | @username | group id>, /deny <user id | group id>"
    " (a group id is negative, as Telegram gives it)"
)
BAN_USAGE = "Usage: /ban <user id | group id> [reason], /unban <user id | group id>"
_USERNAME = re.compile(r"@([A-Za-z][A-Za-z0-9_]{3,31})")
_ID = re.compile(r"-?[1-9][0-9]{0,18}")


def parse_subject(text: str) -> int | None:
    """A Telegram user id (positive) or a group/channel id (negative), else ``None``."""
    if not _ID.fullmatch(text):
        return None
    value = int(text)
    return value if abs(value) <= 2**63 - 1 else None


def _by(message: Message) -> int | None:
    return message.from_user.id if message.from_user else None


async def on_allow(
    message: Message, bot: Bot, clock: Clock, command: CommandObject, access: AccessBook
) -> None:
    """/allow <user id | @username | group id>."""
    args = (command.args or "").split()
    if len(args) != 1:
        await reply(bot, message, ALLOW_USAGE, clock)
        return
    named = _USERNAME.fullmatch(args[0])
    if named is not None:
        await access.store.allow_username(named[1], by=_by(message))
        access.changed()
        text = (
            f"@{named[1]} will be let in when they first write (the first account seen with"
            " that username; the allow then holds for that account's id)."
        )
        await reply(bot, message, text, clock)
        return
    subject = parse_subject(args[0])
    if subject is None:
        await reply(bot, message, ALLOW_USAGE, clock)
        return
    new = await access.store.allow(subject, by=_by(message))
    access.changed()
    what = f"group {subject}" if subject < 0 else f"user {subject}"
    note = "" if access.allowlist else " (ACCESS_MODE is open: everyone not banned may write)"
    note += await banned_note(access, subject)
    await reply(bot, message, f"{what} is allowed{'' if new else ' already'}.{note}", clock)


async def banned_note(access: AccessBook, subject: int) -> str:
    """`` User 77 is banned: still refused until /unban 77.`` (a leading space) when
    ``subject`` (a user id, or a group's when negative) is banned, else ``""``."""
    if subject not in (await access.lists()).banned:
        return ""
    what = f"Group {subject}" if subject < 0 else f"User {subject}"
    return f" {what} is banned: still refused until /unban {subject}."


async def _one_id(
    message: Message, bot: Bot, clock: Clock, command: CommandObject, usage: str
) -> int | None:
    """The one id of ``/command <id>`` (nothing else after it); ``None``: ``usage`` was
    replied."""
    args = (command.args or "").split()
    subject = parse_subject(args[0]) if len(args) == 1 else None
    if subject is None:
        await reply(bot, message, usage, clock)
    return subject


async def on_deny(
    message: Message, bot: Bot, clock: Clock, command: CommandObject, access: AccessBook
) -> None:
    """/deny <user id | group id>: takes back a runtime allow (not the settings' lists)."""
    subject = await _one_id(message, bot, clock, command, ALLOW_USAGE)
    if subject is None:
        return
    taken = await access.store.deny(subject, by=_by(message))
    access.changed()
    lists = await access.lists()
    listed = subject in lists.users or subject in lists.chats
    text = f"{subject}: runtime allow taken back." if taken else f"{subject} had no runtime allow."
    if listed:
        text += " It is still in ALLOWED_USER_IDS/ALLOWED_CHAT_IDS (or an invite's entry)."
    await reply(bot, message, text, clock)


async def on_ban(
    message: Message,
    bot: Bot,
    clock: Clock,
    command: CommandObject,
    access: AccessBook,
    admin_ids: frozenset[int],
) -> None:
    """/ban <id> [reason]: ignored everywhere, open mode included, until /unban."""
    words = (command.args or "").split(maxsplit=1)
    subject = parse_subject(words[0]) if words else None
    if subject is None:
        await reply(bot, message, BAN_USAGE, clock)
        return
    if subject in admin_ids:
        await reply(bot, message, f"{subject} is in ADMIN_IDS: an admin cannot be banned.", clock)
        return
    reason = words[1].strip() if len(words) > 1 else ""
    await access.store.ban(subject, reason, by=_by(message))
    access.changed()
    await reply(bot, message, f"{subject} is banned: every message of theirs is ignored.", clock)


async def on_unban(
    message: Message, bot: Bot, clock: Clock, command: CommandObject, access: AccessBook
) -> None:
    """/unban <id>."""
    subject = await _one_id(message, bot, clock, command, BAN_USAGE)
    if subject is None:
        return
    lifted = await access.store.unban(subject, by=_by(message))
    access.changed()
    await reply(bot, message, f"{subject} {'is unbanned' if lifted else 'was not banned'}.", clock)


async def on_access(message: Message, bot: Bot, clock: Clock, access: AccessBook) -> None:
    """/access: the mode, the lists and their counts."""
    counts = await access.store.counts()
    lists = await access.lists()
    mode = "allowlist" if access.allowlist else "open"
    lines = [f"🔐 ACCESS_MODE={mode}"]
    banned = {user for user, _ in counts.banned}
    # a ban wins over every allow: a runtime allow of a banned user lets nobody in
    refused = sum(user in banned for user in counts.allowed_users)
    note = f", {refused} of them banned: still refused" if refused else ""
    lines.append(
        f"Allowed users: {len(lists.users)} ({len(counts.allowed_users)} at runtime{note}); "
        f"allowed groups: {len(lists.chats)} ({len(counts.allowed_chats)} at runtime)"
    )
    if counts.allowed_users:
        lines.append(
            "• users: "
            + ", ".join(
                f"{user} (banned: still refused)" if user in banned else str(user)
                for user in counts.allowed_users[:50]
            )
        )
    if counts.allowed_chats:
        lines.append("• groups: " + ", ".join(map(str, counts.allowed_chats[:50])))
    if counts.pending:
        lines.append("Pending @usernames: " + ", ".join("@" + u for u in counts.pending[:50]))
    lines.append(f"Banned: {len(counts.banned)}")
    lines.extend(f"• {i}{': ' + echoed(r, 200) if r else ''}" for i, r in counts.banned[:50])
    lines.append(f"Invites still usable: {counts.open_invites}")
    await reply(bot, message, "\n".join(lines), clock)


async def on_invite(
    message: Message,
    bot: Bot,
    clock: Clock,
    command: CommandObject,
    access: AccessBook,
    plans: Plans,
    invite_ttl_hours: int,
) -> None:
    """/invite [uses] [plan] [ttl]: a deep link that lets its users in (on that plan)."""
    terms = parse_invite_args(
        (command.args or "").split(), frozenset(plans.by_name), invite_ttl_hours
    )
    if isinstance(terms, str):
        await reply(bot, message, terms, clock)
        return
    code = new_code()
    expires = clock.now() + timedelta(hours=terms.ttl_hours)
    await access.store.create_invite(
        code_hash(code), terms.plan, terms.uses, expires, by=_by(message)
    )
    me = await bot.me()
    plan = plans.get(terms.plan).name
    uses = "once" if terms.uses == 1 else f"{terms.uses} times"
    text = (
        f"{invite_link(me.username or '', code)}\n"
        f"Works {uses}, until {expires:%Y-%m-%d %H:%M} UTC; plan {plan}. Only its hash is"
        " kept: this message is the one copy of the link."
    )
    await reply(bot, message, text, clock)
