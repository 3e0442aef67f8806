"""Per-user update rate: every update a user sends counts, templates and commands too.

Replies that cost no money still cost Telegram sends, database writes and loop time; a
user sending stickers or unknown commands as fast as his client allows must not get a
reply to each. :class:`UpdateRateMiddleware` (an outer middleware on ``update``, so it sees
messages, commands, callback queries alike, before any handler or database write) lets
at most ``limit`` updates per user through in any 60 s; the rest are dropped in silence,
except for one notice per user per minute (in a private chat only: a group is not told
about one member).

Sliding window on the injected monotonic clock, worked timeline with ``limit=3``:
updates at t=0, 1, 2 pass; t=3 is dropped and gets the notice; t=30 is dropped silently;
t=60.5 passes (t=0 left the window); t=63 is dropped and gets a notice again (the last
one was more than 60 s ago).

Controls that only reduce spend or stop work are never dropped: a handler tagged
``flags={"rate_limit": False}`` (``/kill`` from an admin, ``/stop``, the Stop button, a
draft's Stop) still runs for a user over the rate. The limit sits on ``update`` (outer)
so that a flood costs no profile or intake write; aiogram resolves the handler (and so
its flags) only later, for inner middlewares. So an update over the rate is let on only
if the *own* filters of a handler tagged exempt match it (:meth:`exempt`, cheap pure
checks: a command name, the admin id, a callback prefix) and :class:`RateExemption` (an inner
middleware) drops it still if the handler aiogram picks is not tagged exempt — e.g. a
non-admin's ``/kill``, which stays dropped like any unknown command. An exempt update
over the rate is not counted and gets no too-fast notice; it makes no provider call
(controls only stop work), and its handler is told ``over_rate=True`` so that it stays
silent when it had nothing to stop.

An admin's commands (a message from a user id in ``ADMIN_IDS``, never one sent on behalf
of a chat, whose text or caption begins with ``/``) are not counted at all: ``/budget``,
``/limit``, ``/access`` and the rest cost no money, and an operator at work sends more than
``limit`` a minute. The exception is a handler tagged ``flags=SPENDS`` (``/digest_now``,
which asks the summariser; a photo, document or recording whose caption begins with
``/``, which goes to a provider): :class:`RateExemption` counts such an update when aiogram
has chosen that handler, and drops it over the rate like any other. An admin's messages to
the LLM (text without ``/``) are counted as everyone's.

Replicas sharing a PostgreSQL database (``shared``: :class:`bot.storage.pg_rates.PgUpdateRates`)
count a payer's updates over all of them: an update this process's own window lets
through is counted once more in the payer's shared row (the same sliding window over
every replica's updates) and dropped when the shared window is full; the too-fast notice
goes out once a minute whichever replica drops. If the shared row cannot be written the
update is judged by this process's window alone (logged). A control within this
process's window is not counted in the shared row: it never waits for the database.

Hand-written, not ``limits``/``aiolimiter``: both read the system clock, and the bot's
time comes only from the injected clock; this is twenty lines over a deque.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from aiogram import BaseMiddleware, Bot, Router
from aiogram.dispatcher.event.handler import HandlerObject
from aiogram.dispatcher.flags import get_flag
from aiogram.exceptions import TelegramAPIError
from aiogram.types import Chat, Message, TelegramObject, Update, User
from aiogram.utils.i18n import I18n

from bot.chat.delivery import send_text
from bot.chat.payer import payer_id
from bot.middlewares.languages import languages_in
from bot.text import templates
from bot.text.i18n import in_locale
from budget.errors import BudgetError
from budget.kernel.clock import Clock

__all__ = [
    "ADMIN_UNCOUNTED",
    "NOT_RATE_LIMITED",
    "OVER_RATE",
    "RATE_LIMIT_FLAG",
    "SPENDS",
    "SPENDS_FLAG",
    "RateExemption",
    "UpdateRateMiddleware",
]

log = logging.getLogger(__name__)

#: The window, seconds.
WINDOW_S = 60.0
#: Users tracked before the idle ones are forgotten (a bound on memory).
MAX_TRACKED_USERS = 10_000

#: The handler flag: ``flags={RATE_LIMIT_FLAG: False}`` exempts a handler from the limit.
RATE_LIMIT_FLAG = "rate_limit"
#: The ``data`` key (and handler argument) set True for an exempt update over the rate.
OVER_RATE = "over_rate"
#: The flags of a control handler: ``@router.message(..., flags=NOT_RATE_LIMITED)``.
NOT_RATE_LIMITED: dict[str, Any] = {RATE_LIMIT_FLAG: False}
#: The handler flag of a message handler that may ask a provider (money): an admin's
#: command to it is counted when it is chosen (:class:`RateExemption`).
SPENDS_FLAG = "spends"
#: ``@router.message(..., flags=SPENDS)``.
SPENDS: dict[str, Any] = {SPENDS_FLAG: True}
#: The ``data`` key set True for an admin's command the outer middleware did not count.
ADMIN_UNCOUNTED = "admin_uncounted"

Handler = Callable[[TelegramObject, dict[str, Any]], Awaitable[Any]]


class SharedRates(Protocol):
    """The deployment-wide window (:class:`bot.storage.pg_rates.PgUpdateRates`)."""

    async def allow(self, payer_id: int, limit: int) -> bool:
        """Count one update; False when the shared window is full."""
        ...

    async def notice_due(self, payer_id: int) -> bool:
        """True (and remembered) when no replica sent the notice in the window."""
        ...


class UpdateRateMiddleware(BaseMiddleware):
    """Drops a user's updates beyond ``limit`` per 60 s (see the module docstring).

    Args:
        limit: updates per user per 60 s (USER_MAX_UPDATES_PER_MINUTE).
        clock: the one clock (monotonic seconds).
        i18n: for the notice's language.
        on_drop: called once per dropped update (a metric), if given.
        shared: the replicas' common window (``None``: this process only).
        admin_ids: ADMIN_IDS, whose commands are not counted (the module docstring).
    """

    def __init__(
        self,
        limit: int,
        clock: Clock,
        i18n: I18n,
        on_drop: Callable[[], None] | None = None,
        shared: SharedRates | None = None,
        admin_ids: frozenset[int] = frozenset(),
    ) -> None:
        self._limit = limit
        self._admin_ids = admin_ids
        self._shared = shared
        self._clock = clock
        self._i18n = i18n
        self._on_drop = on_drop
        self._seen: dict[int, deque[float]] = {}
        self._noticed: dict[int, float] = {}
        self._exempt: dict[str, list[HandlerObject]] = {}

    def exempt(self, root: Router) -> None:
        """Learn the handlers tagged ``flags={"rate_limit": False}`` under ``root`` (call
        once every router is included): their own filters decide which updates over the
        rate are let on to :class:`RateExemption`."""
        self._exempt = {}
        for router in root.chain_tail:
            for name, observer in router.observers.items():
                for handler in observer.handlers:
                    if get_flag(handler, RATE_LIMIT_FLAG, default=True) is False:
                        self._exempt.setdefault(name, []).append(handler)

    async def _may_be_exempt(self, event: TelegramObject, data: dict[str, Any]) -> bool:
        """True if the own filters of an exempt handler match this update."""
        if not isinstance(event, Update):
            return False
        handlers = self._exempt.get(event.event_type)
        if not handlers:
            return False
        inner = event.event
        for handler in handlers:
            matched, _ = await handler.check(inner, **data)
            if matched:
                return True
        return False

    async def is_control(self, update: Update, bot: Bot) -> bool:
        """True if ``update`` is for a handler tagged ``flags={"rate_limit": False}`` (a
        control that only stops work: an admin's ``/kill``, ``/stop``, the Stop button),
        by that handler's own filters — the webhook lets such an update skip the wait for
        an intake slot (:mod:`bot.app.webhook`), as it skips the update rate here."""
        return await self._may_be_exempt(update, {"bot": bot})

    def __repr__(self) -> str:
        return f"UpdateRateMiddleware(limit={self._limit}/min, users={len(self._seen)})"

    def allow(self, user_id: int) -> bool:
        """Count one update of ``user_id``; False when it is over the rate."""
        now = self._clock.monotonic()
        times = self._seen.get(user_id)
        if times is None:
            if len(self._seen) >= MAX_TRACKED_USERS:
                self._forget_idle(now)
            times = self._seen[user_id] = deque()
        while times and times[0] <= now - WINDOW_S:
            times.popleft()
        if len(times) >= self._limit:
            return False
        times.append(now)
        return True

    def _forget_idle(self, now: float) -> None:
        for user_id in [u for u, t in self._seen.items() if not t or t[-1] <= now - WINDOW_S]:
            del self._seen[user_id]
            self._noticed.pop(user_id, None)

    def notice_due(self, user_id: int) -> bool:
        """True (and remembered) when this user has had no notice in the last 60 s."""
        now = self._clock.monotonic()
        last = self._noticed.get(user_id)
        if last is not None and now - last < WINDOW_S:
            return False
        self._noticed[user_id] = now
        return True

    async def __call__(self, handler: Handler, event: TelegramObject, data: dict[str, Any]) -> Any:
        user = data.get("event_from_user")
        if not isinstance(user, User):
            return await handler(event, data)
        if self._admin_command(event, user):
            data[ADMIN_UNCOUNTED] = True  # RateExemption counts it if its handler spends
            return await handler(event, data)
        payer = _payer(event, user)
        if payer is None or await self.counted(payer, event, data):
            return await handler(event, data)
        if await self._may_be_exempt(event, data):
            data[OVER_RATE] = True  # RateExemption drops it unless the chosen handler is exempt
            return await handler(event, data)
        await self.drop(payer, user, data)
        return None

    def _admin_command(self, event: TelegramObject, user: User) -> bool:
        """True for a command an admin sent as himself (by user id, never ``sender_chat``)."""
        message = event.message if isinstance(event, Update) else None
        if message is None or message.sender_chat is not None or user.is_bot:
            return False
        if message.from_user is None or message.from_user.id not in self._admin_ids:
            return False
        return (message.text or message.caption or "").startswith("/")

    async def counted(self, payer: int, event: TelegramObject, data: dict[str, Any]) -> bool:
        """Count one update of ``payer`` here and over the replicas; False: over the rate."""
        return self.allow(payer) and await self._shared_allow(payer, event, data)

    async def drop(self, payer: int, user: User, data: dict[str, Any]) -> None:
        """An update over the rate: counted as dropped; the too-fast notice if one is due."""
        if self._on_drop is not None:
            self._on_drop()
        chat = data.get("event_chat")
        bot = data.get("bot")
        private = isinstance(chat, Chat) and chat.type == "private"
        if private and isinstance(bot, Bot) and await self._notice_due(payer):
            assert isinstance(chat, Chat)
            log.info("payer %s over %d updates/min: dropping", payer, self._limit)
            # the language every other reply uses, read only when a notice is sent (at
            # most once a minute per user): bot/middlewares/languages.py
            language = await languages_in(data).of(user)
            with in_locale(self._i18n, language):
                text = templates.too_fast_text()
            try:
                await send_text(bot, chat.id, text, clock=self._clock)
            except TelegramAPIError as exc:
                log.warning("could not send the too-fast notice: %s", exc.message)

    async def _shared_allow(self, payer: int, event: TelegramObject, data: dict[str, Any]) -> bool:
        """The replicas' window (True without one, or when it cannot be written). A
        control (an exempt handler's update: an admin's ``/kill``) is not counted there:
        it never waits for the database, whose connections a lock storm may hold."""
        if self._shared is None or await self._may_be_exempt(event, data):
            return True
        try:
            return await self._shared.allow(payer, self._limit)
        except BudgetError:
            log.warning("shared update rate not readable; this process's window decides")
            return True

    async def _notice_due(self, payer: int) -> bool:
        if not self.notice_due(payer):
            return False
        if self._shared is None:
            return True
        try:
            return await self._shared.notice_due(payer)
        except BudgetError:
            return True


def _payer(event: TelegramObject, user: User) -> int | None:
    """The id an update counts under: a message's payer (``bot.chat.payer.payer_id``: a
    group's anonymous admins are one payer per group, never the shared service id);
    another bot's update (``is_bot`` without ``sender_chat``) is not counted."""
    message = (event.message or event.edited_message) if isinstance(event, Update) else None
    if isinstance(message, Message) and (message.sender_chat is not None or not user.is_bot):
        return payer_id(message)
    return None if user.is_bot else user.id


class RateExemption(BaseMiddleware):
    """The inner half of the limit (register on every event observer but ``update`` and
    ``error``): an update :class:`UpdateRateMiddleware` let on over the rate reaches its
    handler only if that handler is tagged ``flags={"rate_limit": False}``; any other is
    dropped in silence, as the outer middleware drops everything else over the rate. An
    admin's command it did not count is counted here if its handler is tagged
    ``flags=SPENDS``, and dropped (with the notice) over the rate.

    Args:
        rate: the outer middleware whose windows count (``None``: nothing is counted here).
    """

    def __init__(self, rate: UpdateRateMiddleware | None = None) -> None:
        self._rate = rate

    async def __call__(self, handler: Handler, event: TelegramObject, data: dict[str, Any]) -> Any:
        if data.get(OVER_RATE) and get_flag(data, RATE_LIMIT_FLAG, default=True) is not False:
            return None
        user = data.get("event_from_user")
        if (
            self._rate is not None
            and data.get(ADMIN_UNCOUNTED)
            and get_flag(data, SPENDS_FLAG, default=False) is True
            and isinstance(user, User)
            and isinstance(event, Message)
            # an admin's own message (never sender_chat): he is its payer
            and not await self._rate.counted(user.id, data["event_update"], data)
        ):
            await self._rate.drop(user.id, user, data)
            return None
        return await handler(event, data)
