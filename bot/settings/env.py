"""The settings classes: :class:`Settings` (everything the bot reads), and the few fields
``python -m bot delete-webhook`` (:class:`BotApiSettings`) and the Alembic command line
(:class:`DatabaseSettings`) need alone. Single values are checked by
:mod:`bot.settings.checks`; the checks across fields are :meth:`Settings._cross_checks`.

Units are in the field names: ``*_usd`` are decimal US dollars as written by the
operator (converted to integer µUSD by :func:`budget.policy.money.usd_to_musd` before the
ledger sees them), ``*_seconds`` seconds, ``*_minutes`` minutes, ``*_tokens`` tokens.
Every variable is documented in ``.env.example``.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Annotated, Literal, cast
from urllib.parse import urlsplit

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_core import PydanticCustomError
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from bot.settings.access import AccessSettings
from bot.settings.checks import (
    TOKEN_PATTERN,
    check_admin_ids,
    check_dashboard_url,
    check_database_url,
    check_digest_time,
    check_http_url,
    check_tz,
    check_webhook_path,
    check_webhook_secret,
    check_webhook_url,
    database_url_passwords,
    parse_admin_ids,
    url_password,
)
from bot.settings.conversation import ConversationSettings
from bot.settings.media import MediaSettings
from bot.settings.months import MonthSettings
from bot.settings.operations import OperatorSettings
from bot.settings.ops import OpsNoticeSettings
from bot.settings.personas import PersonaSettings
from budget.config import DEAD_AFTER_HEARTBEATS
from budget.pricing.names import CASCADE_ORDER, KEYS, family, family_fields, key_field

__all__ = ["BotApiSettings", "DatabaseSettings", "ProviderSettings", "Settings"]

Tier = Literal["free", "paid"]
StreamModePrivate = Literal["draft", "edit", "off"]
StreamModeGroup = Literal["edit", "off"]
#: ``LOG_LEVEL``: the names :mod:`logging` takes, in any case (``debug`` is ``DEBUG``).
LogLevel = Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"]

#: The largest amount any ``*_USD`` setting may hold (a million dollars; its µUSD fits
#: SQLite's 64-bit integers with room for sums). ``1e400`` is a typo, not a budget.
MAX_USD = Decimal(1_000_000)

# Ceilings of the other numbers (``Field(le=...)``; README "Configuration" lists each):
# far above any sane setting, far below what breaks a timedelta, a SQLite INTEGER or a
# C int. Without them ``STALE_MESSAGE_SECONDS=1e26`` started the bot and every chat
# message then failed with OverflowError.
#: Seconds in an hour and in a day: the ceilings of timeouts and of windows/TTLs.
HOUR_S = 3_600
DAY_S = 86_400
#: Minutes in a day: the ceiling of the ``*_MINUTES`` settings.
DAY_MIN = 1_440
#: The ceiling of every ``*_TOKENS`` setting: a million tokens, beyond any model's window.
MAX_TOKENS = 1_000_000
#: The ceiling of per-user counts per minute or day.
MAX_RATE = 1_000_000
#: The cloud Bot API and its download limit ("files of up to 20MB",
#: core.telegram.org/bots/api#getfile), the same figure bot/media/download.py uses.
CLOUD_BOT_API = "https://api.telegram.org"
CLOUD_DOWNLOAD_LIMIT_BYTES = 20 * 1024 * 1024


class BotApiSettings(BaseSettings):
    """``BOT_TOKEN`` and ``TELEGRAM_API_BASE`` only: all ``python -m bot delete-webhook``
    reads (no provider key or limit is needed to remove a webhook). :class:`Settings` is
    these two and everything else, checked the same way."""

    model_config = SettingsConfigDict(
        env_file=".env", env_file_encoding="utf-8", extra="ignore", case_sensitive=False
    )

    bot_token: SecretStr
    telegram_api_base: str = "https://api.telegram.org"

    @field_validator("bot_token", mode="before")
    @classmethod
    def _token_set(cls, value: object) -> object:
        if isinstance(value, str) and not value.strip():
            # BOT_TOKEN= as copied from .env.example: the same "is not set" line as absent
            raise PydanticCustomError("missing", "Field required")
        return value

    @field_validator("bot_token")
    @classmethod
    def _token_shape(cls, value: SecretStr) -> SecretStr:
        if not TOKEN_PATTERN.fullmatch(value.get_secret_value()):
            raise ValueError("does not look like a bot token (<digits>:<secret>, from @BotFather)")
        return value

    @field_validator("telegram_api_base")
    @classmethod
    def _api_base(cls, value: str) -> str:
        return check_http_url(value)

    def secret_values(self) -> list[str]:
        """The bot token and the password of a ``user:password@`` in
        ``TELEGRAM_API_BASE`` (a proxy's credentials), for redaction."""
        password = url_password(self.telegram_api_base)
        return [self.bot_token.get_secret_value(), *([password] if password else [])]


class Settings(
    MediaSettings,
    BotApiSettings,
    AccessSettings,
    MonthSettings,
    ConversationSettings,
    PersonaSettings,
    OpsNoticeSettings,
    OperatorSettings,
):
    """All configuration. See ``.env.example`` for meaning and units of each field."""

    model_config = SettingsConfigDict(
        env_file=".env",
        env_file_encoding="utf-8",
        extra="ignore",
        case_sensitive=False,
        allow_inf_nan=False,  # HOLD_TTL_SECONDS=inf would keep a crashed call's hold forever
    )

    # --- foundation (BOT_TOKEN and TELEGRAM_API_BASE: BotApiSettings) -------------
    telegram_web_base: str = "https://t.me"
    admin_ids: Annotated[frozenset[int], NoDecode] = frozenset()
    database_url: str = "sqlite+aiosqlite:///data/kopek.db"
    budget_tz: str = "UTC"
    default_user_tz: str | None = None
    stale_message_seconds: int = Field(600, ge=0, le=DAY_S)
    #: a chat under a Telegram flood wait longer than this gets no paid answer
    #: (bot/chat/deferral.py); its messages are recorded deferred, one notice at the end
    flood_defer_seconds: int = Field(600, ge=0, le=DAY_S)
    shutdown_grace_seconds: float = Field(20.0, ge=0, le=HOUR_S)
    log_level: LogLevel = "INFO"

    # --- webhook mode (polling when WEBHOOK_URL is unset) ----------------------
    # the public HTTPS URL Telegram posts updates to (the operator's TLS reverse proxy)
    webhook_url: str | None = None
    # Telegram's secret_token: every update carries it in X-Telegram-Bot-Api-Secret-Token
    webhook_secret: SecretStr | None = None
    webhook_listen_host: str = "127.0.0.1"
    webhook_listen_port: int = Field(8080, ge=1, le=65535)
    webhook_path: str = "/telegram"
    # connections Telegram may open at once to deliver updates (Telegram allows 1-100)
    webhook_max_connections: int = Field(40, ge=1, le=100)
    # limits of the webhook port against strangers (docs/webhook.md): seconds from a
    # connection's opening to its first complete request head; seconds to read a body;
    # seconds an idle kept-alive connection stays open; connections open at once (also
    # at most the descriptor limit less 256); bytes of one update
    webhook_header_timeout_seconds: float = Field(10.0, gt=0, le=HOUR_S)
    webhook_body_timeout_seconds: float = Field(10.0, gt=0, le=HOUR_S)
    webhook_idle_timeout_seconds: float = Field(75.0, gt=0, le=HOUR_S)
    webhook_max_open_connections: int = Field(1000, ge=1, le=1_000_000)
    webhook_max_body_bytes: int = Field(1_048_576, ge=1024, le=100_000_000)

    # --- providers ----------------------------------------------------------
    groq_api_key: SecretStr | None = None
    groq_api_key_2: SecretStr | None = None
    mistral_api_key: SecretStr | None = None
    cerebras_api_key: SecretStr | None = None
    deepseek_api_key: SecretStr | None = None
    groq_base_url: str = "https://api.groq.com"
    mistral_base_url: str = "https://api.mistral.ai"
    cerebras_base_url: str = "https://api.cerebras.ai/v1"
    deepseek_base_url: str = "https://api.deepseek.com"
    groq_model: str = "llama-3.3-70b-versatile"
    groq_cheap_model: str = "llama-3.1-8b-instant"
    mistral_model: str = "mistral-small-latest"
    mistral_cheap_model: str = "ministral-8b-latest"
    cerebras_model: str = "llama-3.3-70b"
    cerebras_cheap_model: str = "llama3.1-8b"
    deepseek_model: str = "deepseek-chat"
    deepseek_cheap_model: str = "deepseek-chat"
    groq_tier: Tier = "free"
    mistral_tier: Tier = "free"
    cerebras_tier: Tier = "free"
    deepseek_tier: Tier = "paid"
    provider_timeout_seconds: float = Field(60.0, gt=0, le=HOUR_S)
    cooldown_seconds: float = Field(600.0, ge=0, le=DAY_S)
    # the longest wait a provider's own Retry-After may impose (clamped to [1 s, this])
    cooldown_max_seconds: float = Field(3600.0, ge=1, le=DAY_S)
    breaker_failure_threshold: int = Field(3, ge=1, le=1_000)
    breaker_failure_window_seconds: float = Field(60.0, gt=0, le=DAY_S)
    global_max_inflight_calls: int = Field(8, ge=1, le=10_000)
    degraded_min_output_tokens: int = Field(128, ge=1, le=MAX_TOKENS)
    # streamed answers: the wait for the first chunk and the longest gap between chunks
    provider_first_token_timeout_seconds: float = Field(20.0, gt=0, le=HOUR_S)
    provider_idle_timeout_seconds: float = Field(20.0, gt=0, le=HOUR_S)

    # --- streaming to Telegram ---------------------------------------------------
    stream_mode_private: StreamModePrivate = "draft"
    stream_mode_group: StreamModeGroup = "edit"
    # at most one draft per chat per this many ms (and only when the text grew)
    stream_draft_interval_ms: int = Field(600, ge=100, le=60_000)
    # at most one edit of a streamed group message per this many ms
    stream_edit_interval_ms: int = Field(1500, ge=1000, le=60_000)

    # --- budget -------------------------------------------------------------
    budget_global_daily_usd: Decimal | None = Field(None, ge=0, le=MAX_USD)
    budget_global_hourly_usd: Decimal | None = Field(None, ge=0, le=MAX_USD)
    budget_user_daily_usd: Decimal | None = Field(None, ge=0, le=MAX_USD)
    budget_user_hourly_usd: Decimal | None = Field(None, ge=0, le=MAX_USD)
    budget_team_daily_usd: Decimal | None = Field(None, ge=0, le=MAX_USD)
    budget_team_hourly_usd: Decimal | None = Field(None, ge=0, le=MAX_USD)
    deepseek_daily_cap_usd: Decimal | None = Field(None, ge=0, le=MAX_USD)
    reconcile_tolerance_usd: Decimal = Field(Decimal("0.01"), ge=0, le=MAX_USD)
    groq_billing_tz: str = "UTC"
    mistral_billing_tz: str = "UTC"
    cerebras_billing_tz: str = "UTC"
    deepseek_billing_tz: str = "UTC"
    price_overrides: str = ""  # JSON: {"provider:model": {"input": "0.27", ...}} USD per 1M tokens
    token_safety_factor: Decimal = Field(Decimal("1.25"), le=10)
    hold_ttl_seconds: float = Field(300.0, gt=0, le=DAY_S)
    process_heartbeat_seconds: float = Field(2.0, gt=0, le=HOUR_S)
    process_dead_after_seconds: float = Field(60.0, gt=0, le=DAY_S)
    database_lock_timeout_seconds: float = Field(2.0, gt=0, le=HOUR_S)
    database_pool_timeout_seconds: float = Field(5.0, gt=0, le=HOUR_S)
    operation_max_usd: Decimal = Field(Decimal("0.05"), gt=0, le=MAX_USD)
    operation_max_requests: int = Field(8, ge=1, le=1_000)
    user_max_inflight: int = Field(2, ge=1, le=10_000)
    user_max_per_minute: int = Field(10, ge=1, le=MAX_RATE)
    user_max_updates_per_minute: int = Field(20, ge=1, le=MAX_RATE)
    user_daily_messages: int | None = Field(None, ge=1, le=MAX_RATE)
    auto_kill_window_minutes: int = Field(60, ge=1, le=DAY_MIN)
    auto_kill_fraction: Decimal = Field(Decimal("0.5"), ge=0, le=1)
    auto_kill_usd_per_window: Decimal | None = Field(None, ge=0, le=MAX_USD)

    # --- chat ---------------------------------------------------------------
    chat_max_output_tokens: int = Field(1024, ge=1, le=MAX_TOKENS)
    chat_max_input_tokens: int = Field(4000, ge=1, le=MAX_TOKENS)
    chat_history_max_tokens: int = Field(3000, ge=0, le=MAX_TOKENS)
    intake_max_concurrent: int = Field(50, ge=1, le=10_000)
    intake_lag_target_ms: int = Field(0, ge=0, le=1000)
    poll_intake_wait_seconds: float = Field(5.0, gt=0, le=HOUR_S)
    user_queue_max: int = Field(3, ge=0, le=10_000)
    paste_join_seconds: float = Field(1.5, ge=0, le=10)
    metrics_port: int | None = Field(None, ge=1, le=65535)
    metrics_host: str = "127.0.0.1"
    # the operator dashboard (a Telegram Mini App, docs/admin.md#the-dashboard): its public
    # https URL behind the operator's proxy, served by the webhook server (webhook mode) or
    # the metrics server (polling); how old the signed launch data Telegram gives it may be
    dashboard_url: str | None = None
    dashboard_auth_max_age_seconds: int = Field(3600, ge=60, le=DAY_S)

    # --- digests --------------------------------------------------------------
    digest_stagger_seconds: float = Field(10.0, ge=0, le=HOUR_S)
    digest_llm_concurrency: int = Field(1, ge=1, le=100)
    digest_latest_delay_minutes: int = Field(120, ge=0, le=DAY_MIN)
    digest_max_free_share: Decimal = Field(Decimal("0.8"), ge=0, le=1)
    digest_max_posts: int = Field(30, ge=1, le=1_000)
    digest_summary_max_tokens: int = Field(300, ge=16, le=MAX_TOKENS)
    digest_max_usd: Decimal = Field(Decimal("0.02"), gt=0, le=MAX_USD)
    digest_default_time: str = "09:00"
    fetch_timeout_seconds: float = Field(15.0, gt=0, le=HOUR_S)
    fetch_max_bytes: int = Field(2_000_000, ge=1024, le=100_000_000)
    sub_lookups_per_minute: int = Field(5, ge=1, le=1_000)
    sub_negative_cache_seconds: float = Field(300.0, ge=0, le=DAY_S)

    @field_validator("log_level", mode="before")
    @classmethod
    def _log_level_any_case(cls, value: object) -> object:
        if isinstance(value, str):
            return value.strip().upper() or "INFO"  # LOG_LEVEL= (empty): the default
        return value

    @field_validator("admin_ids", mode="before")
    @classmethod
    def _parse_admin_ids(cls, value: object) -> object:
        return parse_admin_ids(value)

    @field_validator("admin_ids")
    @classmethod
    def _no_service_admins(cls, value: frozenset[int]) -> frozenset[int]:
        return check_admin_ids(value)

    @field_validator("telegram_web_base", *family_fields("base_url"))
    @classmethod
    def _http_url(cls, value: str) -> str:
        return check_http_url(value)

    @field_validator("database_url")
    @classmethod
    def _database_url(cls, value: str) -> str:
        return check_database_url(value)

    @field_validator("webhook_url", mode="before")
    @classmethod
    def _webhook_url(cls, value: object) -> object:
        return check_webhook_url(value)

    @field_validator("dashboard_url", mode="before")
    @classmethod
    def _dashboard_url(cls, value: object) -> object:
        return check_dashboard_url(value)

    @field_validator("webhook_secret", mode="before")
    @classmethod
    def _webhook_secret(cls, value: object) -> object:
        return check_webhook_secret(value)

    @field_validator("webhook_path")
    @classmethod
    def _webhook_path(cls, value: str) -> str:
        return check_webhook_path(value)

    @field_validator("budget_tz", *family_fields("billing_tz"))
    @classmethod
    def _tz(cls, value: str) -> str:
        return check_tz(value)

    @field_validator("digest_default_time")
    @classmethod
    def _digest_time(cls, value: str) -> str:
        return check_digest_time(value)

    @field_validator("default_user_tz")
    @classmethod
    def _user_tz(cls, value: str | None) -> str | None:
        return None if value in (None, "") else check_tz(value)

    @field_validator(*(k.key_field for k in KEYS), mode="before")
    @classmethod
    def _empty_key_is_none(cls, value: object) -> object:
        return None if value == "" else value

    @field_validator(
        "budget_global_daily_usd",
        "budget_global_hourly_usd",
        "budget_user_daily_usd",
        "budget_user_hourly_usd",
        "budget_team_daily_usd",
        "budget_team_hourly_usd",
        "deepseek_daily_cap_usd",
        "auto_kill_usd_per_window",
        "metrics_port",
        "user_daily_messages",
        mode="before",
    )
    @classmethod
    def _empty_is_none(cls, value: object) -> object:
        return None if value == "" else value

    @model_validator(mode="after")
    def _cross_checks(self) -> Settings:
        if not self.provider_keys():
            names = ", ".join(key_field(name).upper() for name in CASCADE_ORDER)
            raise ValueError(f"no provider key set: set at least one of {names}")
        if self.hold_ttl_seconds <= self.provider_timeout_seconds:
            raise ValueError(
                f"HOLD_TTL_SECONDS ({self.hold_ttl_seconds}) must exceed "
                f"PROVIDER_TIMEOUT_SECONDS ({self.provider_timeout_seconds})"
            )
        if self.process_dead_after_seconds < DEAD_AFTER_HEARTBEATS * self.process_heartbeat_seconds:
            raise ValueError(
                f"PROCESS_DEAD_AFTER_SECONDS ({self.process_dead_after_seconds}) must be at least "
                f"{DEAD_AFTER_HEARTBEATS} × PROCESS_HEARTBEAT_SECONDS "
                f"({self.process_heartbeat_seconds}): a live process whose heartbeat runs late "
                "under load would be taken for dead and its holds and messages taken over"
            )
        if (
            self.media_download_max_bytes > CLOUD_DOWNLOAD_LIMIT_BYTES
            and self.telegram_api_base.rstrip("/") == CLOUD_BOT_API
        ):
            raise ValueError(
                f"MEDIA_DOWNLOAD_MAX_BYTES ({self.media_download_max_bytes}) is over the cloud "
                f"Bot API's {CLOUD_DOWNLOAD_LIMIT_BYTES}-byte download limit: set "
                "TELEGRAM_API_BASE to a local Bot API server, or lower it"
            )
        if self.token_safety_factor < 1:
            raise ValueError("TOKEN_SAFETY_FACTOR must be >= 1 (the ceiling is an upper bound)")
        self._check_dashboard()
        if self.webhook_url is not None:
            if self.webhook_secret is None:
                raise ValueError(
                    "WEBHOOK_URL is set but WEBHOOK_SECRET is not: without it anyone who "
                    "finds the URL could post updates; set a random secret_token"
                )
            if self.metrics_port == self.webhook_listen_port:
                raise ValueError(
                    f"METRICS_PORT and WEBHOOK_LISTEN_PORT are both {self.metrics_port}: "
                    "give the metrics endpoint another port"
                )
        return self

    def _check_dashboard(self) -> None:
        """DASHBOARD_URL needs an HTTP server of the bot's (the webhook's, or in polling
        the metrics server's) and a path of its own there."""
        path = self.dashboard_path
        if path is None:
            return
        if self.webhook_url is None and self.metrics_port is None:
            raise ValueError(
                "DASHBOARD_URL is set but in polling mode the dashboard is served by the "
                "metrics server: set METRICS_PORT (docs/admin.md#the-dashboard)"
            )
        hook = self.webhook_path.rstrip("/") + "/"
        if self.webhook_url is not None and (hook.startswith(path) or path.startswith(hook)):
            raise ValueError(
                f"DASHBOARD_URL's path {path} and WEBHOOK_PATH {self.webhook_path} overlap; "
                "give the dashboard a path of its own"
            )

    @property
    def dashboard_path(self) -> str | None:
        """The path the dashboard is served under (DASHBOARD_URL's, ending in ``/``), or
        ``None`` without DASHBOARD_URL."""
        if self.dashboard_url is None:
            return None
        return urlsplit(self.dashboard_url).path or "/"

    @property
    def webhook_mode(self) -> bool:
        """True when updates come by webhook (``WEBHOOK_URL`` set), False for polling."""
        return self.webhook_url is not None

    @property
    def user_tz(self) -> str:
        """Timezone assumed for a user who has not set one (DEFAULT_USER_TZ or BUDGET_TZ)."""
        return self.default_user_tz or self.budget_tz

    def billing_tz(self, key_name: str) -> str:
        """``<PROVIDER>_BILLING_TZ`` of a provider key (``groq2`` bills as Groq); ``UTC``
        for a name that is no key."""
        if key_name not in CASCADE_ORDER:
            return "UTC"
        return str(getattr(self, f"{family(key_name)}_billing_tz"))

    def secret_values(self) -> list[str]:
        """Every secret the settings hold, for redaction: the bot token, the provider
        keys and the password of any ``user:password@`` in a configured URL (a proxy's
        credentials in ``TELEGRAM_API_BASE``; the PostgreSQL password in ``DATABASE_URL``,
        as written and percent-decoded) and ``WEBHOOK_SECRET``."""
        out = [self.bot_token.get_secret_value()]
        out += [k.get_secret_value() for k in self.provider_keys().values()]
        out += database_url_passwords(self.database_url)
        if self.webhook_secret is not None:
            out.append(self.webhook_secret.get_secret_value())
        for field in ("telegram_api_base", "telegram_web_base", *family_fields("base_url")):
            password = url_password(str(getattr(self, field)))
            if password:
                out.append(password)
        return out

    def provider_keys(self) -> dict[str, SecretStr]:
        """Configured provider keys by key name, in cascade order (``budget.pricing.names``)."""
        keys = {name: getattr(self, key_field(name)) for name in CASCADE_ORDER}
        return {name: key for name, key in keys.items() if key is not None}

    def provider(self, name: str) -> ProviderSettings:
        """Base URL, models and tier of key ``name`` (``groq2`` shares ``groq``'s)."""
        fam = family(name)
        return ProviderSettings(
            base_url=str(getattr(self, f"{fam}_base_url")),
            model=str(getattr(self, f"{fam}_model")),
            cheap_model=str(getattr(self, f"{fam}_cheap_model")),
            tier=cast(Tier, getattr(self, f"{fam}_tier")),
        )


@dataclass(frozen=True, slots=True)
class ProviderSettings:
    """One provider's settings (from ``<PROVIDER>_BASE_URL``, ``_MODEL``, ``_CHEAP_MODEL``,
    ``_TIER``)."""

    base_url: str
    model: str
    cheap_model: str
    tier: Tier


class DatabaseSettings(BaseSettings):
    """Only DATABASE_URL, for the Alembic command line (no other variable is required)."""

    model_config = SettingsConfigDict(
        env_file=".env", env_file_encoding="utf-8", extra="ignore", case_sensitive=False
    )

    database_url: str = "sqlite+aiosqlite:///data/kopek.db"

    @field_validator("database_url")
    @classmethod
    def _database_url(cls, value: str) -> str:
        return check_database_url(value)
