"""The composition root: the one place that builds everything from :class:`Settings`.

Nothing is created at import time. :func:`create_app` wires the engine, ledger,
cascade, digest runner, aiogram bot and dispatcher; :func:`run` applies migrations,
starts polling and returns the exit code once a SIGTERM/SIGINT has drained the work.

Start-up (``on_startup``): ledger start (sweeps holds left by a previous process),
price card logged, deleteWebhook *without* dropping pending updates, setMyCommands,
users whose message was lost in a crash are asked to resend, the digest scheduler and
the metrics endpoint start. Shutdown (``on_shutdown``): no new work, in-flight chat
calls get SHUTDOWN_GRACE_SECONDS and are then cancelled (their holds settled by the
ledger's rule for interrupted calls), the scheduler stops, the ledger and engine close.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import sqlite3
import sys
from dataclasses import dataclass
from pathlib import Path

import httpx
from aiogram import Bot, Dispatcher
from aiogram.client.session.aiohttp import AiohttpSession
from aiogram.client.telegram import TelegramAPIServer
from aiogram.exceptions import (
    ClientDecodeError,
    TelegramAPIError,
    TelegramNetworkError,
    TelegramUnauthorizedError,
)
from aiogram.types import BotCommand
from aiogram.utils.i18n import I18n
from prometheus_client import CollectorRegistry
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncEngine, async_sessionmaker

from bot import templates
from bot.admin_notify import AdminNotifier
from bot.chat import ChatConfig, ChatService
from bot.context import WorkflowData
from bot.delivery import send_text
from bot.digests import TelegramDeliverer
from bot.i18n import create_i18n, in_locale
from bot.logs import redact
from bot.metrics import MetricsServer, delivery_failure_counter, dropped_counter, refusal_counter
from bot.middlewares import (
    ArrivalOrderMiddleware,
    IntakeMiddleware,
    LocaleMiddleware,
    ProfileMiddleware,
)
from bot.migrate import migrate
from bot.outbox import Outbox
from bot.paste import PasteJoiner
from bot.ratelimit import UpdateRateMiddleware
from bot.responses import PinResponseModels
from bot.routers.admin import AdminView, create_admin_router
from bot.routers.books import BooksDesk, create_books_router
from bot.routers.chat import create_chat_router
from bot.routers.common import create_common_router, create_fallback_router
from bot.routers.digests import create_digest_router
from bot.routers.errors import create_error_router
from bot.routers.me import create_me_router
from bot.routers.stream import create_stream_router
from bot.sendgate import FloodGate
from bot.settings import Settings
from bot.store import History, Intake
from bot.streaming import StreamConfig, StreamMetrics, StreamRegistry
from bot.topics import TopicMiddleware, TopicRequestMiddleware, in_topic
from bot.updates import SkipUndecodableUpdates
from budget import instance_lock
from budget.clock import Clock, SystemClock
from budget.config import LedgerConfig, OperationCaps
from budget.db import create_engine, sqlite_path
from budget.errors import BudgetConfigError
from budget.ledger import Ledger
from budget.money import usd, usd_to_musd
from budget.prices import PriceCard, ProviderModel, parse_overrides
from budget.stops import StopBook
from budget.tokens import TokenCounter
from budget.types import Origin
from llm.cascade import Cascade, CascadeConfig
from llm.factory import ProviderSpec, build_cascade, provider_specs
from llm.limits import max_output_tokens
from llm.names import CASCADE_ORDER
from scheduler.feeds import AddressGuard, FeedClient, GuardedTransport
from scheduler.fetch import Fetchers
from scheduler.profiles import ProfileRepository
from scheduler.runner import DigestConfig, DigestRunner
from scheduler.service import DigestService
from scheduler.tme import TmeClient

__all__ = ["App", "create_app", "migrate", "run"]

log = logging.getLogger(__name__)

USER_COMMANDS = [
    ("start", "Start"),
    ("help", "Help"),
    ("me", "My spend and limits"),
    ("reset", "Forget the conversation"),
    ("sub", "Subscribe to a channel digest"),
    ("subs", "My subscriptions"),
    ("tz", "My timezone"),
    ("lang", "Language"),
]


def ledger_config(settings: Settings) -> LedgerConfig:
    """Settings → the ledger's own config (USD → µUSD)."""
    caps: dict[str, int] = {}
    if settings.deepseek_daily_cap_usd is not None:
        caps["deepseek"] = usd_to_musd(settings.deepseek_daily_cap_usd) or 0
    digest_requests = max(8, settings.digest_max_posts + 4)
    return LedgerConfig(
        tz=settings.budget_tz,
        global_daily_musd=usd_to_musd(settings.budget_global_daily_usd),
        global_hourly_musd=usd_to_musd(settings.budget_global_hourly_usd),
        user_daily_musd=usd_to_musd(settings.budget_user_daily_usd),
        user_hourly_musd=usd_to_musd(settings.budget_user_hourly_usd),
        team_daily_musd=usd_to_musd(settings.budget_team_daily_usd),
        team_hourly_musd=usd_to_musd(settings.budget_team_hourly_usd),
        provider_daily_caps_musd=caps,
        hold_ttl_s=settings.hold_ttl_seconds,
        max_call_s=settings.provider_timeout_seconds,
        operation_caps={
            Origin.CHAT: OperationCaps(
                max_musd=usd_to_musd(settings.operation_max_usd) or 0,
                max_requests=settings.operation_max_requests,
            ),
            Origin.DIGEST: OperationCaps(
                max_musd=usd_to_musd(settings.digest_max_usd) or 0,
                max_requests=digest_requests,
            ),
        },
        user_max_inflight=settings.user_max_inflight,
        user_max_per_minute=settings.user_max_per_minute,
        user_daily_messages=settings.user_daily_messages,
        auto_kill_window_s=settings.auto_kill_window_minutes * 60.0,
        process_heartbeat_s=settings.process_heartbeat_seconds,
        process_dead_after_s=settings.process_dead_after_seconds,
        auto_kill_fraction=settings.auto_kill_fraction,
        auto_kill_musd_per_window=usd_to_musd(settings.auto_kill_usd_per_window),
    )


def provider_models(settings: Settings) -> list[ProviderModel]:
    """Every (provider, model, tier) the cascade may call, for the price card."""
    out: list[ProviderModel] = []
    for name in settings.provider_keys():
        provider = settings.provider(name)
        for model in dict.fromkeys((provider.model, provider.cheap_model)):
            out.append(ProviderModel(provider=name, model=model, tier=provider.tier))
    return out


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
    _metrics: MetricsServer | None = None

    async def on_startup(self) -> None:
        """Telegram first (a refused token or an unreachable API fails fast, before
        anything else is started), then the ledger (sweeps a previous process's holds),
        then the resend notices, the digest jobs and metrics."""
        await self.bot.delete_webhook(drop_pending_updates=False)
        await self.bot.set_my_commands(
            [BotCommand(command=c, description=d) for c, d in USER_COMMANDS]
        )
        swept = await self.ledger.start()
        if swept:
            log.warning("expired %d holds left by a previous process", swept)
        for line in self.prices.describe(self.clock.now()):
            log.info("price card: %s", line)
        if not self.cascade.anchor:
            log.warning("no DEEPSEEK_API_KEY: running free-only (no paid anchor)")
        await self._notify_lost()
        await self.outbox.start()
        await self.runner.start()
        if self.settings.metrics_port is not None:
            self._metrics = MetricsServer(
                self.registry,
                self.settings.metrics_host,
                self.settings.metrics_port,
                self.ledger,
                self.cascade,
            )
            await self._metrics.start()
        log.info("kopek started")

    async def _notify_lost(self) -> None:
        for lost in await self.intake.take_lost(self.clock.now()):
            with in_locale(self.i18n, lost.language):
                text = templates.lost_text()
            try:
                with in_topic(lost.chat_id, lost.thread_id):
                    await send_text(self.bot, lost.chat_id, text, clock=self.clock)
            except TelegramAPIError as exc:
                log.warning("could not tell chat %s to resend: %s", lost.chat_id, exc.message)

    async def close_after_failed_start(self) -> None:
        """Release what :func:`create_app` opened when polling never started."""
        await self.outbox.stop()
        await self.runner.stop()
        await self.cascade.aclose()
        await self.http.aclose()
        await self.feed_http.aclose()
        await self.ledger.close()
        await self.engine.dispose()
        await self.bot.session.close()

    async def on_shutdown(self) -> None:
        """Drain chat work within the grace period, stop jobs, close storage."""
        log.info("stopping: in-flight chat operations=%d", self.chat.in_flight)
        await self.chat.drain(self.settings.shutdown_grace_seconds)
        await self.outbox.stop()
        await self.runner.stop()
        if self._metrics is not None:
            await self._metrics.stop()
        await self.cascade.aclose()
        await self.http.aclose()
        await self.feed_http.aclose()
        await self.ledger.close()
        await self.engine.dispose()
        log.info("kopek stopped")


class _Profiles:
    """Adapter: ``scheduler.profiles.ProfileRepository`` as the bot's :class:`ProfileStore`."""

    def __init__(self, repo: ProfileRepository) -> None:
        self._repo = repo

    async def touch(
        self, user_id: int, chat_id: int, telegram_language: str | None
    ) -> tuple[str | None, str | None]:
        # A user's private chat id equals their user id; digests go there.
        profile = await self._repo.get_or_create(user_id, user_id, telegram_language)
        if not profile.active:
            await self._repo.mark_active(user_id)
        return profile.language, profile.tz

    async def set_tz(self, user_id: int, tz: str) -> None:
        await self._repo.set_tz(user_id, tz)

    async def set_language(self, user_id: int, language: str) -> None:
        await self._repo.set_language(user_id, language)


def _cascade_config(settings: Settings) -> CascadeConfig:
    return CascadeConfig(
        timeout_s=settings.provider_timeout_seconds,
        cooldown_s=settings.cooldown_seconds,
        cooldown_max_s=settings.cooldown_max_seconds,
        breaker_failure_threshold=settings.breaker_failure_threshold,
        breaker_failure_window_s=settings.breaker_failure_window_seconds,
        global_max_inflight_calls=settings.global_max_inflight_calls,
        degraded_min_output_tokens=settings.degraded_min_output_tokens,
        day_tz=settings.budget_tz,
        first_token_timeout_s=settings.provider_first_token_timeout_seconds,
        idle_timeout_s=settings.provider_idle_timeout_seconds,
    )


def _provider_specs(settings: Settings) -> list[ProviderSpec]:
    providers = {name: settings.provider(name) for name in CASCADE_ORDER}
    return provider_specs(
        keys={k: v.get_secret_value() for k, v in settings.provider_keys().items()},
        base_urls={n: p.base_url for n, p in providers.items()},
        models={n: p.model for n, p in providers.items()},
        cheap_models={n: p.cheap_model for n, p in providers.items()},
        tiers={n: p.tier for n, p in providers.items()},
    )


def _digest_config(settings: Settings) -> DigestConfig:
    return DigestConfig(
        stagger_s=settings.digest_stagger_seconds,
        llm_concurrency=settings.digest_llm_concurrency,
        latest_delay_minutes=settings.digest_latest_delay_minutes,
        max_free_share=float(settings.digest_max_free_share),
        max_posts=settings.digest_max_posts,
        summary_max_tokens=settings.digest_summary_max_tokens,
        max_musd=usd_to_musd(settings.digest_max_usd) or 0,
        default_tz=settings.user_tz,
    )


def create_app(settings: Settings, clock: Clock | None = None) -> App:
    """Build the whole bot from ``settings``. Nothing is started here.

    Raises:
        budget.errors.BudgetConfigError: a paid model without a price, a bad limit.
        ValueError: provider configuration that cannot work.
    """
    clock = clock or SystemClock()
    engine = create_engine(settings.database_url)
    sessions = async_sessionmaker(engine, expire_on_commit=False)
    path = sqlite_path(settings.database_url)
    on_postgres = settings.database_url.startswith("postgresql+asyncpg://")
    if path is None and not on_postgres:
        raise BudgetConfigError(
            "the ledger needs a SQLite file or a postgresql+asyncpg:// DATABASE_URL"
        )

    i18n = create_i18n()
    bot = Bot(
        token=settings.bot_token.get_secret_value(),
        session=AiohttpSession(api=TelegramAPIServer.from_base(settings.telegram_api_base)),
    )
    registry = CollectorRegistry()
    dropped = dropped_counter(registry)
    bot.session.middleware(
        FloodGate(clock, on_drop=lambda _method: dropped.labels("flood_wait").inc())
    )
    bot.session.middleware(
        SkipUndecodableUpdates(on_skip=lambda: dropped.labels("undecodable_update").inc())
    )
    bot.session.middleware(PinResponseModels())
    notifier = AdminNotifier(bot, i18n, settings.admin_ids, clock)

    prices = PriceCard(
        provider_models(settings),
        overrides=parse_overrides(settings.price_overrides) if settings.price_overrides else None,
        max_call_seconds=settings.provider_timeout_seconds,
    )
    # the ledger's store by DATABASE_URL's scheme: one SQLite file (one process), or a
    # PostgreSQL database shared by several processes
    ledger = (
        Ledger.sqlite(
            path,
            ledger_config(settings),
            prices,
            clock,
            on_auto_kill=notifier.auto_kill,
            on_unavailable=notifier.storage_failed,
        )
        if path is not None
        else Ledger.postgres(
            settings.database_url,
            ledger_config(settings),
            prices,
            clock,
            on_auto_kill=notifier.auto_kill,
            on_unavailable=notifier.storage_failed,
        )
    )
    tokens = TokenCounter(safety_factor=settings.token_safety_factor)
    cascade = build_cascade(
        _provider_specs(settings),
        ledger=ledger,
        clock=clock,
        config=_cascade_config(settings),
        token_counter=tokens.messages,
        on_event=notifier.cascade_event,
        registry=registry,
    )
    history = History(sessions)
    intake = Intake(sessions)
    outbox = Outbox(sessions, bot, clock)
    streams = StreamRegistry()
    chat = ChatService(
        ledger=ledger,
        backend=cascade,
        history=history,
        count_tokens=tokens,
        clock=clock,
        config=ChatConfig(
            max_output_tokens=settings.chat_max_output_tokens,
            max_input_tokens=settings.chat_max_input_tokens,
            history_max_tokens=settings.chat_history_max_tokens,
            user_max_inflight=settings.user_max_inflight,
            user_queue_max=settings.user_queue_max,
        ),
        record_message=ledger.record_message,
    )
    repo = ProfileRepository(sessions, clock, default_digest_time=settings.digest_default_time)
    profiles = _Profiles(repo)

    async def tz_of(user_id: int) -> str:
        profile = await repo.get(user_id)
        return (profile.tz if profile and profile.tz else None) or settings.user_tz

    http = httpx.AsyncClient(headers={"User-Agent": "KopekBot/0.1 (+digests)"})
    guard = AddressGuard()
    feed_http = httpx.AsyncClient(
        headers={"User-Agent": "KopekBot/0.1 (+digests)"},
        transport=GuardedTransport(guard),
        trust_env=False,
    )
    fetchers = Fetchers(
        TmeClient(
            http,
            base_url=settings.telegram_web_base,
            max_bytes=settings.fetch_max_bytes,
            timeout_s=settings.fetch_timeout_seconds,
        ),
        FeedClient(
            feed_http,
            guard,
            max_bytes=settings.fetch_max_bytes,
            timeout_s=settings.fetch_timeout_seconds,
        ),
        clock,
    )
    digests = DigestService(
        sessions,
        clock,
        fetchers,
        repo,
        lookups_per_window=settings.sub_lookups_per_minute,
        lookup_window_s=60.0,
        negative_ttl_s=settings.sub_negative_cache_seconds,
    )
    runner = DigestRunner(
        clock=clock,
        session_factory=sessions,
        ledger=ledger,
        backend=cascade,
        deliverer=TelegramDeliverer(bot, i18n, clock, tz_of),
        fetcher=fetchers,
        config=_digest_config(settings),
        count_tokens=tokens.text,
    )

    workflow = WorkflowData(
        clock=clock,
        chat_service=chat,
        history=history,
        profiles=profiles,
        i18n=i18n,
        ledger=ledger,
        cascade=cascade,
        digests=digests,
        intake=intake,
        runner=runner,
        settings_view=AdminView(settings),
        books=BooksDesk(
            engine=engine,
            ledger=ledger,
            budget_tz=settings.budget_tz,
            billing_tz=settings.billing_tz,
            tolerance_musd=usd_to_musd(settings.reconcile_tolerance_usd) or 0,
            keys={name: not prices.is_free(name) for name in settings.provider_keys()},
        ),
        refusals=refusal_counter(registry),
        notifier=notifier,
        delivery_failures=delivery_failure_counter(registry),
        outbox=outbox,
        streams=streams,
        stream_config=StreamConfig(
            private=settings.stream_mode_private,
            group=settings.stream_mode_group,
            draft_interval_s=settings.stream_draft_interval_ms / 1000,
            edit_interval_s=settings.stream_edit_interval_ms / 1000,
        ),
        stream_metrics=StreamMetrics(registry),
        stop_book=StopBook(sessions),
    )
    dp = Dispatcher(**workflow)
    bot.session.middleware(TopicRequestMiddleware())
    dp.message.outer_middleware(TopicMiddleware())
    dp.update.outer_middleware(
        UpdateRateMiddleware(
            settings.user_max_updates_per_minute,
            clock,
            i18n,
            on_drop=lambda: dropped.labels("update_rate").inc(),
        )
    )
    dp.message.outer_middleware(
        ArrivalOrderMiddleware(chat, PasteJoiner(clock, settings.paste_join_seconds))
    )
    dp.message.outer_middleware(ProfileMiddleware(profiles, settings.admin_ids, settings.user_tz))
    LocaleMiddleware(i18n).setup(dp)
    dp.message.outer_middleware(IntakeMiddleware(intake, clock))
    dp.include_router(create_error_router())
    dp.include_router(create_books_router(settings.admin_ids))
    dp.include_router(create_admin_router(settings.admin_ids))
    dp.include_router(create_stream_router(settings.admin_ids))
    dp.include_router(create_common_router())
    dp.include_router(create_digest_router())
    dp.include_router(create_me_router())
    dp.include_router(create_fallback_router())
    dp.include_router(create_chat_router(stale_after_s=settings.stale_message_seconds))

    return App(
        settings=settings,
        clock=clock,
        engine=engine,
        bot=bot,
        dispatcher=dp,
        i18n=i18n,
        chat=chat,
        ledger=ledger,
        prices=prices,
        cascade=cascade,
        runner=runner,
        intake=intake,
        http=http,
        feed_http=feed_http,
        registry=registry,
        notifier=notifier,
        outbox=outbox,
    )


def check_database(path: Path) -> str | None:
    """``None`` when the SQLite file at ``path`` can be created, opened and written;
    else why not (one line). Blocking: run in a thread."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(path, timeout=5)
        try:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("ROLLBACK")
        finally:
            conn.close()
    except (OSError, sqlite3.Error) as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


def check_settings(settings: Settings, clock: Clock) -> str | None:
    """Cross-checks that need the price card and the models' limits, made before any
    migration. Returns ``None``, or one line naming the setting that cannot work.

    * A paid model without a price (``PRICE_OVERRIDES``).
    * ``OPERATION_MAX_USD`` below the smallest hold a chat message can need on every
      paid model (no input, the smaller of ``DEGRADED_MIN_OUTPUT_TOKENS`` and
      ``CHAT_MAX_OUTPUT_TOKENS`` out): every paid answer would be refused, blaming a cap
      the user cannot change.
    * ``CHAT_MAX_OUTPUT_TOKENS`` above the documented output limit of every configured
      model (``llm.limits``; checked only when every model's limit is known).
    """
    try:
        prices = PriceCard(
            provider_models(settings),
            overrides=parse_overrides(settings.price_overrides)
            if settings.price_overrides
            else None,
            max_call_seconds=settings.provider_timeout_seconds,
        )
    except (BudgetConfigError, ValueError) as exc:
        return f"configuration error: {exc}"
    models = provider_models(settings)
    now = clock.now()
    cap_musd = usd_to_musd(settings.operation_max_usd) or 0
    limits = [(max_output_tokens(m.provider, m.model), m) for m in models]
    known = [(limit, m) for limit, m in limits if limit is not None]
    if known and len(known) == len(limits):
        largest, model = max(known, key=lambda pair: pair[0])
        if settings.chat_max_output_tokens > largest:
            return (
                f"configuration error in CHAT_MAX_OUTPUT_TOKENS: "
                f"{settings.chat_max_output_tokens} is beyond every configured model's output "
                f"limit (the largest is {largest} on {model.provider}:{model.model})"
            )
    # The smallest hold any chat message can need: no input at all and the fewest output
    # tokens the degradation ladder would still send. Below it, every paid answer is
    # refused, whatever the message.
    smallest_output = min(settings.degraded_min_output_tokens, settings.chat_max_output_tokens)
    paid = [
        (prices.ceiling_musd(m.provider, m.model, 0, smallest_output, now), m)
        for m in models
        if not prices.is_free(m.provider)
    ]
    if paid:
        cheapest, model = min(paid, key=lambda pair: pair[0])
        if cap_musd < cheapest:
            return (
                f"configuration error in OPERATION_MAX_USD: ${settings.operation_max_usd:f} is "
                f"below the smallest chat hold ({usd(cheapest)}: {smallest_output} output "
                f"tokens on {model.provider}:{model.model}): every paid answer would be refused"
            )
    return None


def _fail(message: str, settings: Settings) -> None:
    """One line on stderr, with every secret removed (line breaks of a library's
    message become spaces, so the line stays one)."""
    secrets = settings.secret_values()
    line = " ".join(redact(message, secrets).split())
    print(f"kopek: {line}", file=sys.stderr)


async def _migrate_shielded(database_url: str) -> bool:
    """Apply migrations with SIGTERM/SIGINT deferred until they are done (a signal would
    otherwise kill the process mid-migration). Returns True when a stop was requested."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    signals = (signal.SIGTERM, signal.SIGINT)
    for sig in signals:
        loop.add_signal_handler(sig, stop.set)
    try:
        await asyncio.to_thread(migrate, database_url)
    finally:
        for sig in signals:
            loop.remove_signal_handler(sig)
    return stop.is_set()


async def run(settings: Settings) -> int:
    """Migrate, build, poll until SIGTERM/SIGINT; returns the exit code.

    The database's instance lock (:mod:`budget.instance_lock`) is taken first, before
    migrations and before the ledger sweeps holds: a second process on the same file
    exits 2 naming the file and the holder's PID, and touches nothing.

    Exit codes: 0 after a clean stop; 2 for configuration the bot cannot run with
    (database URL, database in use by another process, token refused by Telegram,
    prices); 1 when Telegram cannot be reached at start, answers with something that
    is not a Telegram response, or anything unexpected ends the bot. Each failure is
    one line on stderr, secrets redacted.
    """
    path = sqlite_path(settings.database_url)
    if path is None:
        _fail("DATABASE_URL must name a SQLite file (sqlite+aiosqlite:///path/kopek.db)", settings)
        return 2
    problem = check_settings(settings, SystemClock())
    if problem is not None:
        _fail(problem, settings)
        return 2
    problem = await asyncio.to_thread(check_database, path)
    if problem is not None:
        _fail(f"configuration error in DATABASE_URL: cannot write {path}: {problem}", settings)
        return 2
    try:
        lock = instance_lock.acquire(path)
    except instance_lock.InstanceLocked as exc:
        _fail(f"{exc}; only one bot may run on a database file", settings)
        return 2
    except OSError as exc:
        _fail(f"cannot lock the database {path}: {type(exc).__name__}: {exc}", settings)
        return 2
    try:
        return await _run_locked(settings, path)
    finally:
        lock.release()


async def _run_locked(settings: Settings, path: Path) -> int:
    try:
        if await _migrate_shielded(settings.database_url):
            return 0
    except (OSError, SQLAlchemyError) as exc:
        _fail(f"cannot prepare the database {path}: {type(exc).__name__}: {exc}", settings)
        return 2
    try:
        app = create_app(settings)
    except (BudgetConfigError, ValueError) as exc:
        _fail(f"configuration error: {exc}", settings)
        return 2
    dp = app.dispatcher
    dp.startup.register(app.on_startup)
    dp.shutdown.register(app.on_shutdown)
    try:
        await dp.start_polling(
            app.bot,
            handle_signals=True,
            close_bot_session=True,
            tasks_concurrency_limit=settings.intake_max_concurrent,
            polling_timeout=30,
        )
    except TelegramUnauthorizedError:
        _fail("Telegram refused BOT_TOKEN (401 Unauthorized): check it with @BotFather", settings)
        await app.close_after_failed_start()
        return 2
    except TelegramNetworkError as exc:
        _fail(f"cannot reach the Bot API at {settings.telegram_api_base}: {exc.message}", settings)
        await app.close_after_failed_start()
        return 1
    except ClientDecodeError:
        # A proxy's error page or a typo'd URL: the body may echo the request path,
        # which holds the token, so none of it is printed.
        _fail(
            f"the Bot API at {settings.telegram_api_base} answered with something that is "
            "not a Telegram response: check TELEGRAM_API_BASE",
            settings,
        )
        await app.close_after_failed_start()
        return 1
    except TelegramAPIError as exc:
        _fail(
            f"the Bot API at {settings.telegram_api_base} refused to start: {exc.message}", settings
        )
        await app.close_after_failed_start()
        return 1
    except OSError as exc:  # the metrics port cannot be bound
        _fail(f"cannot start: {type(exc).__name__}: {exc}", settings)
        await app.close_after_failed_start()
        return 2
    except Exception as exc:  # last resort: one redacted line, not a trace
        log.debug("the bot failed", exc_info=exc)
        _fail(f"failed: {type(exc).__name__} (the redacted trace is logged at DEBUG)", settings)
        await app.close_after_failed_start()
        return 1
    return 0
