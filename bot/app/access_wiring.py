"""Who may use the bot, on what terms, built from :class:`Settings` for
:func:`bot.app.factory.create_app`: the access lists kept in memory
(:mod:`bot.access.store`), each user's plan (:mod:`bot.chat.plans`), the Telegram Stars
sales (:mod:`bot.access.sales`) and the gate every update passes first
(:mod:`bot.middlewares.access`)."""

from __future__ import annotations

from dataclasses import dataclass

from aiogram import Bot
from aiogram.utils.i18n import I18n
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from bot.access.plan_refunds import PlanRefunds
from bot.access.refunds import WalletRefunds
from bot.access.sales import PlanSales
from bot.access.stars import StarPayments
from bot.access.store import AccessBook, AccessStore
from bot.access.wallet import WalletSales
from bot.chat.plans import UserPlans
from bot.middlewares.access import AccessGate
from bot.settings import Settings
from budget.kernel.clock import Clock
from budget.ledger import Ledger
from budget.plans import Plans
from scheduler.profiles import ProfileRepository

__all__ = ["AccessParts", "build_access"]


@dataclass(frozen=True, slots=True)
class AccessParts:
    """The access side of the app: ``book`` (the lists), ``user_plans``, ``sales`` and
    the wallet top-ups' ``refunds`` (started and stopped by the app)."""

    book: AccessBook
    user_plans: UserPlans
    sales: PlanSales
    clock: Clock
    refunds: WalletRefunds

    def gate(self, settings: Settings, i18n: I18n, ledger: Ledger) -> AccessGate:
        """The update middleware that checks access before anything else: a stranger
        costs one lookup in memory."""
        return AccessGate(
            self.book,
            i18n,
            self.clock,
            ledger,
            self.user_plans,
            tries_per_hour=settings.invite_tries_per_hour,
            tz=settings.budget_tz,
        )


def build_access(
    settings: Settings,
    sessions: async_sessionmaker[AsyncSession],
    clock: Clock,
    ledger: Ledger,
    plans: Plans,
    bot: Bot,
    i18n: I18n,
    *,
    shared: bool,
) -> AccessParts:
    """ACCESS_MODE, ALLOWED_USER_IDS, ALLOWED_CHAT_IDS and ADMIN_IDS as the lists in
    memory (``shared``: on a PostgreSQL database several replicas write, so they are
    reloaded every few seconds too), the users' plans, the Stars sales of them and the
    refunds of wallet top-ups (the payer told in their profile's language)."""
    book = AccessBook(
        AccessStore(sessions, clock),
        clock,
        allowlist=settings.access_mode == "allowlist",
        admins=settings.admin_ids,
        users=settings.allowed_user_ids,
        chats=settings.allowed_chat_ids,
        shared=shared,
    )
    user_plans = UserPlans(ledger, plans, clock)
    wallet = WalletSales(ledger, settings.wallet_topup_stars, settings.wallet_musd_per_star)
    sales = PlanSales(StarPayments(sessions, clock), ledger, user_plans, clock, wallet)
    profiles = ProfileRepository(sessions, clock, default_digest_time=settings.digest_default_time)

    async def language_of(user_id: int) -> str | None:
        profile = await profiles.get(user_id)
        return None if profile is None else profile.language

    plan_refunds = PlanRefunds(sales, bot)
    refunds = WalletRefunds(ledger, bot, clock, language_of, i18n, plans=plan_refunds)
    return AccessParts(book, user_plans, sales, clock, refunds)
