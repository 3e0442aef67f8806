"""Budget windows: pure hour/day arithmetic in BUDGET_TZ (an IANA zone name).

Every hold is stamped, when it is *granted*, with the keys of the hour and the
day it falls in; its settlement is booked into those windows even if they have
closed since. Keys are plain strings, stable across restarts and processes:

* day key — the local calendar date, ``"2026-03-29"``;
* hour key — the UTC instant at which the local hour began,
  ``"2026-03-29T01:00Z"``. Using the instant (not the local wall time) keeps the
  repeated hour of a 25-hour day (two local ``02:00`` hours) apart, and works for
  zones whose offset is not a whole number of hours (India, +05:30: the local
  hour 10:00–11:00 is 04:30–05:30 UTC).

Reset times are aware UTC datetimes: the start of the next local hour / day.
A day is 23 or 25 hours long on a DST change; it always ends at local midnight.

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
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from functools import lru_cache
from zoneinfo import ZoneInfo

from budget.types import Window

__all__ = [
    "WindowKeys",
    "day_bounds",
    "hour_bounds",
    "local_instant",
    "resets_at",
    "window_keys",
    "zone",
]

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


@dataclass(frozen=True, slots=True)
class WindowKeys:
    """The windows an instant belongs to.

    Attributes:
        tz: the IANA zone the windows are cut in.
        hour_key: see :func:`hour_bounds`.
        day_key: see :func:`day_bounds`.
        hour_resets_at: aware UTC start of the next local hour.
        day_resets_at: aware UTC start of the next local day.
    """

    tz: str
    hour_key: str
    day_key: str
    hour_resets_at: datetime
    day_resets_at: datetime

    def key(self, window: Window) -> str:
        """The key of ``window`` (hour or day).

        Raises:
            ValueError: for :attr:`Window.MINUTE`, which has no stored bucket.
        """
        if window is Window.HOUR:
            return self.hour_key
        if window is Window.DAY:
            return self.day_key
        raise ValueError(f"no bucket key for window {window}")

    def resets_at(self, window: Window) -> datetime:
        """Aware UTC reset time of ``window`` (hour or day)."""
        return self.hour_resets_at if window is Window.HOUR else self.day_resets_at


def window_keys(at: datetime, tz_name: str) -> WindowKeys:
    """The hour and day windows of ``at`` (aware) cut in ``tz_name``."""
    hour_key, _, hour_end = hour_bounds(at, tz_name)
    day_key, _, day_end = day_bounds(at, tz_name)
    return WindowKeys(tz_name, hour_key, day_key, hour_end, day_end)


def resets_at(window: Window, at: datetime, tz_name: str) -> datetime:
    """When the ``window`` containing ``at`` resets (aware UTC)."""
    if window is Window.MINUTE:
        return _utc(at) + timedelta(minutes=1)
    return window_keys(at, tz_name).resets_at(window)
