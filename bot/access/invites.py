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

from budget.kernel.shown import echoed

__all__ = [
    "CODE_LENGTH",
    "InviteTerms",
    "code_hash",
    "invite_link",
    "looks_like_code",
    "new_code",
    "parse_invite_args",
    "parse_ttl",
    "ttl_problem",
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


_SIGNED_TTL = re.compile(r"[-+]?[0-9]+[hdw]")
_SIGNED_COUNT = re.compile(r"-[0-9]+")
_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,63}")


def ttl_problem(text: str) -> str | None:
    """Why ``text``, shaped like a duration (``-5h``, ``0d``, ``9999w``), is none
    :func:`parse_ttl` takes; ``None``: it is not shaped like one (or it is fine)."""
    if not text.isascii() or not _SIGNED_TTL.fullmatch(text) or parse_ttl(text) is not None:
        return None
    if text.startswith("-") or int(text.lstrip("+-")[:-1]) == 0:
        return f"'{text}': a duration is positive, like 12h, 7d or 2w."
    return f"'{text}' is longer than a year, the most a duration may be."


def _invite_problem(arg: str, plans: frozenset[str], seen: set[str]) -> str:
    """Why one ``/invite`` argument was refused (a sentence naming it); ``seen``: the
    kinds of argument (``uses``, ``plan``, ``ttl``) already read."""
    known = ", ".join(sorted(plans))
    shown = echoed(arg, 40)
    counted = arg.isascii() and arg.isdigit()
    again = (
        (counted and "uses" in seen)
        or (arg in plans and "plan" in seen)
        or (parse_ttl(arg) is not None and "ttl" in seen)
    )
    if again:
        return f"'{shown}': /invite takes one count of uses, one plan and one duration."
    if counted or (arg.isascii() and _SIGNED_COUNT.fullmatch(arg)):
        return f"An invite has at least 1 and at most {MAX_USES} uses, not {shown}."
    problem = ttl_problem(arg)
    if problem is not None:
        return problem
    if _NAME.fullmatch(arg):
        return f"No plan '{shown}'; the plans are {known}."
    return (
        f"Usage: /invite [uses] [plan] [ttl], e.g. /invite 5 pro 7d"
        f" (plans: {known}; ttl like 12h, 7d or 2w, at most a year)."
    )


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
            if not 1 <= uses <= MAX_USES:
                return _invite_problem(arg, plans, seen)
            seen.add("uses")
        elif arg in plans and "plan" not in seen:
            plan = arg
            seen.add("plan")
        elif hours is not None and "ttl" not in seen:
            ttl = hours
            seen.add("ttl")
        else:
            return _invite_problem(arg, plans, seen)
    return InviteTerms(uses, plan, ttl)
