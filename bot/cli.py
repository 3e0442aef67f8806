"""What the command line's entry points share: how the program was started (for usage
lines) and the one line a settings error is told in.

:mod:`bot.__main__` and the subcommands it runs (:mod:`bot.ops.configio`,
:mod:`bot.ops.health`) import these from here, so no subcommand imports the front
(which imports them): the entry points stay a tree, not a circle.
"""

from __future__ import annotations

import sys

from pydantic import ValidationError

__all__ = ["config_error", "prog"]


def config_error(exc: ValidationError, who: str = "kopek") -> str:
    """The one line for a settings error: ``<who>: configuration error in NAME: why``
    (never the value: it may be a secret)."""
    first = exc.errors()[0]
    loc = ".".join(str(p) for p in first.get("loc", ())).upper()
    msg = str(first.get("msg", "invalid value")).removeprefix("Value error, ")
    if first.get("type") == "missing" and loc == "BOT_TOKEN":  # absent, or BOT_TOKEN=
        return (
            f"{who}: BOT_TOKEN is not set. Get a token from @BotFather in Telegram (/newbot) "
            "and put BOT_TOKEN=... in .env"
        )
    if loc:
        return f"{who}: configuration error in {loc}: {msg}"
    return f"{who}: configuration error: {msg}"


def prog() -> str:
    """How this program was started, for usage lines: ``kopek`` (the console script) or
    ``python -m bot`` (the same program)."""
    return "kopek" if sys.argv[0].endswith("kopek") else "python -m bot"
