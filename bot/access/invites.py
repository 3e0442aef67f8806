"""Invite codes: ``/invite [uses] [plan] [ttl]`` makes one, ``t.me/<bot>?start=<code>``
carries it, ``/start <code>`` redeems it.

A code is 22 characters of :func:`secrets.token_urlsafe` (128 random bits, the URL-safe
alphabet Telegram's ``start`` parameter takes: ``A-Z a-z 0-9 _ -``, at most 64). Only
its SHA-256 is stored: with 128 random bits a plain hash is as good as a slow one (there
is no dictionary to try), and a copy of the database lets nobody in. A wrong code costs
nothing but a lookup and is rate-limited per user (``INVITE_TRIES_PER_HOUR``).
"""

from __future__ import annotations

import hashlib
import re
import secrets
from dataclasses import dataclass

__all__ = [
    "CODE_LENGTH",
    "InviteTerms",
    "code_hash",
    "invite_link",
    "looks_like_code",
    "new_code",
    "parse_invite_args",
    "parse_ttl",
]

#: Characters of a code made here.
CODE_LENGTH = 22
_CODE = re.compile(r"[A-Za-z0-9_-]{16,64}")
_TTL = re.compile(r"([1-9][0-9]{0,4})([hdw])")
_HOURS = {"h": 1, "d": 24, "w": 24 * 7}
#: The longest an invite may last (hours): a year.
MAX_TTL_HOURS = 8_760
#: The most uses one invite may have.
MAX_USES = 10_000


def new_code() -> str:
    """A fresh invite code (22 URL-safe characters, 128 random bits)."""
    return secrets.token_urlsafe(16)


def code_hash(code: str) -> str:
    """The stored form of ``code``: its SHA-256, hex."""
    return hashlib.sha256(code.encode("ascii", "replace")).hexdigest()


def looks_like_code(text: str) -> bool:
    """True when ``text`` could be an invite code (a ``start`` parameter's alphabet,
    16-64 characters); a shorter one (``/start help``) is no code."""
    return _CODE.fullmatch(text) is not None


def invite_link(bot_username: str, code: str) -> str:
    """``https://t.me/<bot>?start=<code>``, the deep link Telegram opens the bot with."""
    return f"https://t.me/{bot_username}?start={code}"


def parse_ttl(text: str) -> int | None:
    """``12h`` / ``7d`` / ``2w`` → hours (``None``: not a duration, or over a year)."""
    match = _TTL.fullmatch(text)
    if match is None:
        return None
    hours = int(match[1]) * _HOURS[match[2]]
    return hours if hours <= MAX_TTL_HOURS else None


@dataclass(frozen=True, slots=True)
class InviteTerms:
    """What ``/invite`` asked for: uses, plan (``None``: the default) and hours."""

    uses: int
    plan: str | None
    ttl_hours: int


def parse_invite_args(
    args: list[str], plans: frozenset[str], default_ttl_hours: int
) -> InviteTerms | str:
    """``/invite [uses] [plan] [ttl]`` in any order (a number, a plan's name, a duration);
    a string is why the arguments were refused."""
    uses, plan, ttl = 1, None, default_ttl_hours
    seen: set[str] = set()
    for arg in args:
        hours = parse_ttl(arg)
        if arg.isascii() and arg.isdigit() and "uses" not in seen:
            uses = int(arg)
            seen.add("uses")
            if not 1 <= uses <= MAX_USES:
                return f"An invite has 1 to {MAX_USES} uses."
        elif arg in plans and "plan" not in seen:
            plan = arg
            seen.add("plan")
        elif hours is not None and "ttl" not in seen:
            ttl = hours
            seen.add("ttl")
        else:
            known = ", ".join(sorted(plans))
            return (
                f"Usage: /invite [uses] [plan] [ttl], e.g. /invite 5 pro 7d"
                f" (plans: {known}; ttl like 12h, 7d or 2w, at most a year)."
            )
    return InviteTerms(uses, plan, ttl)
