"""/dashboard: the button that opens the operator dashboard (a Telegram Mini App,
:mod:`bot.ops.dashboard`).

An admin writing as themselves in a private chat gets a message with one inline
``web_app`` button to DASHBOARD_URL; in a group, a line saying Telegram opens it only in
a private chat (Telegram refuses ``web_app`` buttons there); without DASHBOARD_URL, how
to turn it on. Anyone else falls through to the fallback router's "unknown command", as
for every admin command (:class:`bot.handlers.admin.base.IsAdmin`). The handler is a module
function; its dependencies (``dashboard_url``) come from the dispatcher's workflow data.
"""

from __future__ import annotations

from aiogram import Bot, Router
from aiogram.filters import Command
from aiogram.types import InlineKeyboardButton, InlineKeyboardMarkup, Message, WebAppInfo

from bot.chat.delivery import send_text
from bot.handlers.admin.base import IsAdmin
from bot.text import templates
from budget.kernel.clock import Clock

__all__ = ["create_dashboard_router", "on_dashboard"]


async def on_dashboard(
    message: Message, bot: Bot, clock: Clock, dashboard_url: str | None = None
) -> None:
    """Answer /dashboard (see the module docstring)."""
    chat_id = message.chat.id
    if dashboard_url is None:
        await send_text(bot, chat_id, templates.dashboard_off_text(), clock=clock)
        return
    if message.chat.type != "private":
        await send_text(bot, chat_id, templates.dashboard_private_only_text(), clock=clock)
        return
    button = InlineKeyboardButton(
        text=templates.dashboard_button_text(), web_app=WebAppInfo(url=dashboard_url)
    )
    await bot.send_message(
        chat_id,
        templates.dashboard_text(),
        reply_markup=InlineKeyboardMarkup(inline_keyboard=[[button]]),
    )


def create_dashboard_router(admin_ids: frozenset[int]) -> Router:
    """The /dashboard router: :func:`on_dashboard` behind :class:`IsAdmin`."""
    router = Router(name="dashboard")
    router.message.filter(IsAdmin(admin_ids))
    router.message.register(on_dashboard, Command("dashboard"))
    return router
