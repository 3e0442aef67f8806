"""Typed data that reaches handlers (aiogram workflow data + middleware data).

The types here import no handler: what a handler module builds for the dispatcher (the
admin reports' view of the settings, the books commands' desk) is named by a protocol of
what it offers, which the handler's class satisfies.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Protocol, TypedDict

if TYPE_CHECKING:
    from aiogram.utils.i18n import I18n
    from prometheus_client import Counter
    from sqlalchemy.ext.asyncio import AsyncEngine

    from bot.access.refunds import WalletRefunds
    from bot.access.sales import PlanSales
    from bot.access.store import AccessBook
    from bot.chat.confirm import Confirmations
    from bot.chat.deferral import FloodDeferral
    from bot.chat.duplicates import DuplicateGate
    from bot.chat.model_menu import ModelMenu
    from bot.chat.notices import RateNotices
    from bot.chat.outbox import Outbox
    from bot.chat.plans import UserPlans
    from bot.chat.service import ChatService
    from bot.chat.streaming.metrics import StreamMetrics
    from bot.chat.streaming.registry import StreamRegistry
    from bot.chat.streaming.session import StreamConfig
    from bot.media.desk import MediaDesk
    from bot.middlewares.languages import ReplyLanguages
    from bot.ops.admin_notices import AdminNotifier
    from bot.ops.dashboard.view import OperatorView
    from bot.ops.drill import Drill
    from bot.ops.mutes import AlertMutes
    from bot.storage.chat_prefs import ChatPrefsStore
    from bot.storage.moves import ChatMoves
    from bot.storage.repos import History, Intake
    from bot.storage.summaries import CostFooters, Summaries
    from bot.storage.values import Preferences
    from budget.books.stops import StopBook
    from budget.kernel.clock import Clock
    from budget.ledger import Ledger
    from budget.plans import Plans
    from llm.cascade.cascade import Cascade
    from scheduler.runner import DigestRunner
    from scheduler.service import DigestService

__all__ = [
    "BooksDeskPort",
    "IntakeStatus",
    "ProfileStore",
    "SettingsView",
    "UserContext",
    "WorkflowData",
]


class IntakeStatus(StrEnum):
    """What became of a message, as a handler returns it; the intake middleware
    stores it (``seen_messages.status``). A handler that returns anything else leaves
    the default: ``command`` for a command, ``answered`` otherwise."""

    ANSWERED = "answered"
    COMMAND = "command"
    REFUSED = "refused"
    FAILED = "failed"
    STALE = "stale"
    JOINED = "joined"  # a later part of a long paste, answered with its first part
    UNDELIVERABLE = "undeliverable"  # Telegram refused the send (400/403)
    DROPPED = "dropped"  # webhook: taken in, then dropped before a handler (update rate)
    DEFERRED = "deferred"  # the chat was under a long flood wait: not answered, nothing spent


class SettingsView(Protocol):
    """What admin reports show of the settings, no secrets
    (:class:`bot.handlers.admin.base.AdminView`)."""

    @property
    def tz(self) -> str:
        """BUDGET_TZ: the zone of the budget's day and month windows."""
        ...

    @property
    def has_paid_anchor(self) -> bool:
        """Whether the paid anchor (DeepSeek) has a key."""
        ...


class BooksDeskPort(Protocol):
    """What the books commands share (:class:`bot.handlers.books.BooksDesk`): the
    database and ledger they read, and the zone exports default to."""

    @property
    def engine(self) -> AsyncEngine: ...

    @property
    def ledger(self) -> Ledger: ...

    @property
    def budget_tz(self) -> str: ...


class WorkflowData(TypedDict):
    """Everything ``create_app`` hands the dispatcher (``Dispatcher(**workflow_data)``);
    handlers ask for these by name, next to aiogram's own data and ``user_ctx``."""

    clock: Clock
    chat_service: ChatService
    history: History
    #: groups upgraded to supergroups (the service messages' handler tells it)
    chat_moves: ChatMoves
    profiles: ProfileStore
    #: the language of a reply outside the profile middleware (buttons, errors…)
    languages: ReplyLanguages
    i18n: I18n
    ledger: Ledger
    cascade: Cascade
    digests: DigestService
    intake: Intake
    runner: DigestRunner
    settings_view: SettingsView
    refusals: Counter
    books: BooksDeskPort
    notifier: AdminNotifier
    delivery_failures: Counter
    outbox: Outbox
    #: no paid answer for a chat under a long flood wait (FLOOD_DEFER_SECONDS)
    flood_deferral: FloodDeferral
    streams: StreamRegistry
    stream_config: StreamConfig
    stream_metrics: StreamMetrics
    stop_book: StopBook
    #: ADMIN_IDS, for handlers that treat an admin differently (a Stop by anyone)
    admin_ids: frozenset[int]
    #: STALE_MESSAGE_SECONDS: an older message gets the "send it again" template
    stale_after_s: int
    #: who may use the bot (bot/access/store.py)
    access: AccessBook
    #: the plans (PLANS_FILE)
    plans: Plans
    #: each user's plan, for the features (bot/chat/plans.py)
    user_plans: UserPlans
    #: INVITE_TTL_HOURS: how long an /invite link works unless it says otherwise
    invite_ttl_hours: int
    #: Telegram Stars payments and the plans they buy (bot/access/sales.py)
    plan_sales: PlanSales
    wallet_refunds: WalletRefunds
    #: the operator dashboard's documents; /budget chart draws its picture
    operator_view: OperatorView
    #: DASHBOARD_URL (``None``: no dashboard), the /dashboard button's address
    dashboard_url: str | None
    #: each chat's persona and model (/persona, /model)
    chat_prefs: ChatPrefsStore
    #: the models /model offers, with their prices
    model_menu: ModelMenu
    #: PERSONA_MAX_CHARS
    persona_max_chars: int
    #: /drill's runner (the canary payer's checks of the ledger's guards)
    drill: Drill
    #: the alert types muted with /alerts
    alert_mutes: AlertMutes
    #: voice notes, photos, documents, links: prepared and priced without spending
    media_desk: MediaDesk
    #: the open price questions (Go ahead / Cancel)
    confirmations: Confirmations
    #: who asked for the /cost footer; the history summaries (/history)
    cost_footers: CostFooters
    summaries: Summaries
    #: the same question twice is paid once (bot/chat/duplicates.py)
    duplicates: DuplicateGate
    #: who was told his USER_MAX_PER_MINUTE refusal for its window (bot/chat/notices.py)
    rate_notices: RateNotices


@dataclass(frozen=True, slots=True)
class UserContext:
    """Who is writing, in which language and timezone (set by the profile middleware).

    Attributes:
        user_id: Telegram user id.
        chat_id: chat the update came from.
        language: a code of ``bot.text.i18n.SUPPORTED_LANGUAGES`` (``en``, ``ru``, ``zh``…).
        tz: the user's IANA timezone (their /tz, else DEFAULT_USER_TZ).
        is_admin: the user id is in ADMIN_IDS.
    """

    user_id: int
    chat_id: int
    language: str
    tz: str
    is_admin: bool


class ProfileStore(Protocol):
    """User preferences the bot needs on every update."""

    async def touch(self, user_id: int, chat_id: int, telegram_language: str | None) -> Preferences:
        """Create/refresh the profile (marks the user active again); returns its
        preferences as stored."""
        ...

    async def set_tz(self, user_id: int, tz: str) -> None: ...

    async def set_language(self, user_id: int, language: str) -> None: ...
