"""Spend over time by provider, money apart from free-tier calls: the dashboard's main
charts and ``/budget chart`` (one picture, two panels).

* the last 24 local hours of BUDGET_TZ (the ledger's hour windows), and
* the last 30 local days (the ledger's day windows, today included),

each slot holding, per provider key, the money booked (``paid_musd``: settled, or an
expired hold at its bound), the list-price equivalent of the calls booked at $0
(``free_list_musd``: the free tiers, what they would have cost — never money spent), and
the calls.

The rows are the books' own: :func:`budget.books.export.booked_attempts`, the reader of
``/budget export`` (one row per booked attempt, in the window its hold was granted in,
corrections included), summed here per slot (docs/decisions/071-dashboard-figures.md).
Closed days are read at most every :data:`CLOSED_DAYS_TTL_S`; the recent part (today
and the last 24 hours) at most every :data:`RECENT_TTL_S`, however many pages ask; one
read at a time.

Money is integer µUSD; instants are aware UTC.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from sqlalchemy.ext.asyncio import AsyncEngine

from budget.books.export import Attempt, booked_attempts
from budget.books.periods import Period
from budget.kernel.clock import Clock
from budget.policy.windows import day_bounds, hour_bounds

__all__ = [
    "CLOSED_DAYS_TTL_S",
    "DAYS",
    "HOURS",
    "RECENT_TTL_S",
    "ProviderSeries",
    "SpendBook",
    "SpendPicture",
    "SpendSeries",
    "day_slots",
    "hour_slots",
    "sum_slots",
]

#: Slots of the two charts: hours of the hourly one, days of the daily one.
HOURS = 24
DAYS = 30
#: Seconds a read of the recent attempts (today, the last 24 hours) is reused.
RECENT_TTL_S = 10.0
#: Seconds a read of the closed days is reused (late settles and corrections of past
#: days show after at most this long).
CLOSED_DAYS_TTL_S = 300.0


@dataclass(slots=True)
class ProviderSeries:
    """One provider key's slots.

    Attributes:
        provider: key name (``groq``, ``groq2``, ``deepseek`` …).
        paid_musd: µUSD booked per slot.
        free_list_musd: list-price µUSD of the calls booked at $0, per slot.
        calls: booked attempts per slot.
    """

    provider: str
    paid_musd: list[int]
    free_list_musd: list[int]
    calls: list[int]

    @classmethod
    def empty(cls, provider: str, slots: int) -> ProviderSeries:
        return cls(provider, [0] * slots, [0] * slots, [0] * slots)


@dataclass(frozen=True, slots=True)
class SpendSeries:
    """One chart: slot starts (aware UTC), their local labels, a series per provider
    key with any booking in the span (cascade order first), and the global limit of that
    window now (the limit line; ``None`` = no limit)."""

    starts: list[datetime]
    labels: list[str]
    providers: list[ProviderSeries]
    limit_musd: int | None = None

    def paid_total_musd(self) -> int:
        """Money booked over the whole span."""
        return sum(sum(p.paid_musd) for p in self.providers)

    def free_list_total_musd(self) -> int:
        """List-price equivalent of the free calls over the whole span."""
        return sum(sum(p.free_list_musd) for p in self.providers)


@dataclass(frozen=True, slots=True)
class SpendPicture:
    """Both charts, read at ``at``, cut in ``tz``."""

    at: datetime
    tz: str
    hourly: SpendSeries
    daily: SpendSeries


def hour_slots(now: datetime, tz: str, hours: int = HOURS) -> list[datetime]:
    """Starts of the last ``hours`` local hours, the current one last (as the ledger's
    ``spend_per_hour`` cuts them)."""
    _, current, _ = hour_bounds(now, tz)
    return [current - timedelta(hours=h) for h in range(hours - 1, -1, -1)]


def day_slots(now: datetime, tz: str, days: int = DAYS) -> list[tuple[str, datetime]]:
    """``(day key, start)`` of the last ``days`` local days, today last."""
    out: list[tuple[str, datetime]] = []
    at = now
    for _ in range(days):
        key, start, _end = day_bounds(at, tz)
        out.append((key, start))
        at = start - timedelta(seconds=1)
    return out[::-1]


def sum_slots(
    attempts: Iterable[Attempt],
    slot_of: dict[str, int],
    key_of: str,
    slots: int,
    tz: str,
) -> dict[str, ProviderSeries]:
    """Sum ``attempts`` into slots, per provider key.

    Args:
        attempts: booked attempts.
        slot_of: slot key → index: day keys (``key_of="day"``: the attempt's own
            ``day_key``) or hour keys (``key_of="hour"``: the local hour of its grant,
            :func:`budget.policy.windows.hour_bounds`).
        key_of: ``"day"`` or ``"hour"``.
        slots: how many slots.
        tz: the zone hours are cut in.

    Attempts outside every slot are left out.
    """
    out: dict[str, ProviderSeries] = {}
    for row in attempts:
        if key_of == "day":
            key = row.day_key
        else:
            key = hour_bounds(datetime.fromtimestamp(row.granted_at, UTC), tz)[0]
        index = slot_of.get(key)
        if index is None:
            continue
        series = out.get(row.provider)
        if series is None:
            series = out[row.provider] = ProviderSeries.empty(row.provider, slots)
        money = int(row.actual_musd or 0)
        series.calls[index] += 1
        if money > 0:
            series.paid_musd[index] += money
        else:
            series.free_list_musd[index] += int(row.list_actual_musd or 0)
    return out


@dataclass(slots=True)
class _Cached:
    at: float = -1e18
    key: object = None
    rows: list[Attempt] = field(default_factory=list)


class SpendBook:
    """Reads :class:`SpendPicture` from the books, reusing recent reads.

    Args:
        engine: the database the ledger books in.
        tz: BUDGET_TZ.
        clock: the bot's clock (``now()`` cuts the slots, ``monotonic()`` ages the cache).
        order: provider key names in cascade order (series are listed in it; other
            names after, sorted).
        recent_ttl_s / closed_ttl_s: see :data:`RECENT_TTL_S`, :data:`CLOSED_DAYS_TTL_S`.
    """

    __slots__ = ("_clock", "_closed", "_engine", "_lock", "_order", "_recent", "_ttl", "_tz")

    def __init__(
        self,
        engine: AsyncEngine,
        tz: str,
        clock: Clock,
        order: Sequence[str],
        *,
        recent_ttl_s: float = RECENT_TTL_S,
        closed_ttl_s: float = CLOSED_DAYS_TTL_S,
    ) -> None:
        self._engine = engine
        self._tz = tz
        self._clock = clock
        self._order = list(order)
        self._ttl = (recent_ttl_s, closed_ttl_s)
        self._recent = _Cached()
        self._closed = _Cached()
        self._lock = asyncio.Lock()

    def __repr__(self) -> str:
        return f"SpendBook(tz={self._tz!r}, order={self._order!r})"

    async def picture(
        self, hour_limit_musd: int | None = None, day_limit_musd: int | None = None
    ) -> SpendPicture:
        """Both charts now, with the given global limits as their limit lines.

        Raises:
            sqlalchemy.exc.SQLAlchemyError: the books cannot be read.
        """
        now = self._clock.now()
        hours = hour_slots(now, self._tz)
        days = day_slots(now, self._tz)
        today_start = days[-1][1]
        async with self._lock:
            recent = await self._read(
                self._recent, min(hours[0], today_start), None, (hours[0], today_start), 0
            )
            closed = await self._read(self._closed, days[0][1], today_start, days[0][0], 1)
        zone = ZoneInfo(self._tz)
        hour_keys = {hour_bounds(s, self._tz)[0]: i for i, s in enumerate(hours)}
        day_keys = {key: i for i, (key, _s) in enumerate(days)}
        hourly = sum_slots(recent, hour_keys, "hour", HOURS, self._tz)
        today = [row for row in recent if row.day_key == days[-1][0]]
        daily = sum_slots([*closed, *today], day_keys, "day", DAYS, self._tz)
        return SpendPicture(
            at=now,
            tz=self._tz,
            hourly=SpendSeries(
                hours,
                [f"{s.astimezone(zone):%H:00}" for s in hours],
                self._ordered(hourly),
                hour_limit_musd,
            ),
            daily=SpendSeries(
                [s for _k, s in days], [k for k, _s in days], self._ordered(daily), day_limit_musd
            ),
        )

    async def _read(
        self, cache: _Cached, start: datetime, end: datetime | None, key: object, which: int
    ) -> list[Attempt]:
        """The booked attempts granted in ``[start, end)`` (``end=None``: up to now),
        from ``cache`` while it holds ``key`` and is younger than its TTL."""
        age = self._clock.monotonic() - cache.at
        if cache.key == key and age < self._ttl[which]:
            return cache.rows
        until = end or self._clock.now() + timedelta(seconds=1)
        period = Period("dashboard", self._tz, start, until)
        cache.rows = [row async for row in booked_attempts(self._engine, period)]
        cache.at, cache.key = self._clock.monotonic(), key
        return cache.rows

    def _ordered(self, found: dict[str, ProviderSeries]) -> list[ProviderSeries]:
        rank = {name: i for i, name in enumerate(self._order)}
        names = sorted(found, key=lambda n: (rank.get(n, len(rank)), n))
        return [found[n] for n in names]
