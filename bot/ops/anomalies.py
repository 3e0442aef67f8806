"""The anomalies the operator is told of beside the thresholds: a suspected loop, a cost
regression and a spend forecast (docs/decisions/180-anomaly-alerts.md; the free quota
forecast is :mod:`bot.ops.quota`).

Each reader returns what it found, or ``None`` when there is nothing to tell; the watch
(:mod:`bot.ops.anomaly_watch`) claims it once per window and tells it.

* **Loop suspicion** (:func:`read_loop`): over the last ``span``, the calls nobody typed —
  attempts of digests, and attempts of a chat operation after its first (retries,
  fallbacks, summaries) — number at least ``min_calls`` while no message was taken in
  (``seen_messages``: any update the intake recorded in the span). A call is a hold the
  ledger granted (``budget_holds.granted_at``), whatever became of it; its money is the
  booked µUSD of settled and expired holds plus the ceiling still held.
* **Cost regression** (:func:`read_costs`, :func:`regressions`): per model, the money of
  chat attempts booked (settled or expired) on the ledger's day keys ÷ the chat
  operations they answered, today against the seven days before (their sums, not an
  average of averages). A model regresses when both sides answered at least
  ``min_answers`` messages, the baseline is above $0, and today's cost per answer is
  at least ``ratio`` × the baseline's.
* **Spend forecast** (:func:`forecast_day`, :func:`forecast_month`): what the global
  spend reaches by the window's end at the window's average rate since it opened
  (counted µUSD × window length ÷ elapsed), told when it passes the limit (the global
  daily limit; for the month, the alert-only MONTH_ALERT_USD) before the spend has
  reached it, and no sooner than an hour into the day / a day into the month.

Money is integer µUSD; instants aware UTC.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from bot.storage.tables import SeenMessage
from budget.policy.windows import day_bounds, local_instant, zone
from budget.status import BucketStatus
from budget.storage.tables import buckets, holds
from budget.types import Level, Origin

__all__ = [
    "BASELINE_DAYS",
    "CostRegression",
    "LoopSuspicion",
    "ModelCost",
    "SpendForecast",
    "forecast_day",
    "forecast_month",
    "read_costs",
    "read_loop",
    "read_month_spend",
    "regressions",
]

#: The days before today the cost per answer is compared with.
BASELINE_DAYS = 7
#: No day forecast before the day is this old, nor a month one before a day of it.
DAY_FORECAST_AFTER = timedelta(hours=1)
MONTH_FORECAST_AFTER = timedelta(days=1)
#: States whose money is booked.
_BOOKED = ("settled", "expired")


@dataclass(frozen=True, slots=True)
class LoopSuspicion:
    """Calls nobody typed, with no message taken in, over ``[since, until)``.

    Attributes:
        digest_calls: attempts of digest operations.
        retry_calls: attempts of chat operations after their first.
        booked_musd: the money settled or expired of those attempts.
        held_musd: the ceilings still held of those attempts.
        last_message_at: the last message taken in before ``since`` (``None``: none).
    """

    since: datetime
    until: datetime
    digest_calls: int
    retry_calls: int
    booked_musd: int
    held_musd: int
    last_message_at: datetime | None

    @property
    def calls(self) -> int:
        return self.digest_calls + self.retry_calls


def _day_keys(start: datetime, end: datetime, tz: str) -> list[str]:
    """The ledger's day keys from the day of ``start`` to that of ``end``."""
    first = date.fromisoformat(day_bounds(start, tz)[0])
    last = date.fromisoformat(day_bounds(end, tz)[0])
    return [(first + timedelta(days=i)).isoformat() for i in range((last - first).days + 1)]


async def _messages(engine: AsyncEngine, since: datetime) -> tuple[int, datetime | None]:
    """(messages taken in since ``since``, the last one's time before it)."""
    table = SeenMessage.__table__
    async with engine.connect() as conn:
        count = await conn.scalar(
            sa.select(sa.func.count()).select_from(table).where(table.c.received_at >= since)
        )
        last = await conn.scalar(
            sa.select(sa.func.max(table.c.received_at)).where(table.c.received_at < since)
        )
    if isinstance(last, datetime) and last.tzinfo is None:
        last = last.replace(tzinfo=UTC)  # SQLite's max() loses the column's type
    return int(count or 0), last


async def read_loop(
    engine: AsyncEngine, now: datetime, span: timedelta, tz: str, min_calls: int
) -> LoopSuspicion | None:
    """The loop suspicion of the ``span`` before ``now`` (see the module docstring), or
    ``None`` when a message was taken in or fewer than ``min_calls`` calls were made.

    Raises:
        sqlalchemy.exc.SQLAlchemyError: the books cannot be read.
    """
    since = now - span
    count, last = await _messages(engine, since)
    if count:
        return None
    keys = _day_keys(since - timedelta(days=1), now, tz)
    recent = (
        sa.select(
            holds.c.operation_id, holds.c.origin, holds.c.granted_at, holds.c.state,
            holds.c.actual_musd, holds.c.ceiling_musd,
        )
        .where(holds.c.day_key.in_(keys), holds.c.granted_at >= since.timestamp())
        .where(holds.c.granted_at <= now.timestamp())
    )  # fmt: skip
    async with engine.connect() as conn:
        rows = (await conn.execute(recent)).all()
        chat_ops = sorted({r.operation_id for r in rows if r.origin != Origin.DIGEST.value})
        firsts: dict[str, float] = {}
        if chat_ops:
            first = (
                sa.select(holds.c.operation_id, sa.func.min(holds.c.granted_at))
                .where(holds.c.day_key.in_(keys), holds.c.operation_id.in_(chat_ops))
                .group_by(holds.c.operation_id)
            )
            firsts = {op: float(at) for op, at in (await conn.execute(first)).all()}
    digest = retry = booked = held = 0
    for row in rows:
        if row.origin == Origin.DIGEST.value:
            digest += 1
        elif float(row.granted_at) > firsts.get(row.operation_id, float(row.granted_at)):
            retry += 1
        else:
            continue
        if row.state in _BOOKED:
            booked += int(row.actual_musd or 0)
        elif row.state == "held":
            held += int(row.ceiling_musd)
    if digest + retry < min_calls:
        return None
    return LoopSuspicion(since, now, digest, retry, booked, held, last)


@dataclass(frozen=True, slots=True)
class ModelCost:
    """One model's chat attempts booked over some days: ``cost_musd`` and the chat
    operations they answered (``answers``)."""

    model: str
    cost_musd: int
    answers: int


@dataclass(frozen=True, slots=True)
class CostRegression:
    """A model whose cost per answered message today is ``ratio`` × its baseline's."""

    model: str
    day: str
    today: ModelCost
    baseline: ModelCost

    @property
    def today_per_answer_musd(self) -> int:
        return self.today.cost_musd // self.today.answers

    @property
    def baseline_per_answer_musd(self) -> int:
        return self.baseline.cost_musd // self.baseline.answers


async def read_costs(engine: AsyncEngine, day_keys: Sequence[str]) -> dict[str, ModelCost]:
    """Per model, the chat attempts booked on ``day_keys`` (see the module docstring).

    Raises:
        sqlalchemy.exc.SQLAlchemyError: the books cannot be read.
    """
    stmt = (
        sa.select(
            holds.c.model,
            sa.func.coalesce(sa.func.sum(holds.c.actual_musd), 0),
            sa.func.count(sa.distinct(holds.c.operation_id)),
        )
        .where(holds.c.day_key.in_(list(day_keys)), holds.c.origin == Origin.CHAT.value)
        .where(holds.c.state.in_(_BOOKED))
        .group_by(holds.c.model)
    )
    async with engine.connect() as conn:
        rows = (await conn.execute(stmt)).all()
    return {str(m): ModelCost(str(m), int(cost), int(n)) for m, cost, n in rows}


def baseline_keys(day: str) -> list[str]:
    """The :data:`BASELINE_DAYS` day keys before ``day`` (an ISO date)."""
    first = date.fromisoformat(day)
    return [(first - timedelta(days=i)).isoformat() for i in range(BASELINE_DAYS, 0, -1)]


def regressions(
    day: str,
    today: dict[str, ModelCost],
    baseline: dict[str, ModelCost],
    ratio: Decimal,
    min_answers: int,
) -> list[CostRegression]:
    """The models of ``today`` whose cost per answer is at least ``ratio`` × the
    baseline's (see the module docstring), by model name."""
    found = []
    for model in sorted(today):
        now, before = today[model], baseline.get(model)
        if before is None or min(now.answers, before.answers) < max(1, min_answers):
            continue
        if before.cost_musd <= 0:
            continue
        # now.cost / now.answers ≥ ratio × before.cost / before.answers, in integers
        if Decimal(now.cost_musd * before.answers) >= ratio * before.cost_musd * now.answers:
            found.append(CostRegression(model, day, now, before))
    return found


@dataclass(frozen=True, slots=True)
class SpendForecast:
    """What the global spend reaches by the end of a window at its average rate.

    Attributes:
        window: ``day`` or ``month``; ``key``: the day key or ``YYYY-MM``.
        used_musd: counted so far (settled + held); ``forecast_musd``: by ``end``.
        limit_musd: what it is compared with (the daily limit, MONTH_ALERT_USD).
        start / end: the window (aware UTC); ``reached_at``: when the limit is spent
            at that rate.
    """

    window: str
    key: str
    used_musd: int
    forecast_musd: int
    limit_musd: int
    start: datetime
    end: datetime
    reached_at: datetime


def _forecast(
    window: str, key: str, used: int, limit: int, start: datetime, end: datetime, now: datetime
) -> SpendForecast | None:
    elapsed = (now - start).total_seconds()
    if used <= 0 or used >= limit or elapsed <= 0:
        return None
    length = (end - start).total_seconds()
    forecast = int(used * length // elapsed)
    if forecast < limit:
        return None
    reached = start + timedelta(seconds=limit * elapsed / used)
    return SpendForecast(window, key, used, forecast, limit, start, end, reached)


def forecast_day(bucket: BucketStatus, now: datetime, tz: str) -> SpendForecast | None:
    """The day forecast of the global daily ``bucket`` (``None``: nothing to tell)."""
    if bucket.level is not Level.GLOBAL or not bucket.limit_musd or bucket.limit_musd <= 0:
        return None
    key, start, end = day_bounds(now, tz)
    if now - start < DAY_FORECAST_AFTER:
        return None
    used = bucket.settled_musd + bucket.held_musd
    return _forecast("day", key, used, bucket.limit_musd, start, end, now)


def month_bounds(now: datetime, tz: str) -> tuple[str, datetime, datetime]:
    """``(YYYY-MM, start, end)`` of the local month containing ``now`` (aware UTC)."""
    zone_info = zone(tz)
    today = now.astimezone(zone_info).date()
    first = today.replace(day=1)
    following = (first + timedelta(days=32)).replace(day=1)
    start = local_instant(first, time(0), zone_info)
    return first.strftime("%Y-%m"), start, local_instant(following, time(0), zone_info)


async def read_month_spend(engine: AsyncEngine, now: datetime, tz: str) -> int:
    """The global day buckets' settled + held µUSD of the local month so far.

    Raises:
        sqlalchemy.exc.SQLAlchemyError: the books cannot be read.
    """
    month = month_bounds(now, tz)[0]
    stmt = sa.select(
        sa.func.coalesce(sa.func.sum(buckets.c.settled_musd + buckets.c.held_musd), 0)
    ).where(
        buckets.c.level == Level.GLOBAL.value,
        buckets.c.scope == "",
        buckets.c.win == "day",
        buckets.c.wkey.like(f"{month}-%"),
    )
    async with engine.connect() as conn:
        return int(await conn.scalar(stmt) or 0)


def forecast_month(used_musd: int, limit_musd: int, now: datetime, tz: str) -> SpendForecast | None:
    """The month forecast of ``used_musd`` so far against ``limit_musd`` (``None``:
    nothing to tell, or no limit)."""
    if limit_musd <= 0:
        return None
    key, start, end = month_bounds(now, tz)
    if now - start < MONTH_FORECAST_AFTER:
        return None
    return _forecast("month", key, used_musd, limit_musd, start, end, now)
