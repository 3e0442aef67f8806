"""Names that are no setting but close to one: a typo the settings would ignore without a
word (``BUDGET_GLOBAL_DAILY`` meant ``BUDGET_GLOBAL_DAILY_USD``: no limit at all).
``python -m bot`` logs each at start (:mod:`bot.__main__`), and refuses to start (exit 2)
when the setting a name is close to limits money (:func:`limits_money`): a misspelt limit
would leave the bot running without it.

``.env`` is read with python-dotenv's own parser (:func:`dotenv.dotenv_values`), the one
pydantic-settings reads it with, so the check sees the names the settings saw: quoted
and multi-line values, ``export`` prefixes and comments are taken as the settings take
them.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from pathlib import Path

from dotenv import dotenv_values

from bot.settings.env import Settings

__all__ = ["limits_money", "misspelt_settings", "unknown_money_names"]


def limits_money(setting: str) -> bool:
    """True for a setting that limits spend (``BUDGET_*``, ``OPERATION_*``, an amount in
    USD): a typo in its name must not start a bot without that limit."""
    upper = setting.upper()
    return upper.startswith(("BUDGET_", "OPERATION_")) or upper.endswith("_USD")


def _env_file_names(env_file: Path) -> set[str]:
    """The names ``env_file`` assigns (``NAME=value``; a bare ``NAME`` line assigns
    nothing); none when it cannot be read."""
    try:
        values = dotenv_values(env_file, encoding="utf-8", interpolate=False)
    except (OSError, UnicodeDecodeError):
        return set()
    return {name for name, value in values.items() if value is not None}


def misspelt_settings(
    environ: Mapping[str, str], env_file: Path | None = Path(".env")
) -> list[tuple[str, str]]:
    """Names in ``environ`` or ``env_file`` that are no setting but close to one.

    Returns ``(name, the setting it is close to)`` pairs, sorted; unrelated variables
    (``PATH``, ``HOSTNAME``) are not close to any. An unreadable ``env_file`` counts as
    empty."""
    fields = [name.upper() for name in Settings.model_fields]
    names = set(environ)
    if env_file is not None:
        names |= _env_file_names(env_file)
    found = []
    for name in names:
        upper = name.upper()
        if upper in fields:
            continue
        close = difflib.get_close_matches(upper, fields, n=1, cutoff=0.8)
        if close:
            found.append((name, close[0]))
    return sorted(found)


def unknown_money_names(
    environ: Mapping[str, str], env_file: Path | None = Path(".env")
) -> list[str]:
    """Names in ``environ`` or ``env_file`` shaped like a money limit (:func:`limits_money`:
    ``BUDGET_*``, ``OPERATION_*``, ``*_USD``) that are no setting and close to none
    (``USER_DAILY_LIMIT_USD`` for ``BUDGET_USER_DAILY_USD``): the operator meant a limit
    the settings would not see. Returns them sorted; the close ones are
    :func:`misspelt_settings`'s."""
    fields = [name.upper() for name in Settings.model_fields]
    names = set(environ)
    if env_file is not None:
        names |= _env_file_names(env_file)
    return sorted(
        name
        for name in names
        if limits_money(name)
        and name.upper() not in fields
        and not difflib.get_close_matches(name.upper(), fields, n=1, cutoff=0.8)
    )
