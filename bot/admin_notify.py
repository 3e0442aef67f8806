"""Messages to admins that nobody asked for: an automatic kill, a disabled provider key.

Each event is sent once to every admin (``ADMIN_IDS``) as a template; a failure to
reach one admin is logged and does not stop the others.
"""

from __future__ import annotations

import logging

from aiogram import Bot
from aiogram.exceptions import TelegramAPIError
from aiogram.utils.i18n import I18n
from aiogram.utils.i18n import gettext as _

from bot.delivery import send_text
from bot.i18n import in_locale
from budget.clock import Clock
from budget.status import KillState
from llm.cascade import CascadeEvent

__all__ = ["AdminNotifier"]

log = logging.getLogger(__name__)


class AdminNotifier:
    """Sends admin notices.

    Args:
        bot: the aiogram bot.
        i18n: translations (admin notices are in English).
        admin_ids: who gets them.
        clock: the one clock.
    """

    def __init__(self, bot: Bot, i18n: I18n, admin_ids: frozenset[int], clock: Clock) -> None:
        self._bot = bot
        self._i18n = i18n
        self._admins = sorted(admin_ids)
        self._clock = clock

    async def _broadcast(self, text: str) -> None:
        for admin in self._admins:
            try:
                await send_text(self._bot, admin, text, clock=self._clock)
            except TelegramAPIError as exc:
                log.warning("could not notify admin %s: %s", admin, exc.message)

    async def auto_kill(self, state: KillState) -> None:
        """The burn-rate trigger tripped the kill switch (called once per trip)."""
        with in_locale(self._i18n, "en"):
            text = _(
                "🛑 The burn-rate trigger tripped the kill switch ({reason}). "
                "New LLM work is refused; work in flight finishes. "
                "Check /budget, then /unkill when safe."
            ).format(reason=state.reason)
        await self._broadcast(text)

    async def cascade_event(self, event: CascadeEvent) -> None:
        """Provider events worth an admin's attention (a key disabled after an auth failure)."""
        if event.kind != "key_disabled":
            return
        with in_locale(self._i18n, "en"):
            text = _(
                "🔑 Provider key {name} was disabled after an authentication failure; the "
                "cascade goes on without it. Fix the key, then /providers enable {name}."
            ).format(name=event.provider)
        await self._broadcast(text)
