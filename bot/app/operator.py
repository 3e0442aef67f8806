"""The operator's parts of the composition root (:func:`bot.app.factory.create_app`):
the dashboard's view and site, the watch behind the alerts and reports, and the books
desk (exports, reconciliation)."""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import Counter
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from bot.app.wiring import admin_language, alerts_off_by_setting, anomaly_config, watch_config
from bot.handlers.books import BooksDesk
from bot.ops.admin_notices import AdminNotifier
from bot.ops.anomaly_watch import AnomalyWatch
from bot.ops.dashboard import DashboardSite, OperatorView, build_operator_view, build_site
from bot.ops.kpis import KpiReader
from bot.ops.mutes import AlertMutes
from bot.ops.once import NoticeBook
from bot.ops.reconciliations import ReconcileLog
from bot.ops.watch import OpsWatch
from bot.settings import Settings
from budget.kernel.clock import Clock
from budget.ledger import Ledger
from budget.policy.money import usd_to_musd
from llm.cascade.cascade import Cascade
from scheduler.profiles import ProfileRepository

__all__ = ["Operator", "books_desk", "build_operator", "dashboard_site"]


@dataclass(frozen=True, slots=True)
class Operator:
    """The operator's figures: the dashboard's documents (also /budget chart's picture)
    and the watch behind the alerts before the caps, the anomaly alerts and the spend
    reports; the alert types' mutes (/alerts) and the log of reconciliations the reports
    and the books desk share."""

    view: OperatorView
    watch: OpsWatch
    mutes: AlertMutes
    reconciliations: ReconcileLog


def build_operator(
    settings: Settings,
    clock: Clock,
    sessions: async_sessionmaker[AsyncSession],
    ledger: Ledger,
    engine: AsyncEngine,
    cascade: Cascade,
    notifier: AdminNotifier,
    repo: ProfileRepository,
) -> Operator:
    """The operator's view and watch (``bot/ops/watch.py``), one KPI reader for both;
    the admins' notices in each admin's language, each alert type muted or not."""
    kpis = KpiReader(sessions, clock, clock.monotonic())
    notifier.language_of = admin_language(repo)
    mutes = AlertMutes(sessions, clock, alerts_off_by_setting(settings))
    reconciliations = ReconcileLog(sessions, clock)
    watch = OpsWatch(
        ledger=ledger,
        engine=engine,
        cascade=cascade,
        notices=NoticeBook(sessions, clock),
        notifier=notifier,
        kpis=kpis,
        clock=clock,
        config=watch_config(settings),
        anomalies=AnomalyWatch(
            engine=engine, cascade=cascade, clock=clock, config=anomaly_config(settings)
        ),
        mutes=mutes,
        reconciliations=reconciliations,
    )
    view = build_operator_view(ledger, cascade, engine, clock, settings.budget_tz, kpis)
    return Operator(view, watch, mutes, reconciliations)


def dashboard_site(
    settings: Settings, clock: Clock, ledger: Ledger, view: OperatorView, dropped: Counter
) -> DashboardSite | None:
    """The operator dashboard's routes (``None`` without ``DASHBOARD_URL``)."""
    if settings.dashboard_path is None:
        return None
    return build_site(
        view,
        ledger,
        token=settings.bot_token,
        admin_ids=settings.admin_ids,
        clock=clock,
        path=settings.dashboard_path,
        max_age_s=settings.dashboard_auth_max_age_seconds,
        on_refused=lambda: dropped.labels("dashboard_auth").inc(),
    )


def books_desk(
    settings: Settings, engine: AsyncEngine, ledger: Ledger, reconciliations: ReconcileLog
) -> BooksDesk:
    """What the books commands share (exports, reconciliation and its log)."""
    return BooksDesk(
        engine=engine,
        ledger=ledger,
        budget_tz=settings.budget_tz,
        billing_tz=settings.billing_tz,
        tolerance_musd=usd_to_musd(settings.reconcile_tolerance_usd) or 0,
        keys={name: not ledger.prices.is_free(name) for name in settings.provider_keys()},
        reconciliations=reconciliations,
    )
