"""Who is due for a digest at a given instant (pure functions, no I/O).

A user's digest for local date *D* is due at :func:`due_instant` — their ``HH:MM`` on
*D* in their own IANA zone, as a UTC instant:

* normal day: the wall time, converted (09:00 Europe/Berlin in winter → 08:00 UTC);
* spring-forward gap (the wall time does not exist, e.g. 02:30 Europe/Berlin on
  2026-03-29): the first valid minute after it — 03:00 CEST = 01:00 UTC;
* fall-back fold (the wall time happens twice, e.g. 02:30 on 2026-10-25): the first
  occurrence (``fold=0``, 02:30 CEST = 00:30 UTC). The run table's unique
  (user, local date) key makes the second occurrence a no-op.

Worked timeline (Europe/Berlin, digest 02:30, spring-forward day 2026-03-29)::

    00:59 UTC  local 01:59 CET   not due
    01:00 UTC  local 03:00 CEST  due (first valid minute after 02:30) → one digest
    01:01 UTC  …                 the run for 2026-03-29 exists → nothing more

A digest is *late* when it goes out more than ``late_after_s`` after its due instant
(the bot was down at that time, or the ledger deferred it). Only the user's current
local date is considered: a date missed entirely (down for a whole day) is not sent
on its own; the next digest covers its posts, because cursors are per subscription.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, time
from zoneinfo import ZoneInfo

from budget.policy.windows import local_instant

__all__ = ["Due", "due_instant", "is_late", "local_date", "todays_due"]


@dataclass(frozen=True, slots=True)
class Due:
    """A local date's digest and when it is due.

    Attributes:
        day: the local date in the user's zone.
        at: the aware UTC instant it is due (:func:`due_instant`).
    """

    day: date
    at: datetime


def due_instant(day: date, at: time, tz: ZoneInfo) -> datetime:
    """The UTC instant of local ``at`` on ``day`` in ``tz`` (gap → next valid minute; fold → first).

    Args:
        day: the local date.
        at: local wall time (seconds are ignored).
        tz: the user's zone.

    Returns:
        An aware UTC datetime (see :func:`budget.policy.windows.local_instant`).
    """
    return local_instant(day, at, tz)


def local_date(now: datetime, tz: ZoneInfo) -> date:
    """The local date in ``tz`` at the aware instant ``now``."""
    return now.astimezone(tz).date()


def todays_due(now: datetime, at: time, tz: ZoneInfo) -> Due | None:
    """Today's (local) digest if it is due at ``now``.

    Args:
        now: aware current instant.
        at: the user's local digest time.
        tz: the user's zone.

    Returns:
        Today's digest when its due instant has passed, else ``None``.
    """
    day = local_date(now, tz)
    due = due_instant(day, at, tz)
    return Due(day, due) if now >= due else None


def is_late(sent_at: datetime, due: datetime, late_after_s: float) -> bool:
    """True when ``sent_at`` is more than ``late_after_s`` seconds after ``due``."""
    return (sent_at - due).total_seconds() > late_after_s
