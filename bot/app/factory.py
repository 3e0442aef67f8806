"""The composition root: the one place that builds everything from :class:`Settings`.

Nothing is created at import time. :func:`create_app` wires the engine, ledger,
cascade, digest runner, aiogram bot and dispatcher into an :class:`~bot.app.lifecycle.App`
(whose start-up and shutdown hooks are in :mod:`bot.app.lifecycle`); the settings → config
pieces are in :mod:`bot.app.wiring` (shedding, retention, /drill and the routers in
:mod:`bot.app.ops_wiring`); :func:`bot.app.polling.run` checks, migrates, starts
polling and returns the exit code once a SIGTERM/SIGINT has drained the work.
"""

from __future__ import annotations

from dataclasses import replace

import httpx
from aiogram import Bot, Dispatcher
from aiogram.client.session.aiohttp import AiohttpSession
from aiogram.client.telegram import TelegramAPIServer
from prometheus_client import CollectorRegistry
from sqlalchemy.ext.asyncio import async_sessionmaker

from bot.app.access_wiring import build_access
from bot.app.lifecycle import App
from bot.app.media_wiring import build_media, media_models
from bot.app.ops_wiring import drill_of, include_routers, retention_of, shedding_of
from bot.app.wiring import (
    ProfileStoreAdapter,
    admin_language,
    cascade_config,
    chat_config,
    digest_config,
    ledger_config,
    provider_models,
    provider_specs_of,
    router_config,
    stream_config,
    watch_config,
)
from bot.chat.deferral import FloodDeferral
from bot.chat.duplicates import DuplicateGate
from bot.chat.folding import HistoryFolder, raw_turn_counter
from bot.chat.model_menu import ModelMenu
from bot.chat.outbox import Outbox
from bot.chat.paste import PasteJoiner
from bot.chat.service import ChatService
from bot.chat.streaming.metrics import StreamMetrics
from bot.chat.streaming.registry import StreamRegistry
from bot.chat.tools import ChatTools
from bot.handlers.admin.base import AdminView
from bot.handlers.books import BooksDesk
from bot.handlers.inline_filters import run_sync_filters_inline
from bot.middlewares.context import WorkflowData
from bot.middlewares.intake import (
    ArrivalOrderMiddleware,
    IntakeMiddleware,
    LocaleMiddleware,
    ProfileMiddleware,
)
from bot.middlewares.rate import RateExemption, UpdateRateMiddleware
from bot.middlewares.topics import TopicMiddleware, TopicRequestMiddleware
from bot.ops.admin_notices import AdminNotifier
from bot.ops.dashboard import build_operator_view, build_site
from bot.ops.health import Readiness
from bot.ops.kpis import KpiReader
from bot.ops.metrics import delivery_failure_counter, dropped_counter, refusal_counter
from bot.ops.once import NoticeBook
from bot.ops.schema_watch import SchemaWatch
from bot.ops.watch import OpsWatch
from bot.session.chat_moves import FollowChatMoves
from bot.session.flood_waits import FloodWaits
from bot.session.model_pins import PinResponseModels
from bot.session.update_json import load_checked
from bot.session.updates import (
    ConfirmWhenTakenIn,
    EndOfUpdate,
    IntakeBarrier,
    PollInSmallBatches,
    SkipUndecodableUpdates,
)
from bot.settings import Settings
from bot.storage.chat_prefs import ChatPrefsStore
from bot.storage.hot import hot_path
from bot.storage.moves import ChatMoves
from bot.storage.repos import History, Intake
from bot.storage.summaries import CostFooters, Summaries
from bot.text.digests import TelegramDeliverer
from bot.text.i18n import create_i18n
from budget.books.stops import StopBook
from budget.errors import BudgetConfigError
from budget.kernel.clock import Clock, SystemClock
from budget.kernel.db import create_engine, sqlite_path
from budget.ledger import Ledger
from budget.plans import load_plans
from budget.policy.money import usd_to_musd
from budget.pricing.prices import PriceCard, parse_overrides
from budget.pricing.tokens import TokenCounter
from llm.cascade.factory import build_cascade
from scheduler.claims import Claimant
from scheduler.profiles import ProfileRepository
from scheduler.runner import DigestRunner
from scheduler.service import DigestService
from scheduler.sources.feeds import AddressGuard, FeedClient, GuardedTransport
from scheduler.sources.fetch import Fetchers
from scheduler.sources.tme import TmeClient

__all__ = ["App", "create_app"]


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
        session=AiohttpSession(
            api=TelegramAPIServer.from_base(settings.telegram_api_base),
            # no depth or integer of an answer fails later (bot/session/update_json.py)
            json_loads=load_checked,
        ),
    )
    registry = CollectorRegistry()
    dropped = dropped_counter(registry)
    flood_waits = FloodWaits(clock, on_drop=lambda _method: dropped.labels("flood_wait").inc())
    bot.session.middleware(flood_waits)
    # polling: a batch is confirmed once its updates are taken in (bot/session/updates.py)
    barrier = (
        None if settings.webhook_mode else IntakeBarrier(clock, settings.poll_intake_wait_seconds)
    )
    if barrier is not None:
        bot.session.middleware(ConfirmWhenTakenIn(barrier))
    bot.session.middleware(
        SkipUndecodableUpdates(on_skip=lambda: dropped.labels("undecodable_update").inc())
    )
    bot.session.middleware(PinResponseModels())
    bot.session.middleware(PollInSmallBatches())
    notifier = AdminNotifier(bot, i18n, settings.admin_ids, clock)

    plans = load_plans(settings.plans_file)  # checked before migrating (preflight)
    prices = PriceCard(
        [*provider_models(settings), *media_models(settings)],
        overrides=parse_overrides(settings.price_overrides) if settings.price_overrides else None,
        max_call_seconds=settings.provider_timeout_seconds,
    )
    # the ledger's store by DATABASE_URL's scheme (budget.storage.open_store): one SQLite
    # file (one process), or a PostgreSQL database shared by several processes
    ledger = Ledger.open(
        settings.database_url,
        ledger_config(settings, plans),
        prices,
        clock,
        on_auto_kill=notifier.auto_kill,
        on_unavailable=notifier.storage_failed,
    )
    shared = ledger.store.shared  # the database the replicas share (None: one SQLite file)
    shedding = shedding_of(settings, ledger, clock, notifier.broadcast)
    tokens = TokenCounter(safety_factor=settings.token_safety_factor)
    # on PostgreSQL the replicas share each provider key's circuit and paced windows
    # and GLOBAL_MAX_INFLIGHT_CALLS (leases tied to the processes' heartbeats)
    key_store = lease_store = None
    if shared is not None:
        from llm.keys.claims import CallClaims
        from llm.keys.postgres import PgKeyStates

        key_store = PgKeyStates(shared, clock)
        lease_store = CallClaims(
            shared,
            shared.process_id,
            clock,
            ttl_s=settings.hold_ttl_seconds,
            dead_after_s=settings.process_dead_after_seconds,
        )
    # one TLS context for the HTTPS clients (each new one loads the CA bundle: ~30 ms)
    tls = httpx.create_ssl_context()
    cascade = build_cascade(
        provider_specs_of(settings),
        ledger=ledger,
        clock=clock,
        config=cascade_config(settings),
        token_counter=tokens.messages,
        on_event=notifier.cascade_event,
        registry=registry,
        key_store=key_store,
        lease_store=lease_store,
        tls=tls,
    )
    # the message path's bot-table statements in few steps (bot.storage.hot): on the
    # ledger's one writer (a SQLite file) or single statements on its pool (PostgreSQL)
    hot = hot_path(ledger.store, clock)
    # a group upgraded to a supergroup: its calls, rows and answers follow it there
    moves = ChatMoves(sessions)
    bot.session.middleware(FollowChatMoves(moves))
    history = History(sessions, hot, moves)
    # several processes share a PostgreSQL database: each message remembers who took it
    # in, and only a dead process's are "lost" (bot.storage.repos.Intake.take_lost)
    intake = Intake(
        sessions,
        hot,
        shared=None
        if shared is None
        else (ledger.store.process_id, settings.process_dead_after_seconds),
    )
    # replicas: each kept answer is claimed by one worker before it is sent
    outbox = Outbox(
        sessions,
        bot,
        clock,
        claim_s=settings.process_dead_after_seconds if on_postgres else None,
    )
    streams = StreamRegistry(clock)
    if shared is not None:  # /kill hard cuts every replica's streams (bot/ops/signals.py)
        from bot.ops.signals import KILL_HARD, PgSignals, SignalWatcher

        streams.kill_watch = SignalWatcher(
            PgSignals(shared.control, clock), KILL_HARD, clock, lambda: streams.stop_all("kill")
        )
    # replicas: a user's queue counts the other live replicas' unfinished messages too
    lanes = None
    if shared is not None:
        from bot.chat.lanes import PgLanes

        lanes = PgLanes(shared, shared.process_id, clock, settings.process_dead_after_seconds)
    summaries = Summaries(sessions, moves, hot)
    folder = HistoryFolder(
        summaries=summaries,
        backend=cascade,
        raw_turn=raw_turn_counter(tokens.raw_messages),
        scale=tokens.scale,
        clock=clock,
        history_max_tokens=settings.chat_history_max_tokens,
        summary_max_tokens=settings.chat_summary_max_tokens,
        router=router_config(settings),
    )
    chat = ChatService(
        ledger=ledger,
        backend=cascade,
        history=history,
        count_tokens=tokens,
        clock=clock,
        config=chat_config(settings),
        record_message=ledger.record_message,
        lanes=lanes,
        short_answers=lambda: shedding.is_off("long_answers"),
        folder=folder,
    )
    repo = ProfileRepository(sessions, clock, default_digest_time=settings.digest_default_time)
    profiles = ProfileStoreAdapter(
        repo, hot=hot, clock=clock, default_digest_time=settings.digest_default_time
    )

    async def tz_of(user_id: int) -> str:
        profile = await repo.get(user_id)
        return (profile.tz if profile and profile.tz else None) or settings.user_tz

    http = httpx.AsyncClient(headers={"User-Agent": "KopekBot/0.1 (+digests)"}, verify=tls)
    guard = AddressGuard()
    feed_http = httpx.AsyncClient(
        headers={"User-Agent": "KopekBot/0.1 (+digests)"},
        transport=GuardedTransport(guard),  # certifi's bundle; no SSL_CERT_FILE for feeds
        trust_env=False,
    )
    feeds = FeedClient(
        feed_http,
        guard,
        max_bytes=settings.fetch_max_bytes,
        timeout_s=settings.fetch_timeout_seconds,
    )
    fetchers = Fetchers(
        TmeClient(
            http,
            base_url=settings.telegram_web_base,
            max_bytes=settings.fetch_max_bytes,
            timeout_s=settings.fetch_timeout_seconds,
        ),
        feeds,
        clock,
    )
    media = build_media(
        settings,
        bot=bot,
        ledger=ledger,
        chat_cascade=cascade,
        history=history,
        feeds=feeds,
        tokens=tokens,
        clock=clock,
        tls=tls,
    )
    chat.vision = media.vision
    # the chat model's tools reach the network only through these guarded sources
    chat.use_tools(ChatTools(settings.chat_tools, ledger=ledger, sources=fetchers, feeds=feeds))
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
        config=replace(
            digest_config(settings), paid_allowed=lambda: not shedding.is_off("paid_digests")
        ),
        count_tokens=tokens.text,
        # replicas on one PostgreSQL: each run and summary claimed by one process;
        # SQLite has one process per file (the instance lock): nothing to claim
        claimant=(
            Claimant(ledger.store.process_id, settings.process_dead_after_seconds)
            if on_postgres
            else None
        ),
    )

    # who may use the bot, on which plan: the lists in memory, the gate before everything
    who = build_access(settings, sessions, clock, ledger, plans, shared=on_postgres)
    # the operator's figures: the dashboard's documents (also /budget chart's picture),
    # the alerts before the caps and the spend reports (bot/ops/watch.py)
    kpis = KpiReader(sessions, clock, clock.monotonic())
    notifier.language_of = admin_language(repo)
    ops_watch = OpsWatch(
        ledger=ledger,
        engine=engine,
        cascade=cascade,
        notices=NoticeBook(sessions, clock),
        notifier=notifier,
        kpis=kpis,
        clock=clock,
        config=watch_config(settings),
    )
    operator_view = build_operator_view(ledger, cascade, engine, clock, settings.budget_tz, kpis)
    dashboard = None
    if settings.dashboard_path is not None:
        dashboard = build_site(
            operator_view,
            ledger,
            token=settings.bot_token,
            admin_ids=settings.admin_ids,
            clock=clock,
            path=settings.dashboard_path,
            max_age_s=settings.dashboard_auth_max_age_seconds,
            on_refused=lambda: dropped.labels("dashboard_auth").inc(),
        )
    workflow = WorkflowData(
        clock=clock,
        chat_service=chat,
        history=history,
        cost_footers=CostFooters(sessions, hot),
        duplicates=DuplicateGate(clock, settings.duplicate_window_seconds),
        summaries=summaries,
        chat_moves=moves,
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
        flood_deferral=FloodDeferral(flood_waits, outbox, clock, settings.flood_defer_seconds),
        streams=streams,
        stream_config=stream_config(settings, shed=lambda: shedding.is_off("streaming")),
        stream_metrics=StreamMetrics(registry),
        stop_book=StopBook(sessions),
        admin_ids=settings.admin_ids,
        stale_after_s=settings.stale_message_seconds,
        access=who.book,
        plans=plans,
        user_plans=who.user_plans,
        invite_ttl_hours=settings.invite_ttl_hours,
        plan_sales=who.sales,
        operator_view=operator_view,
        dashboard_url=settings.dashboard_url,
        chat_prefs=ChatPrefsStore(sessions, hot),
        model_menu=ModelMenu(provider_models(settings), prices, settings.chat_models, clock.now),
        persona_max_chars=settings.persona_max_chars,
        drill=drill_of(ledger, i18n, settings),
        media_desk=media.desk,
        confirmations=media.confirmations,
    )
    dp = Dispatcher(**workflow)
    bot.session.middleware(TopicRequestMiddleware())
    dp.message.outer_middleware(TopicMiddleware())
    # replicas count a payer's updates over all of them (bot/storage/pg_rates.py)
    shared_rates = None
    if shared is not None:
        from bot.storage.pg_rates import PgUpdateRates

        shared_rates = PgUpdateRates(shared, clock)
    rate = UpdateRateMiddleware(
        settings.user_max_updates_per_minute,
        clock,
        i18n,
        on_drop=lambda: dropped.labels("update_rate").inc(),
        shared=shared_rates,
    )
    if barrier is not None:  # the first update middleware: sees every update end
        dp.update.outer_middleware(EndOfUpdate(barrier))
    # access before anything else: a stranger costs a lookup (bot/middlewares/access.py)
    dp.update.outer_middleware(who.gate(settings, i18n, ledger))
    dp.update.outer_middleware(rate)
    dp.message.outer_middleware(
        ArrivalOrderMiddleware(chat, PasteJoiner(clock, settings.paste_join_seconds))
    )
    dp.message.outer_middleware(
        ProfileMiddleware(
            profiles,
            settings.admin_ids,
            settings.user_tz,
            recorder=profiles if hot is not None else None,
        )
    )
    LocaleMiddleware(i18n).setup(dp)
    dp.message.outer_middleware(
        IntakeMiddleware(intake, clock, barrier.taken_in if barrier is not None else None)
    )
    include_routers(dp, settings.admin_ids)
    # controls tagged flags={"rate_limit": False} pass the update rate (bot/middlewares/rate.py)
    rate.exempt(dp)
    # magic filters (F.text …) on the loop, not one thread hop each (bot/handlers/inline_filters.py)
    run_sync_filters_inline(dp)
    gate = RateExemption()
    for name, observer in dp.observers.items():
        if name not in ("update", "error"):
            observer.middleware(gate)

    app = App(
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
        streams=streams,
        readiness=Readiness(engine),
        dropped=dropped,
        schema=SchemaWatch(engine, clock),
        is_control=lambda update: rate.is_control(update, bot),
        dashboard=dashboard,
        shedding=shedding,
        retention=retention_of(settings, ledger, engine, clock),
        media=media,
        ops_watch=ops_watch,
    )
    if shared is not None:  # a process taken for dead stops acting (bot/session/fence.py)
        from bot.session.fence import FencedSession

        bot.session.middleware(FencedSession(shared))
        shared.on_fenced.append(app.fence)
    return app
