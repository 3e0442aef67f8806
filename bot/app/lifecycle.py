"""The running bot's lifecycle: :class:`App` holds everything :func:`bot.app.factory.create_app`
built, and its start-up and shutdown hooks (registered on the dispatcher by
:func:`bot.app.polling.run`, called by :func:`bot.app.webhook.serve_webhook` in webhook mode).

Start-up (``on_startup``): in polling mode getWebhookInfo, and a webhook that is set
(a fleet of webhook replicas serves this token) stops the start with :class:`WebhookIsSet`
— polling never deletes it (``python -m bot delete-webhook`` does, deliberately); in
webhook mode setWebhook (idempotent: every replica sets the same URL,
secret, ``max_connections`` and ``allowed_updates``, keeping pending updates);
setMyCommands, ledger start (sweeps holds left by a previous process), price card
logged, users whose message was lost in a crash are asked to resend (on a shared
database also later, whenever another process is found dead), the outbox, the
digest scheduler, the operator's watch (alerts before the caps, spend reports:
:mod:`bot.ops.watch`) and the metrics endpoint start; ``/readyz`` turns ready. Shutdown
(``on_shutdown``): ``/readyz`` turns 503, no new work, in-flight chat calls get
SHUTDOWN_GRACE_SECONDS and are then cancelled (their holds settled by the ledger's rule
for interrupted calls), the scheduler stops, the ledger and engine close. Stopping never
deletes the webhook (other replicas serve it).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import httpx
from aiogram import Bot, Dispatcher
from aiogram.exceptions import TelegramAPIError
from aiogram.types import BotCommand, Update
from aiogram.utils.i18n import I18n
from prometheus_client import CollectorRegistry, Counter
from sqlalchemy.ext.asyncio import AsyncEngine

from bot.access.refunds import WalletRefunds
from bot.app import heap
from bot.app.intake_window import IntakeWindow, LagProbe
from bot.app.media_wiring import MediaParts
from bot.app.start_waits import StartWaits
from bot.chat.delivery import send_text
from bot.chat.outbox import Outbox
from bot.chat.service import ChatService
from bot.chat.streaming.registry import StreamRegistry
from bot.middlewares.topics import in_topic
from bot.ops.admin_notices import AdminNotifier
from bot.ops.dashboard.api import DashboardSite
from bot.ops.health import Readiness
from bot.ops.limit_overrides import runtime_overrides
from bot.ops.metrics import MetricsServer
from bot.ops.retention import RetentionJob
from bot.ops.schema_watch import SchemaWatch
from bot.ops.shedding import Shedding
from bot.ops.watch import OpsWatch
from bot.settings import Settings
from bot.storage.repos import Intake
from bot.text import templates
from bot.text.commands import menu_commands
from bot.text.i18n import SUPPORTED_LANGUAGES, in_locale
from budget.kernel.clock import Clock
from budget.kernel.failure_log import FailureLog
from budget.kernel.tasks import cancel_and_wait
from budget.ledger import Ledger
from budget.pricing.prices import PriceCard
from llm.cascade.cascade import Cascade
from scheduler.runner import DigestRunner

__all__ = ["App", "WebhookIsSet"]

log = logging.getLogger("bot.app.factory")  # the name before the split: log lines unchanged

#: Seconds the shutdown gives messages whose chat part has ended to send their answer
#: and record their outcome (a send and one write) before storage is closed.
OUTCOME_WAIT_S = 5.0


class WebhookIsSet(Exception):
    """A polling process found a webhook registered for its token: webhook replicas
    serve it, and polling would need to delete it and take every update from them.

    Attributes:
        host: the host of the registered URL (never its path, which may hold a secret).
    """

    def __init__(self, host: str) -> None:
        self.host = host
        super().__init__(
            f"a webhook is set for this token (https://{host}/…): webhook replicas serve it, "
            "so polling would take their updates; set WEBHOOK_URL to join them as a replica, "
            "or remove the webhook first with: python -m bot delete-webhook"
        )


@dataclass(eq=False)
class App:
    """Everything the running bot holds; built by :func:`create_app`."""

    settings: Settings
    clock: Clock
    engine: AsyncEngine
    bot: Bot
    dispatcher: Dispatcher
    i18n: I18n
    chat: ChatService
    ledger: Ledger
    prices: PriceCard
    cascade: Cascade
    runner: DigestRunner
    intake: Intake
    http: httpx.AsyncClient
    feed_http: httpx.AsyncClient
    registry: CollectorRegistry
    notifier: AdminNotifier
    outbox: Outbox
    streams: StreamRegistry
    readiness: Readiness
    dropped: Counter
    schema: SchemaWatch
    #: True for a control that only stops work (an admin's /kill, /stop, Stop; see
    #: :meth:`bot.middlewares.rate.UpdateRateMiddleware.is_control`): the webhook lets it skip the
    #: wait for an intake slot.
    is_control: Callable[[Update], Awaitable[bool]]
    #: the operator dashboard's routes (DASHBOARD_URL set), served by the webhook server
    #: or, in polling mode, the metrics server (:mod:`bot.ops.dashboard`)
    dashboard: DashboardSite | None = None
    #: RETENTION_DAYS' daily pruning (``None``: everything is kept)
    retention: RetentionJob | None = None
    #: SHED_ORDER's features switched off near the global limits
    shedding: Shedding | None = None
    #: voice notes, photos, documents, links (``None``: an app built without them)
    media: MediaParts | None = None
    #: the alerts before the caps and the spend reports (:mod:`bot.ops.watch`)
    ops_watch: OpsWatch | None = None
    #: completes the wallet refunds left pending (:mod:`bot.access.refunds`)
    refunds: WalletRefunds | None = None
    #: how many updates are handled at once (INTAKE_LAG_TARGET_MS, :mod:`bot.app.intake_window`):
    #: polling's first update middleware and the webhook's slots; its probe (``None``: fixed)
    intake_window: IntakeWindow = field(default_factory=lambda: IntakeWindow(50))
    lag_probe: LagProbe | None = None
    _metrics: MetricsServer | None = None
    _lost_watch: asyncio.Task[None] | None = None
    #: set once this process was taken for dead by another (:mod:`bot.session.fence`)
    fenced: asyncio.Event = field(default_factory=asyncio.Event)
    _stopping: set[asyncio.Task[None]] = field(default_factory=set)

    def fence(self) -> None:
        """This process was taken for dead (the ledger store's callback, once): take
        no more updates (``/readyz`` and the webhook answer 503; polling stops) — the
        run then ends with :class:`budget.errors.ProcessFenced` (exit code 1)."""
        self.readiness.mark_stopping()
        self.fenced.set()
        if not self.settings.webhook_mode:
            task = asyncio.create_task(self._stop_polling(), name="fenced-stop-polling")
            self._stopping.add(task)
            task.add_done_callback(self._stopping.discard)

    async def _stop_polling(self) -> None:
        with contextlib.suppress(RuntimeError):  # polling not started (or stopped)
            await self.dispatcher.stop_polling()

    async def _set_commands(self, waits: StartWaits) -> None:
        """The command menu (:data:`bot.text.commands.COMMANDS`, the one list ``/help``
        is made from too) in English (the default) and in every other language."""
        for language in SUPPORTED_LANGUAGES:
            with in_locale(self.i18n, language):
                commands = [BotCommand(command=c, description=d) for c, d in menu_commands()]
            code = None if language == "en" else language

            async def put(commands: list[BotCommand] = commands, code: str | None = code) -> bool:
                return await self.bot.set_my_commands(commands, language_code=code)

            await waits.call("setMyCommands", put)

    async def on_startup(self) -> None:
        """The schema first (another process may have migrated it past this code since
        this one's migrations ran: :class:`bot.storage.migrate.SchemaMismatch` is raised, nothing
        is started), then Telegram (a refused token or an unreachable API fails fast,
        before anything else is started; a 429 is waited out within
        :data:`bot.app.start_waits.START_WAIT_S`, else
        :class:`bot.app.start_waits.StartFloodWait`), then the ledger (sweeps a previous process's
        holds), then the resend notices, the digest jobs, the schema watch and metrics."""
        problem = await self.schema.check()
        if problem is not None:
            raise problem
        waits = StartWaits(self.clock)  # replicas starting together share one limit
        if self.settings.webhook_mode:
            await waits.call("setWebhook", self._set_webhook)
        else:
            await self._refuse_webhook()
        await self._set_commands(waits)
        if self.lag_probe is not None:
            self.lag_probe.start()
        swept = await self.ledger.start()
        if swept:
            log.warning("expired %d holds left by a previous process", swept)
        for line in self.prices.describe(self.clock.now()):
            log.info("price card: %s", line)
        if not self.cascade.anchor:
            log.warning("no DEEPSEEK_API_KEY: running free-only (no paid anchor)")
        overrides = runtime_overrides(await self.ledger.status(), self.ledger.config)
        if overrides:  # kept in the database: they outlive every restart (docs/admin.md)
            log.warning("runtime limits override the settings: %s", "; ".join(overrides))
        await self._notify_lost()
        if self.streams.kill_watch is not None:  # /kill hard on another replica
            await self.streams.kill_watch.start()
        if self.streams.stop_relay is not None:  # Stop pressed on another replica
            await self.streams.stop_relay.start()
        if self.intake.shared:
            self._lost_watch = asyncio.create_task(self._watch_lost(), name="intake-lost")
        await self.outbox.start()
        if self.refunds is not None:  # after the ledger's start: its sweep finds the dead
            self.refunds.start()
        if self.media is not None:
            await self.media.start()
        await self.runner.start()
        if self.ops_watch is not None:
            await self.ops_watch.start()
        self.schema.start()
        if self.retention is not None:
            self.retention.start()
        if self.shedding is not None:
            self.shedding.start()
        if self.settings.metrics_port is not None:
            self._metrics = MetricsServer(
                self.registry,
                self.settings.metrics_host,
                self.settings.metrics_port,
                self.ledger,
                self.cascade,
                readiness=self.readiness,
                dashboard=None if self.settings.webhook_mode else self.dashboard,
            )
            await self._metrics.start()
        self.readiness.mark_started()
        if heap.settle():  # python -m bot only: the start's objects leave the collector's walks
            log.info("garbage collector settled: %d objects frozen", gc.get_freeze_count())
        log.info("kopek started")

    async def _refuse_webhook(self) -> None:
        """Polling mode: raise :class:`WebhookIsSet` when a webhook is registered. None
        set: nothing to delete, polling may start (an unconditional deleteWebhook here
        silently took every update from a running fleet of webhook replicas)."""
        info = await self.bot.get_webhook_info()
        if info.url:
            raise WebhookIsSet(urlsplit(info.url).hostname or "?")

    async def _set_webhook(self) -> None:
        """Register the webhook. Every replica sets the same values at its start, so
        whichever starts last leaves them as configured; pending updates are kept.
        (``getWebhookInfo`` cannot show the secret, so comparing first could not tell a
        changed ``WEBHOOK_SECRET``: the call is simply made.)"""
        s = self.settings
        assert s.webhook_url is not None and s.webhook_secret is not None
        await self.bot.set_webhook(
            url=s.webhook_url,
            secret_token=s.webhook_secret.get_secret_value(),
            max_connections=s.webhook_max_connections,
            allowed_updates=self.dispatcher.resolve_used_update_types(),
            drop_pending_updates=False,
        )
        log.info("webhook set (max_connections %d)", s.webhook_max_connections)

    async def _watch_lost(self) -> None:
        """Several processes on one database: every PROCESS_HEARTBEAT_SECONDS, ask the
        users whose message a process that died had taken in to resend it (each message
        goes to one process, see :meth:`bot.storage.repos.Intake.take_lost`)."""
        failures = FailureLog(log, "looking for messages of a dead process")
        while True:
            await self.clock.sleep(self.settings.process_heartbeat_seconds)
            try:
                await self._notify_lost()
            except Exception as exc:  # noqa: BLE001 - the next round tries again
                failures.failed(exc)  # a database outage: one line per kind, not per round
            else:
                failures.ok()

    async def _notify_lost(self) -> None:
        found = await self.intake.take_lost(self.clock.now())
        if found:
            log.warning(
                "%d messages taken in by a process that stopped unanswered: asking to resend",
                len(found),
            )
        for lost in found:
            with in_locale(self.i18n, lost.language):
                text = templates.lost_text()
            try:
                with in_topic(lost.chat_id, lost.thread_id):  # a reply to the message
                    await send_text(
                        self.bot, lost.chat_id, text, clock=self.clock, reply_to=lost.message_id
                    )
            except TelegramAPIError as exc:
                log.warning("could not tell chat %s to resend: %s", lost.chat_id, exc.message)

    async def _stop_refunds(self) -> None:
        if self.refunds is not None:
            await self.refunds.stop()

    async def _stop_ops_watch(self) -> None:
        if self.ops_watch is not None:
            await self.ops_watch.stop()

    async def _stop_watch(self) -> None:
        await cancel_and_wait(self._lost_watch)
        self._lost_watch = None

    async def close_after_failed_start(self) -> None:
        """Release what :func:`create_app` opened when polling never started."""
        await self.schema.stop()
        if self.retention is not None:
            await self.retention.stop()
        if self.shedding is not None:
            await self.shedding.stop()
        await self._stop_watch()
        if self.streams.kill_watch is not None:
            await self.streams.kill_watch.stop()
        if self.streams.stop_relay is not None:
            await self.streams.stop_relay.stop()
        await self.outbox.stop()
        await self._stop_refunds()
        await self._stop_ops_watch()
        await self.runner.stop()
        if self.lag_probe is not None:
            await self.lag_probe.stop()
        if self.media is not None:
            await self.media.close()
        await self.cascade.aclose()
        await self.http.aclose()
        await self.feed_http.aclose()
        await self.ledger.close()
        await self.engine.dispose()
        await self.bot.session.close()

    async def on_shutdown(self) -> None:
        """Drain chat work within the grace period (streams still running then are
        stopped: settled on what they received, their text so far sent, marked), stop
        jobs, close storage."""
        self.readiness.mark_stopping()
        log.info("stopping: in-flight chat operations=%d", self.chat.in_flight)
        await self.chat.drain(
            # a fenced process drains nothing: its work was taken over (bot/session/fence.py)
            0.0 if self.fenced.is_set() else self.settings.shutdown_grace_seconds,
            stop_streams=lambda: self.streams.stop_all("shutdown"),
        )
        # answers sent after the chat's part (a send, an outbox row) record their
        # outcomes before storage closes (the ledger's writer takes those writes)
        if left := await self.intake.wait_open(OUTCOME_WAIT_S, self.clock):
            log.warning("%d messages closed without their outcome recorded", left)
        await self.schema.stop()
        if self.retention is not None:
            await self.retention.stop()
        if self.shedding is not None:
            await self.shedding.stop()
        await self._stop_watch()
        if self.streams.kill_watch is not None:
            await self.streams.kill_watch.stop()
        if self.streams.stop_relay is not None:
            await self.streams.stop_relay.stop()
        await self.outbox.stop()
        await self._stop_refunds()
        await self._stop_ops_watch()
        await self.runner.stop()
        if self.lag_probe is not None:
            await self.lag_probe.stop()
        if self._metrics is not None:
            await self._metrics.stop()
        if self.media is not None:
            await self.media.close()
        await self.cascade.aclose()
        await self.http.aclose()
        await self.feed_http.aclose()
        await self.ledger.close()
        await self.engine.dispose()
        log.info("kopek stopped")
