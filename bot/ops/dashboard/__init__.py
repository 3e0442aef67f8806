"""The operator dashboard: a Telegram Mini App served by the bot's own HTTP server.

An admin sends ``/dashboard`` (:mod:`bot.handlers.dashboard`) and opens it with the
``web_app`` button; the page (``static/``: HTML, a script, styles and the vendored uPlot
charting library, no CDN) asks the JSON API every few seconds with the launch data
Telegram signed for it. The parts:

* :mod:`bot.ops.dashboard.auth` — the launch-data check (Telegram's documented HMAC, its
  age, ``ADMIN_IDS``) and the tokens of the second confirmation;
* :mod:`bot.ops.dashboard.view` — the JSON documents, from the calls ``/budget`` makes;
* :mod:`bot.ops.dashboard.series` — spend per hour and per day by provider, free calls
  apart, from the books (also ``/budget chart``'s picture);
* :mod:`bot.ops.dashboard.api` — the aiohttp routes, their headers and limits.

Which server: the webhook server in webhook mode (:mod:`bot.app.webhook`), the metrics
server (``METRICS_PORT``, :mod:`bot.ops.metrics`) in polling mode; either way behind the
operator's TLS proxy at ``DASHBOARD_URL`` (docs/deploy.md). Decisions:
docs/decisions/070-operator-dashboard.md, 071-dashboard-figures.md.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from pydantic import SecretStr
from sqlalchemy.ext.asyncio import AsyncEngine

from bot.ops.dashboard.api import CONFIRM_TTL_S, DashboardSite
from bot.ops.dashboard.auth import Confirmations, InitDataCheck
from bot.ops.dashboard.series import SpendBook
from bot.ops.dashboard.view import OperatorView
from bot.ops.kpis import KpiReader
from budget.kernel.clock import Clock
from budget.ledger import Ledger
from llm.cascade.cascade import Cascade

__all__ = ["DashboardSite", "OperatorView", "build_operator_view", "build_site"]


def build_operator_view(
    ledger: Ledger,
    cascade: Cascade,
    engine: AsyncEngine,
    clock: Clock,
    tz: str,
    kpis: KpiReader | None = None,
) -> OperatorView:
    """The documents the dashboard and ``/budget chart`` read (built whether or not the
    dashboard is served); ``kpis``: the counts of the ``kpis`` panel."""
    order: Sequence[str] = [p.name for p in cascade.provider_status()]
    return OperatorView(ledger, cascade, SpendBook(engine, tz, clock, order), tz, kpis)


def build_site(
    view: OperatorView,
    ledger: Ledger,
    *,
    token: SecretStr,
    admin_ids: frozenset[int],
    clock: Clock,
    path: str,
    max_age_s: float,
    on_refused: Callable[[], None] | None = None,
) -> DashboardSite:
    """The dashboard's routes for the bot token ``token`` (the key Telegram signs the
    launch data with), served under ``path`` (DASHBOARD_URL's)."""
    return DashboardSite(
        view,
        InitDataCheck(token, admin_ids, clock, max_age_s),
        Confirmations(token, clock, ttl_s=CONFIRM_TTL_S),
        ledger,
        path,
        on_refused,
    )
