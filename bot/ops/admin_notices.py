"""Messages to admins that nobody asked for: an automatic kill, a disabled provider key,
the alerts before the caps and the spend reports.

Each event is sent once to every admin (``ADMIN_IDS``) as a template; a failure to
reach one admin is logged and does not stop the others. The incident notices are in
English; the alerts and reports (:meth:`AdminNotifier.tell`) in each admin's language
(their /lang choice, else English).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from aiogram import Bot
from aiogram.exceptions import TelegramAPIError
from aiogram.utils.i18n import I18n
from aiogram.utils.i18n import gettext as _

from bot.chat.delivery import send_text
from bot.text.i18n import in_locale
from budget.kernel.clock import Clock
from budget.status import KillState
from llm.cascade.cascade import CascadeEvent

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
        self._storage_told: set[str] = set()
        #: an admin's language (their profile's); set by the composition root
        self.language_of: Callable[[int], Awaitable[str]] | None = None

    @property
    def admins(self) -> list[int]:
        """``ADMIN_IDS``, sorted."""
        return list(self._admins)

    async def _language(self, admin: int) -> str:
        if self.language_of is None:
            return "en"
        try:
            return await self.language_of(admin)
        except Exception as exc:  # noqa: BLE001 - a notice in English beats none
            log.warning(
                "admin %s's language unreadable (%s): in English", admin, type(exc).__name__
            )
            return "en"

    async def tell(self, render: Callable[[], str]) -> int:
        """Send ``render()`` to every admin, rendered in that admin's language; returns
        how many admins it reached."""
        reached = 0
        for admin in self._admins:
            with in_locale(self._i18n, await self._language(admin)):
                text = render()
            try:
                if await send_text(self._bot, admin, text, clock=self._clock):
                    reached += 1
            except TelegramAPIError as exc:
                log.warning("could not notify admin %s: %s", admin, exc.message)
        return reached

    async def broadcast(self, text: str) -> None:
        """Send ``text`` (a finished English notice) to every admin."""
        await self._broadcast(text)

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

    async def storage_failed(self, reason: str) -> None:
        """The database failed (once per reason and process): ``deleted``/``replaced``
        (the file was removed under the running bot), ``storage`` (SQLite: read-only,
        full disk, I/O error) or ``server`` (PostgreSQL: the server cannot be reached or
        does not take the ledger's queries) or ``timeout`` (PostgreSQL: a lock held
        by another session, or no pool connection, past its deadline). The ledger
        fails closed: no provider call is made."""
        if reason in self._storage_told or (
            reason in ("storage", "server", "timeout") and self._storage_told
        ):
            return  # one alert per incident: a lost file also fails every later write
        self._storage_told.add(reason)
        with in_locale(self._i18n, "en"):
            if reason in ("deleted", "replaced"):
                text = _(
                    "🗄 The database file was {how} while the bot was running. The ledger "
                    "fails closed: no paid or free LLM call is made until the bot is "
                    "restarted on a good database."
                ).format(how=reason)
            elif reason == "timeout":
                text = _(
                    "🗄 The ledger's database queries are timing out: a lock held by "
                    "another session (a long transaction, a manual query, a migration "
                    "or backup tool on the ledger's tables) or every connection busy "
                    "past the deadline (DATABASE_LOCK_TIMEOUT_SECONDS, "
                    "DATABASE_POOL_TIMEOUT_SECONDS). The ledger fails closed: no LLM call "
                    "is made while it lasts; /kill still works. Look for the blocking "
                    "session in pg_stat_activity (pg_blocking_pids)."
                )
            elif reason == "server":
                text = _(
                    "🗄 The database server cannot be reached or does not take the "
                    "ledger's queries (server down, network, login, disk). The ledger "
                    "fails closed: no LLM call is made until the server answers again; "
                    "the bot reconnects by itself."
                )
            else:
                text = _(
                    "🗄 The database cannot be written (read-only, full disk or I/O "
                    "error). The ledger fails closed: no LLM call is made until it can "
                    "write again; /budget shows what can still be read."
                )
        await self._broadcast(text)

    async def cascade_event(self, event: CascadeEvent) -> None:
        """Provider events worth an admin's attention: a key disabled (auth failure or
        no balance), a free key parked longer than an hour, a usage anomaly."""
        with in_locale(self._i18n, "en"):
            if event.kind == "key_disabled":
                text = _(
                    "🔑 Provider key {name} was disabled after an authentication failure; "
                    "the cascade goes on without it. Fix the key, then "
                    "/providers enable {name}."
                ).format(name=event.provider)
            elif event.kind == "key_disabled_balance":
                text = _(
                    "💳 Provider key {name} was disabled: its account has no balance or "
                    "quota left ({detail}). The cascade goes on without it. Top it up, "
                    "then /providers enable {name}."
                ).format(name=event.provider, detail=event.detail)
            elif event.kind == "key_parked":
                text = _(
                    "🅿️ Free provider key {name} is cooling down for more than an hour "
                    "({detail}); until then its traffic goes to the next providers, "
                    "possibly the paid one."
                ).format(name=event.provider, detail=event.detail)
            elif event.kind == "usage_anomaly":
                text = _("⚠️ Provider {name} reported usage Kopek does not trust: {detail}.").format(
                    name=event.provider, detail=event.detail
                )
            else:
                return
        await self._broadcast(text)
