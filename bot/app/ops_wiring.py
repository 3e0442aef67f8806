"""The operator's safeguards built from :class:`Settings` for :func:`bot.app.factory.create_app`:
shedding (SHED_ORDER, :mod:`bot.ops.shedding`), retention (RETENTION_DAYS,
:mod:`bot.ops.retention`) and ``/drill``'s runner (:mod:`bot.ops.drill`); and the
dispatcher's routers in the order they take updates."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiogram import Dispatcher
from aiogram.utils.i18n import I18n
from sqlalchemy.ext.asyncio import AsyncEngine

from bot.handlers.access import create_access_router
from bot.handlers.admin import create_admin_router
from bot.handlers.books import create_books_router
from bot.handlers.chat import create_chat_router, create_non_text_router
from bot.handlers.common import create_common_router, create_fallback_router
from bot.handlers.conversation import create_conversation_router
from bot.handlers.dashboard import create_dashboard_router
from bot.handlers.digests import create_digest_router
from bot.handlers.errors import create_error_router
from bot.handlers.inline_filters import run_sync_filters_inline
from bot.handlers.me import create_me_router
from bot.handlers.media import create_media_router, link_route
from bot.handlers.moves import create_chat_moves_router
from bot.handlers.persona import create_persona_router
from bot.handlers.regenerate import create_regenerate_router
from bot.handlers.stars import create_stars_router
from bot.handlers.stream import create_stream_router
from bot.middlewares.rate import RateExemption, UpdateRateMiddleware
from bot.ops.drill import Drill
from bot.ops.retention import RetentionJob
from bot.ops.shedding import Shedding, admin_announcer
from bot.settings import Settings
from budget.kernel.clock import Clock
from budget.ledger import Ledger
from budget.pricing.names import CASCADE_ORDER

__all__ = ["drill_of", "include_routers", "retention_of", "route_updates", "shedding_of"]


def shedding_of(
    settings: Settings,
    ledger: Ledger,
    clock: Clock,
    broadcast: Callable[[str], Awaitable[None]],
) -> Shedding:
    """SHED_ORDER's switch, reading the ledger's global windows every SHED_CHECK_SECONDS
    and telling each change through ``broadcast`` (the admins' notifier)."""
    shed_order, shed_at = settings.shed_steps()
    return Shedding(
        ledger.status,
        shed_order,
        shed_at,
        clock,
        admin_announcer(broadcast, settings.budget_tz),
        every_s=settings.shed_check_seconds,
    )


def retention_of(
    settings: Settings, ledger: Ledger, engine: AsyncEngine, clock: Clock
) -> RetentionJob | None:
    """RETENTION_DAYS' daily pruning (``None`` when it is 0: everything is kept)."""
    if not settings.retention_days:
        return None
    return RetentionJob(
        ledger,
        engine,
        settings.budget_tz,
        clock,
        days=settings.retention_days,
        batch=settings.retention_batch_rows,
    )


def drill_of(ledger: Ledger, i18n: I18n, settings: Settings) -> Drill:
    """/drill's runner, its holds priced on the first paid key in cascade order (money
    limits apply to it), else on the first key."""
    keys = [name for name in CASCADE_ORDER if name in settings.provider_keys()]
    paid = [name for name in keys if not ledger.prices.is_free(name)]
    name = (paid or keys)[0]
    key = (name, settings.provider(name).model)
    return Drill(ledger, i18n, settings.budget_tz, key, paid=bool(paid))


def route_updates(dp: Dispatcher, admin_ids: frozenset[int], rate: UpdateRateMiddleware) -> None:
    """The routers (:func:`include_routers`) and what runs around them: the controls'
    pass of the update rate, the magic filters on the loop, the rate exemption."""
    include_routers(dp, admin_ids)
    # controls tagged flags={"rate_limit": False} pass the update rate (bot/middlewares/rate.py)
    rate.exempt(dp)
    # magic filters (F.text …) on the loop, not one thread hop each (bot/handlers/inline_filters.py)
    run_sync_filters_inline(dp)
    gate = RateExemption(rate)
    for name, observer in dp.observers.items():
        if name not in ("update", "error"):
            observer.middleware(gate)


def include_routers(dp: Dispatcher, admin_ids: frozenset[int]) -> None:
    """The routers in the order they take updates: chat text first, so no other router
    takes a text that is not a command (docs/decisions/022-message-path.md)."""
    dp.include_router(create_error_router())
    dp.include_router(create_chat_router(link=link_route()))  # a lone link: a page to read
    dp.include_router(create_access_router())  # my_chat_member only
    dp.include_router(create_stars_router())  # payments: before the media and non-text routers
    dp.include_router(create_books_router(admin_ids))
    dp.include_router(create_admin_router(admin_ids))
    dp.include_router(create_dashboard_router(admin_ids))
    dp.include_router(create_stream_router())
    dp.include_router(create_regenerate_router())
    dp.include_router(create_common_router())
    dp.include_router(create_persona_router())
    dp.include_router(create_digest_router())
    dp.include_router(create_me_router())
    dp.include_router(create_conversation_router())
    dp.include_router(create_chat_moves_router())  # service messages: after every text router
    dp.include_router(create_fallback_router())
    dp.include_router(create_media_router())
    dp.include_router(create_non_text_router())
