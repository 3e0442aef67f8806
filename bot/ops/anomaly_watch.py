"""The anomaly alerts, checked on each tick of the operator's watch
(docs/decisions/180-anomaly-alerts.md).

:meth:`AnomalyWatch.check` reads each anomaly (:mod:`bot.ops.anomalies`,
:mod:`bot.ops.quota`), claims it once per window across restarts and replicas with the
watch's claim (:class:`bot.ops.once.NoticeBook`) and tells the admins in their language.
The windows (the claim keys):

===========  ==========================================  ===========================
type         key                                         told at most
===========  ==========================================  ===========================
``loop``     ``loop:<hour key>``                         once an hour
``quota``    ``quota:<key>:<day key>``                   once a key a day
``cost``     ``cost:<day key>:<model>``                  once a model a day
``forecast`` ``forecast:day:<day key>``, ``…:month:…``   once a day / a month
===========  ==========================================  ===========================

A type the admins muted (``/alerts``) is not read at all (``is_muted``). Time is the
injected clock's.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal
from functools import partial

from sqlalchemy.ext.asyncio import AsyncEngine

from bot.ops.anomalies import (
    ModelCost,
    baseline_keys,
    forecast_day,
    forecast_month,
    read_costs,
    read_loop,
    read_month_spend,
    regressions,
)
from bot.ops.quota import QuotaForecaster
from bot.text import anomaly_texts
from budget.kernel.clock import Clock
from budget.policy.windows import day_bounds, hour_bounds
from budget.status import BucketStatus
from budget.types import Level, Window
from llm.cascade.cascade import Cascade

__all__ = ["ANOMALY_TYPES", "AnomalyConfig", "AnomalyWatch"]

#: The anomaly alert types, as ``/alerts`` names them.
ANOMALY_TYPES = ("loop", "quota", "cost", "forecast")

Claim = Callable[[str, str], Awaitable[bool]]
Tell = Callable[[Callable[[], str]], Awaitable[int]]


@dataclass(frozen=True, slots=True)
class AnomalyConfig:
    """What the anomaly alerts look for (settings in ``bot/settings/ops.py``).

    Attributes:
        tz: BUDGET_TZ.
        loop_calls / loop_span: LOOP_ALERT_CALLS in LOOP_ALERT_MINUTES (0 calls: off).
        quota_lead: QUOTA_ALERT_MINUTES (zero: off).
        cost_ratio / cost_min_answers: COST_ALERT_RATIO (0: off), COST_ALERT_MIN_ANSWERS.
        month_alert_musd: MONTH_ALERT_USD in µUSD (0: no month forecast).
        day_forecast: the day's forecast is told (ALERT_AT is set).
    """

    tz: str
    loop_calls: int
    loop_span: timedelta
    quota_lead: timedelta
    cost_ratio: Decimal
    cost_min_answers: int
    month_alert_musd: int
    day_forecast: bool = True


class AnomalyWatch:
    """The anomaly checks (see the module docstring).

    Args:
        engine: the database the ledger books in (and the intake records).
        cascade: the keys in cascade order and their last rate-limit headers.
        clock: the one clock.
        config: see :class:`AnomalyConfig`.
    """

    def __init__(
        self, *, engine: AsyncEngine, cascade: Cascade, clock: Clock, config: AnomalyConfig
    ) -> None:
        self._engine = engine
        self._cascade = cascade
        self._clock = clock
        self.config = config
        self._quota = QuotaForecaster(config.quota_lead)
        self._baseline: tuple[str, dict[str, ModelCost]] | None = None
        #: a type muted by the admins is not read (set by the watch)
        self.is_muted: Callable[[str], bool] = lambda kind: False

    def __repr__(self) -> str:
        return f"AnomalyWatch(tz={self.config.tz!r})"

    async def check(self, claim: Claim, tell: Tell, buckets: list[BucketStatus]) -> int:
        """Read, claim and tell every anomaly of now; ``buckets``: the ledger's buckets
        the watch read this tick. Returns how many were told.

        Raises:
            sqlalchemy.exc.SQLAlchemyError: the books cannot be read.
        """
        checks = (
            ("loop", self._loop),
            ("quota", self._quota_check),
            ("cost", self._cost),
            ("forecast", partial(self._forecast, buckets)),
        )
        told = 0
        for kind, run in checks:
            if not self.is_muted(kind):
                for key, render in await run():
                    if await claim(key, "alert"):
                        await tell(render)
                        told += 1
        return told

    async def _loop(self) -> list[tuple[str, Callable[[], str]]]:
        cfg, now = self.config, self._clock.now()
        if cfg.loop_calls <= 0:
            return []
        found = await read_loop(self._engine, now, cfg.loop_span, cfg.tz, cfg.loop_calls)
        if found is None:
            return []
        key = f"loop:{hour_bounds(now, cfg.tz)[0]}"
        return [(key, partial(anomaly_texts.loop_text, found, cfg.tz))]

    async def _quota_check(self) -> list[tuple[str, Callable[[], str]]]:
        cfg, now = self.config, self._clock.now()
        if cfg.quota_lead <= timedelta(0):
            return []
        day = day_bounds(now, cfg.tz)[0]
        return [
            (f"quota:{f.key[:64]}:{day}", partial(anomaly_texts.quota_text, f, cfg.tz))
            for f in self._quota.sample(now, self._cascade.provider_status())
        ]

    async def _cost(self) -> list[tuple[str, Callable[[], str]]]:
        cfg = self.config
        if cfg.cost_ratio <= 0:
            return []
        day = day_bounds(self._clock.now(), cfg.tz)[0]
        if self._baseline is None or self._baseline[0] != day:  # once a day: closed days
            self._baseline = (day, await read_costs(self._engine, baseline_keys(day)))
        today = await read_costs(self._engine, [day])
        found = regressions(day, today, self._baseline[1], cfg.cost_ratio, cfg.cost_min_answers)
        return [
            (f"cost:{day}:{r.model[:120]}", partial(anomaly_texts.cost_text, r, cfg.cost_ratio))
            for r in found
        ]

    async def _forecast(self, buckets: list[BucketStatus]) -> list[tuple[str, Callable[[], str]]]:
        cfg, now = self.config, self._clock.now()
        found = []
        for bucket in buckets:
            if cfg.day_forecast and bucket.level is Level.GLOBAL and bucket.window is Window.DAY:
                day = forecast_day(bucket, now, cfg.tz)
                if day is not None:
                    found.append(day)
        if cfg.month_alert_musd > 0:
            used = await read_month_spend(self._engine, now, cfg.tz)
            month = forecast_month(used, cfg.month_alert_musd, now, cfg.tz)
            if month is not None:
                found.append(month)
        return [
            (f"forecast:{f.window}:{f.key}", partial(anomaly_texts.forecast_text, f, cfg.tz))
            for f in found
        ]
