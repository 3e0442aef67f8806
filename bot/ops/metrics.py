"""Prometheus endpoint (prometheus-client text format, served by aiohttp).

Off unless METRICS_PORT is set; bound to METRICS_HOST (127.0.0.1 by default).
The cascade registers its own counters (calls, fallbacks, skips, cooldowns,
paid-anchor calls, degraded steps, input estimate error) on the same registry;
this module adds, refreshed from the ledger at every scrape:

* ``kopek_budget_utilisation_ratio{level,scope,window}`` — (settled + held) ÷ limit;
* ``kopek_budget_settled_musd`` / ``kopek_budget_held_musd`` per bucket (µUSD);
* ``kopek_budget_exposure_musd`` — sum of outstanding holds (µUSD);
* ``kopek_budget_killed`` — 1 while the global kill switch is tripped;
* ``kopek_budget_outstanding_holds``, ``kopek_budget_operations_today``,
  ``kopek_budget_requests_today`` — holds in flight, operations admitted and LLM
  requests counted today (requests ÷ operations rising alone is a loop);
* ``kopek_budget_refusals_today{reason}`` — ledger refusals today by reason;
* ``kopek_budget_estimate_worst_ratio`` — worst actual ÷ ceiling today;
* ``kopek_llm_circuit_state{provider}`` — each configured key's circuit breaker as this
  process sees it: 0 closed, 1 half-open, 2 open; ``kopek_llm_cooldown_remaining_seconds
  {provider}`` — seconds until it may be tried again;
* ``kopek_refusal_templates_total{template}`` — refusal templates sent by the bot;
* ``kopek_delivery_failures_total{what,reason}`` — answers/templates Telegram refused
  to take (``reason``: ``TOPIC_CLOSED``, ``CHAT_WRITE_FORBIDDEN``, ``not_enough_rights``…,
  see :func:`delivery_failure_reason`).
"""

from __future__ import annotations

from aiohttp import web
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    generate_latest,
)

from bot.ops.dashboard.api import DashboardSite
from bot.ops.health import Readiness, add_health_routes
from bot.ops.http_log import server_log
from budget.ledger import Ledger
from llm.cascade.cascade import Cascade

__all__ = [
    "MetricsServer",
    "delivery_failure_counter",
    "delivery_failure_reason",
    "refusal_counter",
]


#: ``kopek_llm_circuit_state``'s values (an unknown state counts as open).
_CIRCUIT_VALUES = {"closed": 0, "half_open": 1, "open": 2}


def refusal_counter(registry: CollectorRegistry) -> Counter:
    """Counter of refusal templates sent, by template name."""
    return Counter(
        "kopek_refusal_templates", "Refusal templates sent", ["template"], registry=registry
    )


def delivery_failure_counter(registry: CollectorRegistry) -> Counter:
    """Counter of sends Telegram refused, by what was sent and a short reason."""
    return Counter(
        "kopek_delivery_failures",
        "Answers and templates Telegram refused to deliver",
        ["what", "reason"],
        registry=registry,
    )


#: Telegram descriptions (Bot API error texts) → metric label; anything else is
#: labelled by its status (``bad_request``, ``forbidden``, ``other``).
_REASONS = (
    ("topic_closed", "TOPIC_CLOSED"),
    ("topic_deleted", "TOPIC_DELETED"),
    ("message thread not found", "thread_not_found"),
    ("chat_write_forbidden", "CHAT_WRITE_FORBIDDEN"),
    ("not enough rights", "not_enough_rights"),
    ("have no rights", "not_enough_rights"),
    ("chat not found", "chat_not_found"),
    ("blocked by the user", "blocked"),
    ("kicked", "kicked"),
    ("deactivated", "deactivated"),
)


def delivery_failure_reason(description: str, status: int | None) -> str:
    """A bounded label for Telegram's ``description`` of a refused send."""
    folded = description.lower()
    for needle, label in _REASONS:
        if needle.lower() in folded:
            return label
    return {400: "bad_request", 403: "forbidden"}.get(status or 0, "other")


def dropped_counter(registry: CollectorRegistry) -> Counter:
    """Counter of what was dropped on purpose, by reason: ``update_rate`` (a user over
    USER_MAX_UPDATES_PER_MINUTE), ``flood_wait`` (a Bot API call for a chat under a flood
    wait, not sent), ``undecodable_update`` (an update the client could not decode),
    ``webhook_secret`` (a webhook request without the right secret token: 401),
    ``dashboard_auth`` (a dashboard API request without an admin's fresh launch data: 401)."""
    return Counter(
        "kopek_dropped", "Updates and calls dropped on purpose", ["reason"], registry=registry
    )


class MetricsServer:
    """Serves ``/metrics`` (and ``/healthz``, ``/readyz`` when given ``readiness``: the
    health endpoints of polling mode, see :mod:`bot.ops.health`; and the operator
    dashboard when given ``dashboard``: polling mode's, see :mod:`bot.ops.dashboard`).
    Start with :meth:`start`, stop with :meth:`stop`."""

    def __init__(
        self,
        registry: CollectorRegistry,
        host: str,
        port: int,
        ledger: Ledger,
        cascade: Cascade,
        *,
        readiness: Readiness | None = None,
        dashboard: DashboardSite | None = None,
    ) -> None:
        self._readiness = readiness
        self._dashboard = dashboard
        self._registry = registry
        self._host = host
        self._port = port
        self._ledger = ledger
        self._cascade = cascade
        self._runner: web.AppRunner | None = None
        labels = ["level", "scope", "window"]
        self._util = Gauge(
            "kopek_budget_utilisation_ratio", "(settled+held)/limit", labels, registry=registry
        )
        self._settled = Gauge(
            "kopek_budget_settled_musd", "Settled spend, µUSD", labels, registry=registry
        )
        self._held = Gauge(
            "kopek_budget_held_musd", "Outstanding holds, µUSD", labels, registry=registry
        )
        self._exposure = Gauge(
            "kopek_budget_exposure_musd", "Sum of outstanding holds, µUSD", registry=registry
        )
        self._killed = Gauge("kopek_budget_killed", "Global kill switch tripped", registry=registry)
        self._refusals = Gauge(
            "kopek_budget_refusals_today", "Ledger refusals today", ["reason"], registry=registry
        )
        self._holds = Gauge(
            "kopek_budget_outstanding_holds", "Holds granted, not yet settled", registry=registry
        )
        self._ops = Gauge(
            "kopek_budget_operations_today", "Operations admitted today", registry=registry
        )
        self._requests = Gauge(
            "kopek_budget_requests_today", "LLM requests counted today", registry=registry
        )
        self._worst = Gauge(
            "kopek_budget_estimate_worst_ratio", "Worst actual/ceiling today", registry=registry
        )
        self._plan_spend = Gauge(
            "kopek_budget_plan_settled_today_musd",
            "Settled spend today by the user's plan at admission, µUSD",
            ["plan"],
            registry=registry,
        )
        self._plan_refusals = Gauge(
            "kopek_budget_plan_refusals_today",
            "Ledger refusals today by the refused user's plan and reason",
            ["plan", "reason"],
            registry=registry,
        )
        self._circuit = Gauge(
            "kopek_llm_circuit_state",
            "Circuit breaker per key: 0 closed, 1 half-open, 2 open",
            ["provider"],
            registry=registry,
        )
        self._cooldown = Gauge(
            "kopek_llm_cooldown_remaining_seconds",
            "Seconds until a key may be tried again",
            ["provider"],
            registry=registry,
        )

    async def _refresh(self) -> None:
        status = await self._ledger.status()
        for b in status.buckets:
            labels = (b.level.value, b.scope or "-", b.window.value)
            self._settled.labels(*labels).set(b.settled_musd)
            self._held.labels(*labels).set(b.held_musd)
            if b.limit_musd:
                self._util.labels(*labels).set((b.settled_musd + b.held_musd) / b.limit_musd)
        self._exposure.set(status.exposure_musd)
        self._holds.set(status.outstanding_holds)
        self._ops.set(status.operations_today)
        self._requests.set(status.requests_today)
        self._killed.set(1 if status.kill.killed else 0)
        for reason, count in status.refusals_today.items():
            self._refusals.labels(reason).set(count)
        if status.estimate.worst_ratio is not None:
            self._worst.set(status.estimate.worst_ratio)
        for plan, settled in status.by_plan.spend_musd.items():
            self._plan_spend.labels(plan).set(settled)
        for (plan, reason), count in status.by_plan.refusals.items():
            self._plan_refusals.labels(plan, reason).set(count)
        for key in self._cascade.provider_status():
            if key.present:
                self._circuit.labels(key.name).set(_CIRCUIT_VALUES.get(key.state, 2))
                self._cooldown.labels(key.name).set(key.cooldown_remaining_s)

    async def _handle(self, _request: web.Request) -> web.Response:
        await self._refresh()
        body = generate_latest(self._registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def start(self) -> None:
        """Bind and serve."""
        app = web.Application()
        app.router.add_get("/metrics", self._handle)
        if self._readiness is not None:
            add_health_routes(app, lambda: self._readiness)
        if self._dashboard is not None:  # polling mode's dashboard (bot/ops/dashboard)
            self._dashboard.mount(app)
        self._runner = web.AppRunner(
            app, access_log=None, logger=server_log(), shutdown_timeout=1.0
        )
        await self._runner.setup()
        await web.TCPSite(self._runner, self._host, self._port).start()

    async def stop(self) -> None:
        """Stop serving."""
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
