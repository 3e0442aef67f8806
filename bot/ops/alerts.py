"""Alerts before the caps: each ALERT_AT fraction of every global, team and
provider-account limit, told to the admins once per window
(docs/decisions/074-alerts-before-the-caps.md).

What is measured is what the limit counts: the bucket's settled plus held µUSD
(:class:`budget.status.BucketStatus`, read by :meth:`budget.ledger.Ledger.status` and
``team_status`` — the calls ``/budget`` makes). A threshold ``t`` is crossed when
``settled + held ≥ t × limit``. Each crossed threshold of a window is claimed once
(:class:`bot.ops.once.NoticeBook`, key ``alert:<level>:<scope>:<window>:<window
key>:<t>``); one message names the highest threshold newly crossed, and the lower ones
crossed with it are claimed silently (a jump from 0 to 85 % is one "80 %" message, and
no "50 %" one after it). A limit of $0 (no paid spend at all) is never alerted on.

The burn rate is the window's average since it opened: counted µUSD ÷ elapsed time,
per hour; the projected time to the cap is when the rest of the limit is spent at that
rate, told only when it falls before the window resets. The top spenders are read from
the books' rows of the window (:func:`budget.books.export.booked_attempts`: settled
and expired attempts granted in it, of that team or provider key).

Money is integer µUSD; instants aware UTC.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal

from sqlalchemy.ext.asyncio import AsyncEngine

from budget.books.export import booked_attempts
from budget.books.periods import Period
from budget.ledger import Ledger
from budget.policy.windows import day_bounds, hour_bounds
from budget.status import BucketStatus
from budget.types import Level, Window

__all__ = ["TOP_SPENDERS", "LimitAlert", "alert_key", "burn", "crossed", "read_buckets"]

#: Spenders named in an alert.
TOP_SPENDERS = 3


@dataclass(frozen=True, slots=True)
class LimitAlert:
    """One threshold of one limit in one window, as the admins are told it.

    Attributes:
        level / scope / window: the limit (``scope``: team name, provider key, ``""``).
        threshold: the fraction reached (e.g. ``Decimal("0.8")``).
        settled_musd / held_musd / limit_musd: the bucket now; the sum of the first two
            is what the limit counts.
        burn_musd_per_hour: the window's average burn rate since it opened.
        window_start / resets_at: the window's bounds (aware UTC).
        projected_at: when the limit is spent at that rate, if before the reset
            (``None``: not before the reset, or already reached).
        top: ``(user id, settled µUSD in the window)``, largest first.
    """

    level: Level
    scope: str
    window: Window
    threshold: Decimal
    settled_musd: int
    held_musd: int
    limit_musd: int
    burn_musd_per_hour: int
    window_start: datetime
    resets_at: datetime
    projected_at: datetime | None
    top: tuple[tuple[int, int], ...]

    @property
    def used_musd(self) -> int:
        """What the limit counts now: settled + held."""
        return self.settled_musd + self.held_musd

    @property
    def reached(self) -> bool:
        """The whole limit is counted: new paid calls it counts are refused."""
        return self.used_musd >= self.limit_musd


def crossed(bucket: BucketStatus, thresholds: Sequence[Decimal]) -> list[Decimal]:
    """The thresholds ``bucket`` has reached, lowest first (none without a positive limit)."""
    if bucket.limit_musd is None or bucket.limit_musd <= 0:
        return []
    used = bucket.settled_musd + bucket.held_musd
    return [t for t in sorted(thresholds) if Decimal(used) >= t * bucket.limit_musd]


def alert_key(bucket: BucketStatus, threshold: Decimal) -> str:
    """The claim key of ``threshold`` of ``bucket``'s window (:mod:`bot.ops.once`)."""
    scope = bucket.scope[:64]
    return (
        f"alert:{bucket.level.value}:{scope}:{bucket.window.value}:{bucket.key}:"
        f"{threshold.normalize()}"
    )


def window_start(window: Window, now: datetime, tz: str) -> datetime:
    """The start (aware UTC) of the hour or day window containing ``now`` in ``tz``."""
    bounds = hour_bounds if window is Window.HOUR else day_bounds
    return bounds(now, tz)[1]


def burn(bucket: BucketStatus, now: datetime, tz: str) -> tuple[int, datetime | None]:
    """``(µUSD per hour since the window opened, projected time of the cap)`` of ``bucket``.

    The projection is ``now + rest ÷ rate``, given only when it falls before the
    window's reset (``None`` otherwise, or when nothing is counted, or already reached).
    """
    start = window_start(bucket.window, now, tz)
    elapsed_s = max(1.0, (now - start).total_seconds())
    used = bucket.settled_musd + bucket.held_musd
    per_hour = int(used * 3600 // elapsed_s)
    limit = bucket.limit_musd or 0
    if used <= 0 or used >= limit:
        return per_hour, None
    at = now + timedelta(seconds=(limit - used) * elapsed_s / used)
    return per_hour, (at if at < bucket.resets_at else None)


async def read_buckets(ledger: Ledger) -> list[BucketStatus]:
    """Every global, provider-account and team bucket of the current hour and day with
    a limit (what ``/budget`` lists).

    Raises:
        budget.errors.HoldRefused: the ledger is unavailable.
    """
    status = await ledger.status()
    found = [b for b in status.buckets if b.window in (Window.HOUR, Window.DAY)]
    for name in sorted(status.teams):
        found += (await ledger.team_status(name)).buckets
    return [b for b in found if b.limit_musd is not None and b.level is not Level.USER]


async def top_spenders(
    engine: AsyncEngine, bucket: BucketStatus, now: datetime, tz: str, n: int = TOP_SPENDERS
) -> tuple[tuple[int, int], ...]:
    """The ``n`` users with the most settled µUSD in ``bucket``'s window so far, among
    the attempts its limit counts (a team's members, a provider key's calls, everyone).

    Raises:
        sqlalchemy.exc.SQLAlchemyError: the books cannot be read.
    """
    start = window_start(bucket.window, now, tz)
    period = Period("alert", tz, start, now + timedelta(seconds=1))
    key_name = bucket.scope if bucket.level is Level.PROVIDER else None
    spent: Counter[int] = Counter()
    async for row in booked_attempts(engine, period, key_name=key_name):
        if bucket.level is Level.TEAM and row.team != bucket.scope:
            continue
        if row.actual_musd:
            spent[row.user_id] += int(row.actual_musd)
    ranked = sorted(spent.items(), key=lambda item: (-item[1], item[0]))
    return tuple(ranked[:n])
