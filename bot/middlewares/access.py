"""The access gate: the first middleware an update meets after the polling barrier's,
before the update rate, the profile, the intake record or any handler
(:mod:`bot.access.rules` decides; ``docs/access.md``).

What a sender who may not use the bot costs: one lookup in memory; in a private chat at
most one short template a day (its claim is one row of ``access_notices``); in a group
one line, once, and ``leaveChat``; a template also reads the sender's stored language
(:mod:`bot.middlewares.languages`: a user once let in keeps his /lang choice); nothing
else — no profile written, no intake record, no history, no ledger step, no provider
call. A banned sender costs the lookup only.

Also here, before any other code sees them: ``/start <code>`` (an invite: redeemed or
refused with a template; wrong codes, and payloads that cannot be a code, are limited
per user per hour, past the limit not even looked up) and a pending ``/allow @username``
(claimed by the first user seen with that name). Payments are never stopped here
(``successful_payment`` is money already taken; a ``pre_checkout_query`` is answered by
its handler, which checks the payer again), nor a ``my_chat_member`` change (its
handler decides whether to stay).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from aiogram import BaseMiddleware
from aiogram.types import Message, TelegramObject, Update, User
from aiogram.utils.i18n import I18n
from sqlalchemy.exc import SQLAlchemyError

from bot.access.invites import code_hash, looks_like_code
from bot.access.rules import AccessLists, Verdict, decide
from bot.access.store import AccessBook, Redeemed
from bot.chat.delivery import send_text
from bot.chat.payer import is_on_behalf_of_chat, payer_id
from bot.chat.plans import UserPlans
from bot.middlewares.languages import languages_in
from bot.text.access import (
    group_not_enabled_text,
    invite_again_text,
    invite_invalid_text,
    invite_not_a_code_text,
    invite_tries_text,
    invite_welcome_text,
    not_allowed_text,
)
from bot.text.i18n import in_locale
from bot.text.templates import format_reset
from budget.kernel.clock import Clock
from budget.ledger import Ledger

__all__ = ["AccessGate", "invite_code"]

log = logging.getLogger(__name__)

Handler = Callable[[TelegramObject, dict[str, Any]], Awaitable[Any]]


def invite_code(message: Message) -> str | None:
    """The payload of ``/start <payload>`` in a private chat: an invite try, whether or
    not it can be a code (``None``: no payload, or not ``/start``). The only deep links
    the bot makes are invites, so every payload is one (``docs/access.md#invites``)."""
    text = message.text or ""
    if message.chat.type != "private" or not text.startswith("/start"):
        return None
    parts = text.split(maxsplit=1)
    if parts[0].split("@", 1)[0] != "/start" or len(parts) < 2:
        return None
    return parts[1].strip() or None


class AccessGate(BaseMiddleware):
    """Outer middleware of ``update``: lets through what :func:`bot.access.rules.decide`
    allows (module docstring).

    Args:
        book: the lists.
        i18n: for the templates (in the sender's language: :mod:`bot.middlewares.languages`).
        clock: the one clock.
        ledger: puts a user let in by an invite on its plan.
        user_plans: the plans (their titles), and what the features know of users'.
        tries_per_hour: INVITE_TRIES_PER_HOUR.
        tz: the zone the tries' reset is shown in (the sender has no profile yet).
    """

    def __init__(
        self,
        book: AccessBook,
        i18n: I18n,
        clock: Clock,
        ledger: Ledger,
        user_plans: UserPlans,
        *,
        tries_per_hour: int,
        tz: str,
    ) -> None:
        self._book = book
        self._i18n = i18n
        self._clock = clock
        self._ledger = ledger
        self._user_plans = user_plans
        self._plans = user_plans.plans
        self._tries = tries_per_hour
        self._tz = tz

    async def __call__(self, handler: Handler, event: TelegramObject, data: dict[str, Any]) -> Any:
        if not isinstance(event, Update):
            return await handler(event, data)
        message = event.message or event.edited_message
        if message is not None:
            if message.successful_payment is not None or message.refunded_payment is not None:
                return await handler(event, data)  # money already moved: always booked
            return await self._message(handler, event, message, data)
        if event.pre_checkout_query is not None or event.my_chat_member is not None:
            return await handler(event, data)
        user = getattr(event.event, "from_user", None)
        if not isinstance(user, User):
            return await handler(event, data)
        chat = None
        if event.callback_query is not None and event.callback_query.message is not None:
            chat = event.callback_query.message.chat  # a button under a message: its chat
        verdict = decide(
            await self._lists(),
            sender_id=user.id,
            chat_id=chat.id if chat is not None else user.id,
            chat_type=chat.type if chat is not None else "private",
            on_behalf_of_chat=False,
        )
        if verdict is not Verdict.ALLOW:
            return None  # a button press, an inline query… from outside: nothing at all
        return await handler(event, data)

    async def _lists(self) -> AccessLists:
        try:
            return await self._book.lists()
        except (SQLAlchemyError, OSError) as exc:
            log.warning("access lists unreadable (%s): admins only", type(exc).__name__)
            return self._book.closed_lists()

    async def _message(
        self, handler: Handler, event: Update, message: Message, data: dict[str, Any]
    ) -> Any:
        sender = payer_id(message)
        if sender is None:
            return None
        await self._follow_move(message)
        lists = await self._lists()
        verdict = decide(
            lists,
            sender_id=sender,
            chat_id=message.chat.id,
            chat_type=message.chat.type,
            on_behalf_of_chat=is_on_behalf_of_chat(message),
        )
        if verdict is Verdict.REFUSE and await self._claim_username(message, sender):
            verdict = Verdict.ALLOW
        code = invite_code(message) if verdict is not Verdict.IGNORE else None
        if code is not None and not is_on_behalf_of_chat(message):
            await self._redeem(message, sender, code, data)
            return None
        if verdict is Verdict.ALLOW:
            return await handler(event, data)
        if verdict is Verdict.REFUSE:
            await self._refuse(message, sender, data)
        elif verdict is Verdict.LEAVE:
            await self._leave(message, data)
        return None

    async def _follow_move(self, message: Message) -> None:
        """A group upgraded to a supergroup (its service messages: ``migrate_to_chat_id``
        in the old group, ``migrate_from_chat_id`` in the new one) keeps its standing
        under the new id: a ban stays a ban, an enabled group stays enabled (else the
        gate would leave the supergroup at its first message)."""
        if message.migrate_from_chat_id is not None:
            old, new = message.migrate_from_chat_id, message.chat.id
        elif message.migrate_to_chat_id is not None:
            old, new = message.chat.id, message.migrate_to_chat_id
        else:
            return
        lists = await self._lists()
        store = self._book.store
        if old in lists.banned and new not in lists.banned:
            await store.ban(new, f"upgraded from {old}", by=None)
        elif lists.allowlist and old in lists.chats and new not in lists.chats:
            await store.allow(new, by=None, source="moved")
        else:
            return
        log.info("chat %s upgraded to %s: its access follows it", old, new)
        self._book.changed()

    async def _claim_username(self, message: Message, sender: int) -> bool:
        """A pending ``/allow @username`` for this sender's name: claimed."""
        user = message.from_user
        if user is None or is_on_behalf_of_chat(message) or not self._book.pending(user.username):
            return False
        assert user.username is not None
        claimed = await self._book.store.claim_username(user.username, sender)
        self._book.changed()
        return claimed

    async def _say(self, data: dict[str, Any], message: Message, text: Callable[[], str]) -> None:
        """``text`` in the sender's language (their /lang choice if they have a profile:
        :mod:`bot.middlewares.languages`), sent to the message's chat."""
        language = await languages_in(data).of(message.from_user)
        with in_locale(self._i18n, language):
            body = text()
        await send_text(data["bot"], message.chat.id, body, clock=self._clock)

    async def _refuse(self, message: Message, sender: int, data: dict[str, Any]) -> None:
        """The private "may not use this bot" template, at most once a day."""
        try:
            due = await self._book.store.notice_due(sender)
        except (SQLAlchemyError, OSError):
            return  # cannot record the notice: say nothing rather than every time
        if due:
            await self._say(data, message, not_allowed_text)

    async def _leave(self, message: Message, data: dict[str, Any]) -> None:
        """A group the bot is not enabled in: one line (once), then ``leaveChat``."""
        chat_id = message.chat.id
        try:
            due = await self._book.store.notice_due(chat_id, every=None)
        except (SQLAlchemyError, OSError):
            due = False
        if due:
            await self._say(data, message, group_not_enabled_text)
        log.info("leaving chat %s: not enabled there (ACCESS_MODE=allowlist)", chat_id)
        await data["bot"].leave_chat(chat_id)

    async def _redeem(self, message: Message, sender: int, code: str, data: dict[str, Any]) -> None:
        """``/start <code>``: let the sender in (on the invite's plan) or say why not."""
        store = self._book.store
        if not await store.may_try(sender, self._tries):
            return  # past the limit: not looked up, nothing said (said at the limit)
        if not looks_like_code(code):  # cannot be a code: a wrong try, never looked up
            await self._wrong_try(message, sender, data, invite_not_a_code_text)
            return
        found = await store.redeem(code_hash(code), sender)
        if found.outcome is Redeemed.INVALID:
            await self._wrong_try(message, sender, data, invite_invalid_text)
            return
        if found.outcome is Redeemed.AGAIN:
            await self._say(data, message, invite_again_text)
            return
        self._book.changed()
        if found.plan is not None and found.plan in self._plans.by_name:
            await self._ledger.set_plan(sender, found.plan)
            self._user_plans.forget(sender)
        title = self._plans.get(found.plan).title if found.plan else ""
        if not title:
            status = await self._ledger.user_status(sender)
            title = self._plans.get(status.plan).title
        await self._say(data, message, lambda: invite_welcome_text(title))

    async def _wrong_try(
        self, message: Message, sender: int, data: dict[str, Any], text: Callable[[], str]
    ) -> None:
        """One wrong try counted: ``text`` under the limit, the limit's notice once at
        it (and nothing after: :meth:`_redeem` stops at :meth:`may_try`)."""
        tries, until = await self._book.store.wrong_try(sender)
        if tries < self._tries:
            await self._say(data, message, text)
        elif tries == self._tries:
            reset = format_reset(until, self._tz)
            await self._say(data, message, lambda: invite_tries_text(reset))
