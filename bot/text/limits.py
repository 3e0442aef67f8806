"""Which limit stopped a request, as whole sentences: one per limit (level and window)
and per state, so a translator translates a sentence, never a limit's name to be spliced
into another sentence (German and the Slavic languages decline it, and an adjective such
as "daily" agrees with the noun). docs/decisions/250-plural-forms-and-whole-limit-sentences.md

:func:`limit_reached` says a limit has nothing left; :func:`limit_short` that what is
left of it does not fit. The refusal texts (:mod:`bot.text.templates`,
:mod:`bot.text.conversation`) follow either with sentences of their own (what it was for,
when it resets, what to do).
"""

from __future__ import annotations

from aiogram.utils.i18n import gettext as _

from bot.text.i18n import N_
from budget.types import Level, Window

__all__ = ["limit_kept", "limit_reached", "limit_short"]

_H, _D, _M = Window.HOUR, Window.DAY, Window.MONTH

#: "Nothing is left of it", for each limit (``{plan}``/``{team}``: its scope's name).
_REACHED: dict[tuple[Level, Window | None], str] = {
    (Level.USER, _H): N_("Your hourly user limit is reached."),
    (Level.USER, _D): N_("Your daily user limit is reached."),
    (Level.USER, _M): N_("Your monthly user limit is reached."),
    (Level.CHAT, _H): N_("This group's hourly limit is reached."),
    (Level.CHAT, _D): N_("This group's daily limit is reached."),
    (Level.CHAT, _M): N_("This group's monthly limit is reached."),
    (Level.PLAN, _H): N_("The hourly limit of your plan ({plan}) is reached."),
    (Level.PLAN, _D): N_("The daily limit of your plan ({plan}) is reached."),
    (Level.PLAN, _M): N_("The monthly limit of your plan ({plan}) is reached."),
    (Level.TEAM, _H): N_("Your team's hourly limit ({team}) is reached."),
    (Level.TEAM, _D): N_("Your team's daily limit ({team}) is reached."),
    (Level.TEAM, _M): N_("Your team's monthly limit ({team}) is reached."),
    (Level.PROVIDER, _H): N_("The paid provider's hourly cap is reached."),
    (Level.PROVIDER, _D): N_("The paid provider's daily cap is reached."),
    (Level.PROVIDER, _M): N_("The paid provider's monthly cap is reached."),
    (Level.GLOBAL, _H): N_("The bot's global hourly limit is reached."),
    (Level.GLOBAL, _D): N_("The bot's global daily limit is reached."),
    (Level.GLOBAL, _M): N_("The bot's global monthly limit is reached."),
    (Level.WALLET, Window.BALANCE): N_("Nothing is left in your wallet."),
    (Level.WALLET, None): N_("Nothing is left in your wallet."),
}

#: "What is left of it does not fit", for each limit.
_SHORT: dict[tuple[Level, Window | None], str] = {
    (Level.USER, _H): N_("Not enough is left of your hourly user limit."),
    (Level.USER, _D): N_("Not enough is left of your daily user limit."),
    (Level.USER, _M): N_("Not enough is left of your monthly user limit."),
    (Level.CHAT, _H): N_("Not enough is left of this group's hourly limit."),
    (Level.CHAT, _D): N_("Not enough is left of this group's daily limit."),
    (Level.CHAT, _M): N_("Not enough is left of this group's monthly limit."),
    (Level.PLAN, _H): N_("Not enough is left of the hourly limit of your plan ({plan})."),
    (Level.PLAN, _D): N_("Not enough is left of the daily limit of your plan ({plan})."),
    (Level.PLAN, _M): N_("Not enough is left of the monthly limit of your plan ({plan})."),
    (Level.TEAM, _H): N_("Not enough is left of your team's hourly limit ({team})."),
    (Level.TEAM, _D): N_("Not enough is left of your team's daily limit ({team})."),
    (Level.TEAM, _M): N_("Not enough is left of your team's monthly limit ({team})."),
    (Level.PROVIDER, _H): N_("Not enough is left of the paid provider's hourly cap."),
    (Level.PROVIDER, _D): N_("Not enough is left of the paid provider's daily cap."),
    (Level.PROVIDER, _M): N_("Not enough is left of the paid provider's monthly cap."),
    (Level.GLOBAL, _H): N_("Not enough is left of the bot's global hourly limit."),
    (Level.GLOBAL, _D): N_("Not enough is left of the bot's global daily limit."),
    (Level.GLOBAL, _M): N_("Not enough is left of the bot's global monthly limit."),
    (Level.WALLET, Window.BALANCE): N_("Not enough is left in your wallet."),
    (Level.WALLET, None): N_("Not enough is left in your wallet."),
}


#: A global limit the hold would fit, but for what other teams' guarantees keep of it
#: (``docs/decisions/285-a-guarantee-keeps-no-more-than-the-team-may-spend.md``).
_KEPT: dict[Window | None, str] = {
    _H: N_(
        "Not enough of the bot's global hourly limit is free: the rest is kept for"
        " a team's guaranteed share."
    ),
    _D: N_(
        "Not enough of the bot's global daily limit is free: the rest is kept for"
        " a team's guaranteed share."
    ),
    _M: N_(
        "Not enough of the bot's global monthly limit is free: the rest is kept for"
        " a team's guaranteed share."
    ),
}


def limit_kept(window: Window | None) -> str:
    """ "Not enough of the bot's global daily limit is free: the rest is kept for a
    team's guaranteed share." (a window the table does not name: the short sentence of
    a budget limit, still true)."""
    found = _KEPT.get(window)
    return _("Not enough is left of a budget limit.") if found is None else _(found)


def limit_reached(level: Level | None, window: Window | None, scope: str) -> str:
    """ "Your daily user limit is reached." (a limit the table does not name: "A budget
    limit is reached.", still true)."""
    found = _REACHED.get((level, window)) if level is not None else None
    if found is None:
        return _("A budget limit is reached.")
    return _(found).format(plan=scope, team=scope)


def limit_short(level: Level | None, window: Window | None, scope: str) -> str:
    """ "Not enough is left of your daily user limit." (unnamed: "… of a budget limit.")."""
    found = _SHORT.get((level, window)) if level is not None else None
    if found is None:
        return _("Not enough is left of a budget limit.")
    return _(found).format(plan=scope, team=scope)
