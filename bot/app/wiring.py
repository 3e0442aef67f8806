"""Settings → the parts' own config objects: the pieces :func:`bot.app.factory.create_app`
wires together, each a pure function of :class:`~bot.settings.Settings` (USD → µUSD,
milliseconds → seconds), plus the adapter that gives the bot its profile store.

Nothing here starts anything or touches the network.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from bot.chat.service import ChatConfig
from bot.settings import Settings
from bot.settings.ops import WEEKDAYS
from bot.storage.hot import HotPath
from bot.storage.values import Preferences, TouchedIntake
from budget.config import LedgerConfig, OperationCaps
from budget.kernel.clock import Clock
from budget.plans import Plans, load_plans
from budget.policy.money import usd_to_musd
from budget.pricing.names import CASCADE_ORDER
from budget.pricing.prices import ProviderModel
from budget.types import Origin
from llm.cascade.cascade import CascadeConfig
from llm.cascade.factory import ProviderSpec, provider_specs
from llm.router import Route, RouterConfig, Work, route
from scheduler.profiles import LANGUAGES, ProfileRepository, parse_digest_time
from scheduler.runner import DigestConfig

if TYPE_CHECKING:  # bot.ops.watch imports aiogram, which the settings' checks must not
    from bot.chat.streaming.session import StreamConfig
    from bot.middlewares.languages import ReplyLanguages
    from bot.ops.anomaly_watch import AnomalyConfig
    from bot.ops.watch import WatchConfig

__all__ = [
    "ProfileStoreAdapter",
    "admin_language",
    "alerts_off_by_setting",
    "anomaly_config",
    "cascade_config",
    "chat_config",
    "digest_config",
    "ledger_config",
    "provider_models",
    "provider_specs_of",
    "router_config",
    "stream_config",
    "watch_config",
]


def ledger_config(settings: Settings, plans: Plans | None = None) -> LedgerConfig:
    """Settings → the ledger's own config (USD → µUSD); ``plans``: the plans already
    read (default: read ``PLANS_FILE``, raising :class:`budget.plans.PlansFileError`).

    On PostgreSQL the sweeper runs every PROCESS_HEARTBEAT_SECONDS (at most every 30 s,
    the SQLite pace), so a dead process's holds are booked within
    PROCESS_DEAD_AFTER_SECONDS + one heartbeat of its last beat."""
    caps: dict[str, int] = {}
    if settings.deepseek_daily_cap_usd is not None:
        caps["deepseek"] = usd_to_musd(settings.deepseek_daily_cap_usd) or 0
    monthly_caps: dict[str, int] = {}
    if settings.deepseek_monthly_cap_usd is not None:
        monthly_caps["deepseek"] = usd_to_musd(settings.deepseek_monthly_cap_usd) or 0
    digest_requests = max(8, settings.digest_max_posts + 4)
    plans = plans if plans is not None else load_plans(settings.plans_file)
    return LedgerConfig(
        tz=settings.budget_tz,
        global_daily_musd=usd_to_musd(settings.budget_global_daily_usd),
        global_hourly_musd=usd_to_musd(settings.budget_global_hourly_usd),
        user_daily_musd=usd_to_musd(settings.budget_user_daily_usd),
        user_hourly_musd=usd_to_musd(settings.budget_user_hourly_usd),
        team_daily_musd=usd_to_musd(settings.budget_team_daily_usd),
        team_hourly_musd=usd_to_musd(settings.budget_team_hourly_usd),
        global_monthly_musd=usd_to_musd(settings.budget_global_monthly_usd),
        user_monthly_musd=usd_to_musd(settings.budget_user_monthly_usd),
        team_monthly_musd=usd_to_musd(settings.budget_team_monthly_usd),
        month_start_day=settings.budget_month_start_day,
        provider_daily_caps_musd=caps,
        provider_monthly_caps_musd=monthly_caps,
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
        db_lock_timeout_s=settings.database_lock_timeout_seconds,
        db_pool_timeout_s=settings.database_pool_timeout_seconds,
        sweep_interval_s=min(30.0, settings.process_heartbeat_seconds)
        if settings.database_url.startswith("postgresql")
        else 30.0,
        auto_kill_fraction=settings.auto_kill_fraction,
        auto_kill_musd_per_window=usd_to_musd(settings.auto_kill_usd_per_window),
        plans=plans.limits(),
        default_plan=plans.default,
    )


def router_config(settings: Settings) -> RouterConfig:
    """Settings → the cheap-model router's knobs (``llm.router``)."""
    return RouterConfig(
        enabled=settings.chat_router == "on",
        small_max_tokens=settings.router_small_max_tokens,
        small_max_context_tokens=settings.router_small_max_context_tokens,
    )


def stream_config(settings: Settings, shed: Callable[[], bool] | None = None) -> StreamConfig:
    """Settings → how answers stream (STREAM_MODE_*, STREAM_*_INTERVAL_MS in seconds);
    ``shed`` is true while shedding has switched streaming off (:mod:`bot.ops.shedding`)."""
    # imported here: the streaming session needs aiogram, the start-up checks must not
    from bot.chat.streaming.session import StreamConfig

    return StreamConfig(
        private=settings.stream_mode_private,
        group=settings.stream_mode_group,
        draft_interval_s=settings.stream_draft_interval_ms / 1000,
        edit_interval_s=settings.stream_edit_interval_ms / 1000,
        shed=shed,
    )


def chat_config(settings: Settings) -> ChatConfig:
    """Settings → the chat service's knobs."""
    return ChatConfig(
        max_output_tokens=settings.chat_max_output_tokens,
        max_input_tokens=settings.chat_max_input_tokens,
        history_max_tokens=settings.chat_history_max_tokens,
        user_max_inflight=settings.user_max_inflight,
        user_queue_max=settings.user_queue_max,
        router=router_config(settings),
    )


def provider_models(settings: Settings) -> list[ProviderModel]:
    """Every (provider, model, tier) the cascade may call, for the price card."""
    out: list[ProviderModel] = []
    for name in settings.provider_keys():
        provider = settings.provider(name)
        for model in dict.fromkeys((provider.model, provider.cheap_model)):
            out.append(ProviderModel(provider=name, model=model, tier=provider.tier))
    return out


class ProfileStoreAdapter:
    """Adapter: ``scheduler.profiles.ProfileRepository`` as the bot's :class:`ProfileStore`.

    Args:
        repo: the profiles.
        hot: :meth:`touch` (every update) runs as one step of the message path's
            statements (:mod:`bot.storage.hot`) with the same effect as the
            repository's ``get_or_create`` + ``mark_active``; then ``clock``,
            ``default_language`` and ``default_digest_time`` (the repository's) are used.
    """

    def __init__(
        self,
        repo: ProfileRepository,
        *,
        hot: HotPath | None = None,
        clock: Clock | None = None,
        default_language: str = "en",
        default_digest_time: str = "09:00",
    ) -> None:
        self._repo = repo
        self._hot = hot if clock is not None else None
        self._clock = clock
        self._default_language = default_language
        self._default_time = default_digest_time

    async def touch(self, user_id: int, chat_id: int, telegram_language: str | None) -> Preferences:
        # A user's private chat id equals their user id; digests go there.
        if self._hot is not None and self._clock is not None:
            return await self._hot.touch_profile(
                user_id,
                user_id,
                self._language_of(telegram_language),
                self._default_time,
                self._clock.now(),
            )
        profile = await self._repo.get_or_create(user_id, user_id, telegram_language)
        if not profile.active:
            await self._repo.mark_active(user_id)
        return Preferences(profile.language, profile.tz)

    async def touch_and_record(
        self,
        user_id: int,
        telegram_language: str | None,
        *,
        chat_id: int,
        message_id: int,
        payer: int,
        status: str,
        thread_id: int | None,
        pick: Callable[[str | None], str],
    ) -> TouchedIntake | None:
        """:meth:`touch` and the message's intake record in one writer step
        (:meth:`bot.storage.hot.HotPath.touch_and_record`); ``None`` when there is
        no hot path (nothing done: touch and record separately)."""
        if self._hot is None or self._clock is None:
            return None
        return await self._hot.touch_and_record(
            user_id=user_id,
            language=self._language_of(telegram_language),
            digest_time=self._default_time,
            chat_id=chat_id,
            message_id=message_id,
            payer=payer,
            status=status,
            thread_id=thread_id,
            pick=pick,
            now=self._clock.now(),
        )

    def _language_of(self, telegram_language: str | None) -> str:
        """A new profile's language (as ``ProfileRepository.get_or_create`` picks it)."""
        if telegram_language and telegram_language.lower()[:2] in LANGUAGES:
            return telegram_language.lower()[:2]
        return self._default_language

    async def stored_language(self, user_id: int) -> str | None:
        """The user's stored language (their /lang choice, else what Telegram said when
        they first wrote); ``None`` for a user without a profile. Only reads."""
        profile = await self._repo.get(user_id)
        return profile.language if profile is not None else None

    def reply_languages(self) -> ReplyLanguages:
        """The languages of replies outside the profile middleware, read from here."""
        from bot.middlewares.languages import ReplyLanguages  # aiogram: not at import time

        return ReplyLanguages(self.stored_language)

    async def set_tz(self, user_id: int, tz: str) -> None:
        await self._repo.set_tz(user_id, tz)

    async def set_language(self, user_id: int, language: str) -> None:
        await self._repo.set_language(user_id, language)


def cascade_config(settings: Settings) -> CascadeConfig:
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
        token_safety_factor=settings.token_safety_factor,
        free_share_ppm=int(settings.free_share_max * 1_000_000),
    )


def provider_specs_of(settings: Settings) -> list[ProviderSpec]:
    providers = {name: settings.provider(name) for name in CASCADE_ORDER}
    return provider_specs(
        keys={k: v.get_secret_value() for k, v in settings.provider_keys().items()},
        base_urls={n: p.base_url for n, p in providers.items()},
        models={n: p.model for n, p in providers.items()},
        cheap_models={n: p.cheap_model for n, p in providers.items()},
        tiers={n: p.tier for n, p in providers.items()},
    )


def digest_config(settings: Settings) -> DigestConfig:
    return DigestConfig(
        stagger_s=settings.digest_stagger_seconds,
        llm_concurrency=settings.digest_llm_concurrency,
        latest_delay_minutes=settings.digest_latest_delay_minutes,
        max_free_share=float(settings.digest_max_free_share),
        max_posts=settings.digest_max_posts,
        summary_max_tokens=settings.digest_summary_max_tokens,
        max_musd=usd_to_musd(settings.digest_max_usd) or 0,
        default_tz=settings.user_tz,
        small_model=route(Work.DIGEST, router_config(settings)) is Route.SMALL,
    )


def watch_config(settings: Settings) -> WatchConfig:
    """ALERT_AT, REPORT_TIME and REPORT_WEEKLY → the operator's watch (bot/ops/watch.py)."""
    from bot.ops.watch import WatchConfig

    return WatchConfig(
        tz=settings.budget_tz,
        thresholds=settings.alert_at,
        report_time=parse_digest_time(settings.report_time) if settings.report_time else None,
        report_weekly=WEEKDAYS.index(settings.report_weekly) if settings.report_weekly else None,
    )


def anomaly_config(settings: Settings) -> AnomalyConfig:
    """The anomaly alerts' settings → their config (bot/ops/anomaly_watch.py)."""
    from datetime import timedelta

    from bot.ops.anomaly_watch import AnomalyConfig

    return AnomalyConfig(
        tz=settings.budget_tz,
        loop_calls=settings.loop_alert_calls,
        loop_span=timedelta(minutes=settings.loop_alert_minutes),
        quota_lead=timedelta(minutes=settings.quota_alert_minutes),
        cost_ratio=settings.cost_alert_ratio,
        cost_min_answers=settings.cost_alert_min_answers,
        month_alert_musd=usd_to_musd(settings.month_alert_usd) or 0,
        day_forecast=bool(settings.alert_at),
    )


def alerts_off_by_setting(settings: Settings) -> dict[str, str]:
    """The alert types a setting turns off, with that setting (what /alerts shows)."""
    off = {
        "limits": "ALERT_AT empty" if not settings.alert_at else "",
        "loop": "LOOP_ALERT_CALLS=0" if not settings.loop_alert_calls else "",
        "quota": "QUOTA_ALERT_MINUTES=0" if not settings.quota_alert_minutes else "",
        "cost": "COST_ALERT_RATIO=0" if not settings.cost_alert_ratio else "",
        "forecast": (
            "ALERT_AT empty and MONTH_ALERT_USD=0"
            if not settings.alert_at and not settings.month_alert_usd
            else ""
        ),
    }
    return {kind: why for kind, why in off.items() if why}


def admin_language(repo: ProfileRepository) -> Callable[[int], Awaitable[str]]:
    """An admin's language for the notices told in it: their profile's (/lang, else
    what Telegram said when they first wrote), English for an admin who never wrote."""

    async def language_of(admin: int) -> str:
        profile = await repo.get(admin)
        return profile.language if profile is not None and profile.language in LANGUAGES else "en"

    return language_of
