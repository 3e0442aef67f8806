"""Admin commands: /budget, /kill, /unkill, /limit, /team, /plan, /providers,
/digest_now, /drill, /alerts, who may use the bot (/allow, /deny, /ban, /unban, /access,
/invite) and /refund (a Telegram Stars payment).

The router's first filter checks ADMIN_IDS, before any argument is read: for anyone
else — and for any message sent on behalf of a chat (``sender_chat``) — no handler here
matches, so the update falls through to the fallback router and gets the same reply as
a typo ("unknown command" in private chats, nothing in groups) — nothing leaks, nothing
changes. A command addressed to another bot (``/kill@other_bot``) does not match
aiogram's ``Command`` filter (it compares the mention with our username from getMe).
Admin reports are in English.

One module per command group: :mod:`~bot.handlers.admin.budget`,
:mod:`~bot.handlers.admin.kill`, :mod:`~bot.handlers.admin.limits` (/limit, /team),
:mod:`~bot.handlers.admin.plans` (/plan), :mod:`~bot.handlers.admin.access`,
:mod:`~bot.handlers.admin.providers`, :mod:`~bot.handlers.admin.digest_now`,
:mod:`~bot.handlers.admin.drill`, :mod:`~bot.handlers.admin.alerts`; what they
share (the filter, the settings view, user and team arguments) is in
:mod:`~bot.handlers.admin.base`.
"""

from __future__ import annotations

from aiogram import Router
from aiogram.filters import Command

from bot.handlers.admin.access import (
    on_access,
    on_allow,
    on_ban,
    on_deny,
    on_invite,
    on_unban,
)
from bot.handlers.admin.alerts import on_alerts
from bot.handlers.admin.base import IsAdmin
from bot.handlers.admin.budget import on_budget
from bot.handlers.admin.digest_now import on_digest_now
from bot.handlers.admin.drill import on_drill
from bot.handlers.admin.kill import on_kill, on_unkill
from bot.handlers.admin.limits import on_limit, on_team
from bot.handlers.admin.plans import on_plan
from bot.handlers.admin.providers import on_providers
from bot.handlers.admin.refunds import on_refund
from bot.middlewares.rate import NOT_RATE_LIMITED, SPENDS

__all__ = ["create_admin_router"]


def create_admin_router(admin_ids: frozenset[int]) -> Router:
    """The admin router; every handler is behind :class:`~bot.handlers.admin.base.IsAdmin`."""
    router = Router(name="admin")
    router.message.filter(IsAdmin(admin_ids))
    router.message.register(on_budget, Command("budget"))
    # the admin check again as the handler's own first filter: the update rate's
    # exemption (bot/middlewares/rate.py) tests a handler's own filters before the router's
    router.message.register(on_kill, IsAdmin(admin_ids), Command("kill"), flags=NOT_RATE_LIMITED)
    router.message.register(on_unkill, Command("unkill"))
    router.message.register(on_limit, Command("limit"))
    router.message.register(on_team, Command("team"))
    router.message.register(on_plan, Command("plan"))
    router.message.register(on_allow, Command("allow"))
    router.message.register(on_deny, Command("deny"))
    router.message.register(on_ban, Command("ban"))
    router.message.register(on_unban, Command("unban"))
    router.message.register(on_access, Command("access"))
    router.message.register(on_invite, Command("invite"))
    router.message.register(on_refund, Command("refund"))
    router.message.register(on_providers, Command("providers"))
    router.message.register(on_digest_now, Command("digest_now"), flags=SPENDS)
    router.message.register(on_drill, Command("drill"))
    router.message.register(on_alerts, Command("alerts"))
    return router
