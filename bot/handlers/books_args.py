"""The books commands' arguments (:mod:`bot.handlers.books`): their usage lines, and how
a period is told from an IANA zone (a word that begins with a digit or holds a range's
``..`` is a period, as no zone name does; one that is no day or month is refused in one
line, never read as a zone).
"""

from __future__ import annotations

import re
from functools import cache
from zoneinfo import available_timezones

from budget.kernel.shown import echoed

__all__ = [
    "EXPORT_USAGE",
    "NO_REPORT_HERE",
    "PERIOD",
    "RECONCILE_USAGE",
    "looks_like_period",
    "period_refusal",
    "split_export_args",
    "zone_refusal",
]

EXPORT_USAGE = "Usage: /budget export [YYYY-MM-DD | YYYY-MM] [IANA zone]"
RECONCILE_USAGE = (
    "Send the provider's usage export (CSV, JSON or ZIP, at most 20 MiB) as a document with "
    "the caption /reconcile [PROVIDER] [YYYY-MM-DD | YYYY-MM] [apikey=NAME]; after the "
    "report, /reconcile apply corrects the estimated bookings."
)
#: A bare ``/reconcile apply`` on a process without the admin's report: reports live in
#: the memory of the process that made them (gone after a restart, absent on the other
#: webhook replicas), a reply to the export carries the export itself.
NO_REPORT_HERE = (
    "No reconcile report to apply in this process (a report is kept only by the process "
    "that made it: a restart or another replica has none). To apply an export anyway, "
    "reply /reconcile apply to the export: it is compared again and applied. "
)
PERIOD = re.compile(r"[0-9]{4}-[0-9]{2}(-[0-9]{2})?")


def period_refusal(arg: str, usage: str) -> str:
    """The one line refusing ``arg``, which looks like a period (it begins with a digit or
    holds a range's ``..``; no IANA zone name does) but is none the export takes."""
    return (
        f"Period '{echoed(arg, 32)}' cannot be read: write YYYY-MM-DD (a day) or YYYY-MM "
        f"(a month); one period covers at most one month, no ranges. {usage}"
    )


def looks_like_period(arg: str) -> bool:
    """A word the export and /reconcile read as a period, never as a zone."""
    return arg[:1].isdigit() or ".." in arg


def split_export_args(args: list[str], default_tz: str) -> tuple[str | None, str] | str:
    """``(period or None, zone)`` of ``/budget export``'s arguments, or the reply refusing
    them: a period-looking word that is no day or month is never read as a zone."""
    period: str | None = None
    tz: str | None = None
    for arg in args:
        if PERIOD.fullmatch(arg) and period is None:
            period = arg
        elif looks_like_period(arg) and not PERIOD.fullmatch(arg):
            return period_refusal(arg, EXPORT_USAGE)
        elif tz is None and not PERIOD.fullmatch(arg):
            tz = arg
        else:
            return EXPORT_USAGE
    return period, tz or default_tz


@cache
def _zones() -> frozenset[str]:
    return frozenset(available_timezones())


def zone_refusal(word: str) -> str | None:
    """The usage reply to a word that is neither a period nor shaped like a zone (no
    ``/`` and no zone of that name, as ``garbage``); ``None``: it may be a zone (an
    unknown ``Area/City`` is then refused by the period's parser, naming the zone)."""
    if "/" in word or word in _zones():
        return None
    return (
        f"'{echoed(word, 32)}' is neither a period (YYYY-MM-DD or YYYY-MM) nor an IANA"
        f" zone such as Europe/Berlin. {EXPORT_USAGE}"
    )
