"""The composition root: the one place that builds everything from :class:`Settings`.

Nothing is created at import time. :func:`create_app` wires the engine, ledger,
cascade, digest runner, media path, aiogram bot and dispatcher into an
:class:`~bot.app.lifecycle.App` (start-up and shutdown: :mod:`bot.app.lifecycle`), one
part at a time: each ``_build_*`` function below builds one piece. What depends on
whether processes share the database comes from :mod:`bot.app.replicas`, so nothing
here asks which engine it runs on. Settings → config pieces: :mod:`bot.app.wiring`;
shedding, retention, /drill and the routers: :mod:`bot.app.ops_wiring`; the media path:
:mod:`bot.app.media_wiring`; the digests: :mod:`bot.app.digest_wiring`.
:func:`bot.app.polling.run` checks, migrates, starts polling and returns the exit code
once a SIGTERM/SIGINT has drained the work.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass

import httpx
from aiogram import Bot, Dispatcher
from aiogram.utils.i18n import I18n
from prometheus_client import CollectorRegistry, Counter
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from bot.app.access_wiring import AccessParts, build_access
from bot.app.digest_wiring import DigestParts, build_digests
from bot.app.intake_window import IntakeWindow, IntakeWindowMiddleware, intake_window_of
from bot.app.lifecycle import App
from bot.app.media_wiring import MediaParts, build_media, media_models
from bot.app.operator import Operator, books_desk, build_operator, dashboard_site
from bot.app.ops_wiring import drill_of, retention_of, route_updates, shedding_of
from bot.app.replicas import Replicas, replicas_of
from bot.app.telegram_wiring import build_telegram
from bot.app.wiring import (
    ProfileStoreAdapter,
    cascade_config,
    chat_config,
    ledger_config,
    provider_models,
    provider_specs_of,
    router_config,
    stream_config,
)
from bot.chat.deferral import FloodDeferral
from bot.chat.duplicates import DuplicateGate
from bot.chat.folding import HistoryFolder, raw_turn_counter
from bot.chat.model_menu import ModelMenu
from bot.chat.notices import RateNotices
from bot.chat.outbox import Outbox
from bot.chat.paste import PasteJoiner
from bot.chat.service import ChatService
from bot.chat.streaming.metrics import StreamMetrics
from bot.chat.streaming.registry import StreamRegistry
from bot.chat.tools import ChatTools
from bot.handlers.admin.base import AdminView
from bot.middlewares.context import WorkflowData
from bot.middlewares.intake import (
    ArrivalOrderMiddleware,
    IntakeMiddleware,
    LocaleMiddleware,
    ProfileMiddleware,
)
from bot.middlewares.rate import UpdateRateMiddleware
from bot.middlewares.topics import TopicMiddleware
from bot.ops.admin_notices import AdminNotifier
from bot.ops.health import Readiness
from bot.ops.metrics import delivery_failure_counter, dropped_counter, refusal_counter
from bot.ops.schema_watch import SchemaWatch
from bot.ops.shedding import Shedding
from bot.session.chat_moves import FollowChatMoves
from bot.session.updates import EndOfUpdate, IntakeBarrier
from bot.settings import Settings
from bot.storage.chat_prefs import ChatPrefsStore
from bot.storage.moves import ChatMoves
from bot.storage.repos import History, Intake
from bot.storage.summaries import CostFooters, Summaries
from bot.text.i18n import create_i18n
from budget.books.stops import StopBook
from budget.kernel.clock import Clock, SystemClock
from budget.kernel.db import create_engine
from budget.ledger import Ledger
from budget.plans import Plans, load_plans
from budget.pricing.prices import PriceCard, parse_overrides
from budget.pricing.tokens import TokenCounter
from llm.cascade.cascade import Cascade
from llm.cascade.factory import build_cascade
from scheduler.profiles import ProfileRepository

__all__ = ["App", "create_app"]


def create_app(settings: Settings, clock: Clock | None = None) -> App:
    """Build the whole bot from ``settings``. Nothing is started here.

    Raises:
        budget.errors.BudgetConfigError: a paid model without a price, a bad limit, a
            DATABASE_URL that is neither a SQLite file nor ``postgresql+asyncpg://``.
        ValueError: provider configuration that cannot work.
    """
    clock = clock or SystemClock()
    engine = create_engine(settings.database_url)
    registry = CollectorRegistry()
    dropped = dropped_counter(registry)
    i18n = create_i18n()
    telegram = build_telegram(settings, clock, dropped)
    notifier = AdminNotifier(telegram.bot, i18n, settings.admin_ids, clock)
    core = _build_core(settings, clock, engine, telegram.bot, i18n, notifier)
    ledger = core.ledger
    # one TLS context for the HTTPS clients (each new one loads the CA bundle: ~30 ms)
    tls = httpx.create_ssl_context()
    cascade = _build_cascade(core, notifier, registry, tls)
    repo = ProfileRepository(core.sessions, clock, default_digest_time=settings.digest_default_time)
    chat = _build_chat(core, repo, cascade)
    digests = _build_digests(core, repo, cascade, tls)
    # the chat model's tools reach the network only through these guarded sources
    chat.service.use_tools(
        ChatTools(settings.chat_tools, ledger=ledger, sources=digests.fetchers, feeds=digests.feeds)
    )
    media = _build_media(core, cascade, chat, digests, tls)
    operator = build_operator(
        settings, clock, core.sessions, ledger, engine, cascade, notifier, repo
    )
    deferral = FloodDeferral(telegram.flood_waits, chat.outbox, clock, settings.flood_defer_seconds)
    workflow = _workflow(
        core, engine, registry, notifier, cascade, chat, digests, operator, deferral, media
    )
    dp = Dispatcher(**workflow)
    window, probe = intake_window_of(
        settings.intake_max_concurrent, settings.intake_lag_target_ms, clock
    )
    rate = _add_middlewares(core, dp, telegram.barrier, chat, dropped, window)
    route_updates(dp, settings.admin_ids, rate)
    app = App(
        settings=settings,
        clock=clock,
        engine=engine,
        bot=telegram.bot,
        dispatcher=dp,
        i18n=i18n,
        chat=chat.service,
        ledger=ledger,
        prices=ledger.prices,
        cascade=cascade,
        runner=digests.runner,
        intake=chat.intake,
        http=digests.http,
        feed_http=digests.feed_http,
        registry=registry,
        notifier=notifier,
        outbox=chat.outbox,
        streams=chat.streams,
        readiness=Readiness(engine),
        dropped=dropped,
        schema=SchemaWatch(engine, clock),
        is_control=lambda update: rate.is_control(update, telegram.bot),
        dashboard=dashboard_site(settings, clock, ledger, operator.view, dropped),
        shedding=core.shedding,
        retention=retention_of(settings, ledger, engine, clock),
        media=media,
        ops_watch=operator.watch,
        refunds=core.access.refunds,
        intake_window=window,
        lag_probe=probe,
    )
    core.replicas.attach(app, telegram.bot, chat.streams)
    return app


@dataclass(frozen=True, slots=True)
class _Core:
    """What most parts are built from (the access side: :mod:`bot.app.access_wiring`;
    what the processes share: :mod:`bot.app.replicas`; SHED_ORDER's switch)."""

    settings: Settings
    clock: Clock
    sessions: async_sessionmaker[AsyncSession]
    ledger: Ledger
    plans: Plans
    access: AccessParts
    replicas: Replicas
    tokens: TokenCounter
    bot: Bot
    i18n: I18n
    shedding: Shedding


def _build_core(
    settings: Settings,
    clock: Clock,
    engine: AsyncEngine,
    bot: Bot,
    i18n: I18n,
    notifier: AdminNotifier,
) -> _Core:
    """The plans (PLANS_FILE, checked before migrating), the ledger, the sessions, what
    the processes share and who may use the bot on which plan (the gate before all)."""
    plans = load_plans(settings.plans_file)
    ledger = _build_ledger(settings, clock, notifier, plans)
    sessions = async_sessionmaker(engine, expire_on_commit=False)
    replicas = replicas_of(ledger, settings.process_dead_after_seconds)
    tokens = TokenCounter(safety_factor=settings.token_safety_factor)
    tokens.preload()  # in the counting thread, before the first message needs it
    return _Core(
        settings=settings,
        clock=clock,
        sessions=sessions,
        ledger=ledger,
        plans=plans,
        access=build_access(
            settings, sessions, clock, ledger, plans, bot, i18n, shared=replicas.access_shared
        ),
        replicas=replicas,
        tokens=tokens,
        bot=bot,
        i18n=i18n,
        shedding=shedding_of(settings, ledger, clock, notifier.broadcast),
    )


def _build_ledger(
    settings: Settings, clock: Clock, notifier: AdminNotifier, plans: Plans
) -> Ledger:
    """The price card and the ledger on DATABASE_URL's store (by its scheme:
    :func:`budget.storage.open_store`: one SQLite file, one process; or a PostgreSQL
    database shared by several processes), its levels and caps from ``plans`` too."""
    prices = PriceCard(
        [*provider_models(settings), *media_models(settings)],
        overrides=parse_overrides(settings.price_overrides) if settings.price_overrides else None,
        max_call_seconds=settings.provider_timeout_seconds,
    )
    return Ledger.open(
        settings.database_url,
        ledger_config(settings, plans),
        prices,
        clock,
        on_auto_kill=notifier.auto_kill,
        on_unavailable=notifier.storage_failed,
    )


def _build_cascade(
    core: _Core, notifier: AdminNotifier, registry: CollectorRegistry, tls: ssl.SSLContext
) -> Cascade:
    """The provider cascade; key states, call leases and free shares shared by replicas."""
    settings, clock = core.settings, core.clock
    return build_cascade(
        provider_specs_of(settings),
        ledger=core.ledger,
        clock=clock,
        config=cascade_config(settings),
        token_counter=core.tokens.messages,
        on_event=notifier.cascade_event,
        registry=registry,
        key_store=core.replicas.key_states(clock),
        lease_store=core.replicas.call_claims(clock, settings.hold_ttl_seconds),
        share_store=core.replicas.free_shares(clock),
        tls=tls,
    )


@dataclass(frozen=True, slots=True)
class _Chat:
    """The chat's pieces: the service and the stores and workers around it."""

    service: ChatService
    history: History
    summaries: Summaries
    moves: ChatMoves
    intake: Intake
    outbox: Outbox
    streams: StreamRegistry
    profiles: ProfileStoreAdapter


def _build_chat(core: _Core, repo: ProfileRepository, cascade: Cascade) -> _Chat:
    """The chat service (folding long histories into summaries), its history, the
    intake, the outbox, the streams and the profile store (on a SQLite file the message
    path's writes ride the ledger's writer)."""
    settings, clock, hot = core.settings, core.clock, core.replicas.hot
    # a group upgraded to a supergroup: its calls, rows and answers follow it there
    moves = ChatMoves(core.sessions, hot)
    core.bot.session.middleware(FollowChatMoves(moves))
    history = History(core.sessions, hot, moves)
    summaries = Summaries(core.sessions, moves, hot)
    service = ChatService(
        ledger=core.ledger,
        backend=cascade,
        history=history,
        count_tokens=core.tokens,
        clock=clock,
        config=chat_config(settings),
        count_messages=True,
        lanes=core.replicas.lanes(clock),
        short_answers=lambda: core.shedding.is_off("long_answers"),
        folder=HistoryFolder(
            summaries=summaries,
            backend=cascade,
            raw_turn=raw_turn_counter(core.tokens.raw_messages),
            scale=core.tokens.scale,
            clock=clock,
            history_max_tokens=settings.chat_history_max_tokens,
            summary_max_tokens=settings.chat_summary_max_tokens,
            router=router_config(settings),
        ),
    )
    return _Chat(
        service=service,
        history=history,
        summaries=summaries,
        moves=moves,
        intake=Intake(core.sessions, hot, shared=core.replicas.intake),
        outbox=Outbox(core.sessions, core.bot, clock, claim_s=core.replicas.outbox_claim_s),
        streams=StreamRegistry(clock),
        profiles=ProfileStoreAdapter(
            repo, hot=hot, clock=clock, default_digest_time=settings.digest_default_time
        ),
    )


def _build_digests(
    core: _Core, repo: ProfileRepository, cascade: Cascade, tls: ssl.SSLContext
) -> DigestParts:
    """The digests' parts (:mod:`bot.app.digest_wiring`)."""
    return build_digests(
        core.settings,
        clock=core.clock,
        sessions=core.sessions,
        ledger=core.ledger,
        bot=core.bot,
        i18n=core.i18n,
        repo=repo,
        cascade=cascade,
        count_tokens=core.tokens.text,
        claimant=core.replicas.claimant,
        paid_allowed=lambda: not core.shedding.is_off("paid_digests"),
        tls=tls,
        recipient_allowed=core.access.book.serves_privately,
    )


def _build_media(
    core: _Core, cascade: Cascade, chat: _Chat, digests: DigestParts, tls: ssl.SSLContext
) -> MediaParts:
    """The media path (:mod:`bot.app.media_wiring`); its vision cascade answers photos."""
    media = build_media(
        core.settings,
        bot=core.bot,
        ledger=core.ledger,
        chat_cascade=cascade,
        history=chat.history,
        feeds=digests.feeds,
        tokens=core.tokens,
        clock=core.clock,
        tls=tls,
    )
    chat.service.vision = media.vision
    return media


def _workflow(
    core: _Core,
    engine: AsyncEngine,
    registry: CollectorRegistry,
    notifier: AdminNotifier,
    cascade: Cascade,
    chat: _Chat,
    digests: DigestParts,
    operator: Operator,
    flood_deferral: FloodDeferral,
    media: MediaParts,
) -> WorkflowData:
    """What handlers ask for by name (``Dispatcher(**workflow_data)``)."""
    now = core.clock.now
    return WorkflowData(
        clock=core.clock,
        chat_service=chat.service,
        history=chat.history,
        cost_footers=CostFooters(core.sessions, core.replicas.hot),
        duplicates=DuplicateGate(core.clock, core.settings.duplicate_window_seconds),
        rate_notices=RateNotices(core.clock),
        summaries=chat.summaries,
        chat_moves=chat.moves,
        profiles=chat.profiles,
        languages=chat.profiles.reply_languages(),
        i18n=core.i18n,
        ledger=core.ledger,
        cascade=cascade,
        digests=digests.service,
        intake=chat.intake,
        runner=digests.runner,
        settings_view=AdminView(core.settings),
        books=books_desk(core.settings, engine, core.ledger, operator.reconciliations),
        refusals=refusal_counter(registry),
        notifier=notifier,
        delivery_failures=delivery_failure_counter(registry),
        outbox=chat.outbox,
        flood_deferral=flood_deferral,
        streams=chat.streams,
        stream_config=stream_config(core.settings, shed=lambda: core.shedding.is_off("streaming")),
        stream_metrics=StreamMetrics(registry),
        stop_book=StopBook(core.sessions),
        admin_ids=core.settings.admin_ids,
        stale_after_s=core.settings.stale_message_seconds,
        access=core.access.book,
        plans=core.plans,
        user_plans=core.access.user_plans,
        invite_ttl_hours=core.settings.invite_ttl_hours,
        plan_sales=core.access.sales,
        wallet_refunds=core.access.refunds,
        operator_view=operator.view,
        dashboard_url=core.settings.dashboard_url,
        chat_prefs=ChatPrefsStore(core.sessions, core.replicas.hot),
        model_menu=ModelMenu(
            provider_models(core.settings), core.ledger.prices, core.settings.chat_models, now
        ),
        persona_max_chars=core.settings.persona_max_chars,
        drill=drill_of(core.ledger, core.i18n, core.settings),
        alert_mutes=operator.mutes,
        media_desk=media.desk,
        confirmations=media.confirmations,
    )


def _add_middlewares(
    core: _Core,
    dp: Dispatcher,
    barrier: IntakeBarrier | None,
    chat: _Chat,
    dropped: Counter,
    window: IntakeWindow,
) -> UpdateRateMiddleware:
    """The dispatcher's middlewares, in the order an update meets them
    (``docs/architecture.md``); returns the update-rate middleware (the app asks it
    which updates are controls)."""
    settings, clock = core.settings, core.clock
    dp.message.outer_middleware(TopicMiddleware())
    rate = UpdateRateMiddleware(
        settings.user_max_updates_per_minute,
        clock,
        core.i18n,
        on_drop=lambda: dropped.labels("update_rate").inc(),
        shared=core.replicas.update_rates(clock),  # replicas count a payer's updates over all
        admin_ids=settings.admin_ids,  # their free commands are not counted
    )
    if barrier is not None:  # the first update middleware: sees every update end
        dp.update.outer_middleware(EndOfUpdate(barrier))
        if window.sized:  # INTAKE_LAG_TARGET_MS: updates in flight follow the loop's lag
            # (the webhook takes the same window's slots before its intake)
            dp.update.outer_middleware(IntakeWindowMiddleware(window))
    # access before anything else: a stranger costs a lookup (bot/middlewares/access.py)
    dp.update.outer_middleware(core.access.gate(settings, core.i18n, core.ledger))
    dp.update.outer_middleware(rate)
    dp.message.outer_middleware(
        ArrivalOrderMiddleware(chat.service, PasteJoiner(clock, settings.paste_join_seconds))
    )
    dp.message.outer_middleware(
        ProfileMiddleware(
            chat.profiles,
            settings.admin_ids,
            settings.user_tz,
            recorder=chat.profiles if core.replicas.hot is not None else None,
        )
    )
    LocaleMiddleware(core.i18n).setup(dp)
    dp.message.outer_middleware(
        IntakeMiddleware(chat.intake, clock, barrier.taken_in if barrier is not None else None)
    )
    return rate
