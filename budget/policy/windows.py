"""Budget windows: pure hour/day/month arithmetic in BUDGET_TZ (an IANA zone name).

Every hold is stamped, when it is *granted*, with the keys of the hour and the
day it falls in; its settlement is booked into those windows even if they have
closed since. Keys are plain strings, stable across restarts and processes:

* day key — the local calendar date, ``"2026-03-29"``;
* month key — the local calendar month, ``"2026-03"``; with a billing-cycle day
  ``d`` other than 1 (BUDGET_MONTH_START_DAY), the local date the cycle began,
  ``"2026-03-15"`` (a cycle runs from local midnight of day ``d`` to local midnight of
  day ``d`` of the next month; a day past a month's end is that month's last day:
  ``d`` = 31 starts February's cycle on the 28th or 29th);
* hour key — the UTC instant at which the local hour began,
  ``"2026-03-29T01:00Z"``. Using the instant (not the local wall time) keeps the
  repeated hour of a 25-hour day (two local ``02:00`` hours) apart, and works for
  zones whose offset is not a whole number of hours (India, +05:30: the local
  hour 10:00–11:00 is 04:30–05:30 UTC).

Reset times are aware UTC datetimes: the start of the next local hour / day / month.
A day is 23 or 25 hours long on a DST change; it always ends at local midnight, and so
does a month (March in Berlin is 743 hours long, October 745).

Worked timeline (BUDGET_TZ = Europe/Berlin, winter, UTC+1)::

    23:59:58 local (22:59:58Z)  hold granted  -> day "2026-01-14", hour "2026-01-14T22:00Z"
    00:00:00 local              the day and the hour reset (free again)
    00:00:03 local (23:00:03Z)  settle        -> booked into "2026-01-14" / "…T22:00Z",
                                                 the windows the hold was granted in;
                                                 nothing lands in "2026-01-15".

DST (Europe/Berlin, 2026-03-29, clocks jump 02:00 → 03:00 CEST)::

    day "2026-03-29" runs 2026-03-28T23:00Z .. 2026-03-29T22:00Z   (23 hours)
    hour keys that day: …T23:00Z (00:00 CET), 2026-03-29T00:00Z (01:00 CET),
                        2026-03-29T01:00Z (03:00 CEST), …

A month across DST (Europe/Berlin, calendar months)::

    2026-03-31T21:59:59Z (23:59:59 CEST)  month "2026-03"
    2026-03-31T22:00:00Z (00:00 CEST)     month "2026-04": March's reset
    March runs 2026-02-28T23:00Z .. 2026-03-31T22:00Z (743 hours)
"""

from __future__ import annotations

import calendar
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from functools import lru_cache
from typing import NamedTuple
from zoneinfo import ZoneInfo

from budget.types import Window

__all__ = [
    "BALANCE_KEY",
    "NEVER",
    "HoldKeys",
    "WindowKeys",
    "day_bounds",
    "hour_bounds",
    "local_instant",
    "month_bounds",
    "resets_at",
    "window_keys",
    "zone",
]

#: The key of the wallet's one bucket (:attr:`Window.BALANCE`): a balance has no window.
BALANCE_KEY = ""
#: When a balance "resets": never (the latest aware time there is).
NEVER = datetime.max.replace(tzinfo=UTC)

_HOUR = timedelta(hours=1)
_MINUTE = timedelta(minutes=1)
_MIDNIGHT = time(0, 0)


@lru_cache(maxsize=32)
def zone(tz_name: str) -> ZoneInfo:
    """The ``ZoneInfo`` for an IANA name (cached).

    Raises:
        zoneinfo.ZoneInfoNotFoundError: for an unknown name.
    """
    return ZoneInfo(tz_name)


def _utc(at: datetime) -> datetime:
    if at.tzinfo is None:
        raise ValueError("window math needs an aware datetime")
    return at.astimezone(UTC)


def _exists(wall: datetime) -> bool:
    """True when the aware local ``wall`` time exists (survives a round trip via UTC)."""
    back = wall.astimezone(UTC).astimezone(wall.tzinfo)
    return back.replace(tzinfo=None) == wall.replace(tzinfo=None)


def local_instant(day: date, at: time, tz: ZoneInfo) -> datetime:
    """The UTC instant of the local wall time ``at`` on ``day`` in ``tz`` — the one DST
    helper (budget day windows and digest due times both use it).

    * gap (the wall time does not exist, spring forward): the first existing minute
      after it (02:30 Europe/Berlin on 2026-03-29 → 03:00 CEST = 01:00 UTC);
    * fold (it happens twice, fall back): the first occurrence (``fold=0``).

    Args:
        day: the local date.
        at: local wall time (seconds are ignored).
        tz: the zone.

    Returns:
        An aware UTC datetime.
    """
    wall = datetime.combine(day, at.replace(second=0, microsecond=0), tzinfo=tz)
    for _ in range(24 * 60 + 1):  # a whole skipped day (Pacific/Apia 2011-12-30) included
        if _exists(wall):
            return wall.replace(fold=0).astimezone(UTC)
        wall = (wall.replace(tzinfo=None) + _MINUTE).replace(tzinfo=tz)
    raise ValueError(f"no valid local minute after {at} on {day} in {tz}")  # pragma: no cover


def day_bounds(at: datetime, tz_name: str) -> tuple[str, datetime, datetime]:
    """The local day containing ``at``.

    Returns:
        ``(day_key, start, end)``: the ISO date in ``tz_name`` and the aware UTC
        instants at which it begins and ends (end = the next day's start; 23, 24
        or 25 hours later).
    """
    tz = zone(tz_name)
    local_day = _utc(at).astimezone(tz).date()
    start = local_instant(local_day, _MIDNIGHT, tz)
    end = local_instant(local_day + timedelta(days=1), _MIDNIGHT, tz)
    return local_day.isoformat(), start, end


def hour_bounds(at: datetime, tz_name: str) -> tuple[str, datetime, datetime]:
    """The local hour containing ``at``.

    Returns:
        ``(hour_key, start, end)``: the key (UTC instant of the local hour's start,
        ``YYYY-MM-DDTHH:MMZ``) and the aware UTC instants of its start and end.
    """
    tz = zone(tz_name)
    utc = _utc(at)
    local = utc.astimezone(tz)
    floored = local.replace(minute=0, second=0, microsecond=0)
    start = floored.astimezone(UTC)
    if start > utc:  # a DST shift of a non-whole hour (e.g. Lord Howe, 30 min)
        start -= timedelta(minutes=30)
    nxt = (start + _HOUR).astimezone(tz).replace(minute=0, second=0, microsecond=0)
    end = nxt.astimezone(UTC)
    if end <= utc:
        end = start + _HOUR
    return start.strftime("%Y-%m-%dT%H:%MZ"), start, end


def _cycle_start(year: int, month: int, start_day: int) -> date:
    """The local date a billing cycle starting on ``start_day`` begins in that month
    (the month's last day when it has fewer days)."""
    return date(year, month, min(start_day, calendar.monthrange(year, month)[1]))


def _next_month(year: int, month: int) -> tuple[int, int]:
    return (year + 1, 1) if month == 12 else (year, month + 1)


def month_bounds(at: datetime, tz_name: str, start_day: int = 1) -> tuple[str, datetime, datetime]:
    """The local month (billing cycle) containing ``at``.

    Args:
        at: an aware instant.
        tz_name: the IANA zone.
        start_day: the cycle's first day of the month, 1..31 (1 = calendar months;
            a day the month lacks is its last day).

    Returns:
        ``(month_key, start, end)``: ``"YYYY-MM"`` (``start_day`` 1) or the cycle's
        first local date ``"YYYY-MM-DD"``, and the aware UTC instants of its local
        midnights (start, and the next cycle's start).

    Raises:
        ValueError: ``start_day`` outside 1..31, or a naive ``at``.
    """
    if not 1 <= start_day <= 31:
        raise ValueError(f"a month's start day is 1..31, got {start_day}")
    tz = zone(tz_name)
    local_day = _utc(at).astimezone(tz).date()
    first = _cycle_start(local_day.year, local_day.month, start_day)
    if local_day < first:  # still in the cycle that began last month
        year, month = local_day.year, local_day.month - 1
        if month == 0:
            year, month = year - 1, 12
        first = _cycle_start(year, month, start_day)
    following = _cycle_start(*_next_month(first.year, first.month), start_day)
    key = first.strftime("%Y-%m") if start_day == 1 else first.isoformat()
    return key, local_instant(first, _MIDNIGHT, tz), local_instant(following, _MIDNIGHT, tz)


class HoldKeys(NamedTuple):
    """The keys of the windows a hold was granted in, as it stores them.

    ``month`` is ``None`` for a hold granted before months were tracked (migration
    ``0025``): it books no month bucket, at its grant or its end.
    """

    hour: str
    day: str
    month: str | None = None

    def key(self, window: Window) -> str | None:
        """The key of ``window`` (``None``: the hold has no such bucket)."""
        if window is Window.HOUR:
            return self.hour
        if window is Window.DAY:
            return self.day
        if window is Window.MONTH:
            return self.month
        if window is Window.BALANCE:
            return BALANCE_KEY
        return None


@dataclass(frozen=True, slots=True)
class WindowKeys:
    """The windows an instant belongs to.

    Attributes:
        tz: the IANA zone the windows are cut in.
        hour_key: see :func:`hour_bounds`.
        day_key: see :func:`day_bounds`.
        hour_resets_at: aware UTC start of the next local hour.
        day_resets_at: aware UTC start of the next local day.
        month_key: see :func:`month_bounds`.
        month_resets_at: aware UTC start of the next local month (billing cycle).
    """

    tz: str
    hour_key: str
    day_key: str
    hour_resets_at: datetime
    day_resets_at: datetime
    month_key: str
    month_resets_at: datetime

    def key(self, window: Window) -> str:
        """The key of ``window`` (hour, day or month).

        Raises:
            ValueError: for :attr:`Window.MINUTE`, which has no stored bucket.
        """
        if window is Window.HOUR:
            return self.hour_key
        if window is Window.DAY:
            return self.day_key
        if window is Window.MONTH:
            return self.month_key
        if window is Window.BALANCE:
            return BALANCE_KEY
        raise ValueError(f"no bucket key for window {window}")

    def resets_at(self, window: Window) -> datetime:
        """Aware UTC reset time of ``window`` (hour, day or month)."""
        if window is Window.HOUR:
            return self.hour_resets_at
        if window is Window.MONTH:
            return self.month_resets_at
        if window is Window.BALANCE:
            return NEVER
        return self.day_resets_at

    @property
    def hold(self) -> HoldKeys:
        """The keys a hold granted now stores."""
        return HoldKeys(self.hour_key, self.day_key, self.month_key)


def window_keys(at: datetime, tz_name: str, month_start_day: int = 1) -> WindowKeys:
    """The hour, day and month windows of ``at`` (aware) cut in ``tz_name``
    (``month_start_day``: the billing-cycle day, :func:`month_bounds`)."""
    hour_key, _, hour_end = hour_bounds(at, tz_name)
    day_key, _, day_end = day_bounds(at, tz_name)
    month_key, _, month_end = month_bounds(at, tz_name, month_start_day)
    return WindowKeys(tz_name, hour_key, day_key, hour_end, day_end, month_key, month_end)


def resets_at(window: Window, at: datetime, tz_name: str, month_start_day: int = 1) -> datetime:
    """When the ``window`` containing ``at`` resets (aware UTC)."""
    if window is Window.MINUTE:
        return _utc(at) + timedelta(minutes=1)
    return window_keys(at, tz_name, month_start_day).resets_at(window)
