"""The operator's watch: alerts before the caps and spend reports, once a minute.

One APScheduler interval job (every minute; created in :meth:`OpsWatch.start`, never at
import: the house's way, as :class:`scheduler.runner.DigestRunner`) calls
:meth:`OpsWatch.tick`, which reads the ledger's buckets and tells every threshold newly
crossed (:mod:`bot.ops.alerts`), then sends the spend reports that are due
(:mod:`bot.ops.reports`). A tick runs at start too, so a report due while the bot was
down goes out when it starts. Each notice is claimed before it is sent
(:class:`bot.ops.once.NoticeBook`): once across restarts and replicas; every replica
ticks. Time is the injected clock's (docs/decisions/020-clock-rule.md): APScheduler
only wakes the tick, which reads ``clock.now()``.

Decisions: docs/decisions/074-alerts-before-the-caps.md, 075-spend-reports.md,
076-notices-are-claimed-before-they-are-sent.md.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from datetime import datetime, time
from decimal import Decimal
from functools import partial
from typing import Any

from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncEngine

from bot.ops.admin_notices import AdminNotifier
from bot.ops.alerts import LimitAlert, alert_key, burn, crossed, read_buckets, top_spenders
from bot.ops.alerts import window_start as start_of
from bot.ops.anomaly_watch import AnomalyWatch
from bot.ops.kpis import KpiReader
from bot.ops.mutes import AlertMutes
from bot.ops.once import NoticeBook
from bot.ops.reconciliations import ReconcileLog
from bot.ops.reports import SpendReport, due_periods, read_report
from bot.text.ops_texts import alert_text, report_text
from budget.errors import HoldRefused
from budget.kernel.clock import Clock
from budget.kernel.failure_log import FailureLog
from budget.ledger import Ledger
from budget.status import BucketStatus
from llm.cascade.cascade import Cascade

__all__ = ["OpsWatch", "WatchConfig"]

log = logging.getLogger(__name__)

#: Claim keys this process remembers as taken (beyond it, it forgets them all and asks
#: the database again: one more insert each, nothing sent twice).
KNOWN_KEYS_MAX = 4096


@dataclass(frozen=True, slots=True)
class WatchConfig:
    """What the watch does.

    Attributes:
        tz: BUDGET_TZ (windows, report days and times).
        thresholds: ALERT_AT (empty: no alerts).
        report_time: REPORT_TIME (``None``: no reports).
        report_weekly: REPORT_WEEKLY as a weekday index, Monday 0 (``None``: none).
    """

    tz: str
    thresholds: tuple[Decimal, ...]
    report_time: time | None
    report_weekly: int | None


class OpsWatch:
    """Alerts and reports for the admins (see the module docstring).

    Args:
        ledger: the bot's ledger (buckets).
        engine: the database the ledger books in (the books' rows).
        cascade: the keys, in cascade order, and their tiers.
        notices: the claims of notices told once.
        notifier: sends to the admins in their languages.
        kpis: the counts a report ends with.
        clock: the one clock.
        config: see :class:`WatchConfig`.
        anomalies: the anomaly alerts (:mod:`bot.ops.anomaly_watch`; ``None``: none).
        mutes: the alert types muted with ``/alerts`` (``None``: none can be).
        reconciliations: each key's last ``/reconcile``, for the reports (``None``: not said).
    """

    def __init__(
        self,
        *,
        ledger: Ledger,
        engine: AsyncEngine,
        cascade: Cascade,
        notices: NoticeBook,
        notifier: AdminNotifier,
        kpis: KpiReader,
        clock: Clock,
        config: WatchConfig,
        anomalies: AnomalyWatch | None = None,
        mutes: AlertMutes | None = None,
        reconciliations: ReconcileLog | None = None,
    ) -> None:
        self._ledger = ledger
        self._engine = engine
        self._cascade = cascade
        self._notices = notices
        self._notifier = notifier
        self._kpis = kpis
        self._clock = clock
        self.config = config
        self.anomalies = anomalies
        self.mutes = mutes
        self._reconciliations = reconciliations
        if anomalies is not None and mutes is not None:
            anomalies.is_muted = mutes.is_muted
        self._known: set[str] = set()
        self._first_start: datetime | None = None
        self._lock = asyncio.Lock()
        self._scheduler: Any = None
        self._failures = FailureLog(log, "the operator's watch (alerts, reports)", logging.WARNING)

    def __repr__(self) -> str:
        return f"OpsWatch(tz={self.config.tz!r}, thresholds={list(self.config.thresholds)})"

    async def start(self) -> None:
        """Start the once-a-minute job and tick now (a report missed while down goes out)."""
        from apscheduler.schedulers.asyncio import AsyncIOScheduler
        from apscheduler.triggers.interval import IntervalTrigger

        scheduler = AsyncIOScheduler(timezone="UTC")
        scheduler.add_job(
            self.tick,
            IntervalTrigger(minutes=1, timezone="UTC"),
            id="ops-watch",
            max_instances=1,
            coalesce=True,
            misfire_grace_time=30,
        )
        scheduler.start()
        self._scheduler = scheduler
        try:  # recorded at the first start, before any tick (a failure: the tick's turn)
            await self._started()
        except SQLAlchemyError as exc:
            self._failures.failed(exc)
        await self.tick()

    async def _started(self) -> datetime:
        """The bot's first start on this database (read once, then remembered)."""
        if self._first_start is None:
            self._first_start = await self._notices.first_start()
        return self._first_start

    async def stop(self) -> None:
        """Stop the job (a tick under way finishes on its own)."""
        if self._scheduler is not None:
            self._scheduler.shutdown(wait=False)
            self._scheduler = None

    async def tick(self) -> int:
        """Tell the thresholds newly crossed, then send the reports due; returns how many
        notices were sent. Never raises: a ledger or database failure is logged (once
        per kind) and the next tick tries again."""
        if not self._notifier.admins:
            return 0
        async with self._lock:
            try:
                if self.mutes is not None:
                    await self.mutes.refresh()
                buckets = await read_buckets(self._ledger)
                sent = len(await self.check_alerts(buckets))
                if self.anomalies is not None:
                    sent += await self.anomalies.check(self._claim, self._notifier.tell, buckets)
                sent += len(await self.send_reports())
            except (HoldRefused, SQLAlchemyError, OSError) as exc:
                self._failures.failed(exc)
                return 0
            self._failures.ok()
            return sent

    async def _claim(self, key: str, kind: str) -> bool:
        if key in self._known:
            return False
        if len(self._known) >= KNOWN_KEYS_MAX:
            self._known.clear()
        won = await self._notices.claim(key, kind)
        self._known.add(key)
        return won

    async def check_alerts(self, buckets: list[BucketStatus] | None = None) -> list[LimitAlert]:
        """Claim every threshold crossed now of ``buckets`` (``None``: read them) and
        tell the highest newly crossed one of each limit; returns the alerts sent."""
        if not self.config.thresholds or (self.mutes and self.mutes.is_muted("limits")):
            return []
        sent = []
        for bucket in await read_buckets(self._ledger) if buckets is None else buckets:
            reached = crossed(bucket, self.config.thresholds)
            if all(alert_key(bucket, t) in self._known for t in reached):
                continue  # nothing crossed, or all told already
            alert = await self._alert(bucket, reached[-1])  # read before the claim
            won = [t for t in reached if await self._claim(alert_key(bucket, t), "alert")]
            if won and won[-1] == reached[-1]:
                await self._notifier.tell(partial(alert_text, alert, self.config.tz))
                log.warning(
                    "spend alert: %s %s %s at %s of its limit",
                    bucket.level.value,
                    bucket.scope,
                    bucket.window.value,
                    reached[-1],
                )
                sent.append(alert)
        return sent

    async def _alert(self, bucket: BucketStatus, threshold: Decimal) -> LimitAlert:
        now, tz = self._clock.now(), self.config.tz
        rate, projected = burn(bucket, now, tz)
        assert bucket.limit_musd is not None  # crossed() finds none without a limit
        return LimitAlert(
            level=bucket.level,
            scope=bucket.scope,
            window=bucket.window,
            threshold=threshold,
            settled_musd=bucket.settled_musd,
            held_musd=bucket.held_musd,
            limit_musd=bucket.limit_musd,
            burn_musd_per_hour=rate,
            window_start=start_of(bucket.window, now, tz),
            resets_at=bucket.resets_at,
            projected_at=projected,
            top=await top_spenders(self._engine, bucket, now, tz),
        )

    async def send_reports(self) -> list[SpendReport]:
        """Send each report due now that no process has sent, but one of a period that
        ended before the bot's first start (a fresh install's "yesterday"); returns
        those sent."""
        cfg = self.config
        now = self._clock.now()
        sent = []
        for period in due_periods(now, cfg.tz, cfg.report_time, cfg.report_weekly):
            if period.key in self._known:
                continue
            if period.period().end <= await self._started():
                continue  # it ended before the bot first started: nothing to report
            keys = [p for p in self._cascade.provider_status() if p.present]
            report = await read_report(
                self._engine, period, [p.name for p in keys], {p.name: p.paid for p in keys}
            )
            span = period.period()
            report.kpis = await self._kpis.read(span.start, span.end)
            if self._reconciliations is not None:
                report.reconciliations = await self._reconciliations.read([p.name for p in keys])
            if not await self._claim(period.key, "report"):  # read first: a failed read
                continue  # leaves the report to the next tick
            await self._notifier.tell(partial(report_text, report))
            log.info("spend report %s sent", period.key)
            sent.append(report)
        return sent
