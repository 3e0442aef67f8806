"""Outer middlewares: who is writing (profile + language), exactly-once intake.

Order on ``message`` updates: :class:`ArrivalOrderMiddleware` → :class:`ProfileMiddleware`
→ :class:`LocaleMiddleware` → :class:`IntakeMiddleware` → filters → handler.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from aiogram import BaseMiddleware
from aiogram.types import Message, TelegramObject, Update, User
from aiogram.utils.i18n import I18n
from aiogram.utils.i18n.middleware import I18nMiddleware

from bot.chat.paste import PasteJoiner
from bot.chat.payer import is_on_behalf_of_chat, payer_id
from bot.chat.service import ChatService
from bot.middlewares.context import IntakeStatus, ProfileStore, UserContext
from bot.middlewares.topics import topic_of
from bot.storage.repos import Intake, is_storage_failure
from bot.storage.values import Preferences, TouchedIntake
from bot.text.i18n import pick_language
from budget.kernel.clock import Clock

__all__ = [
    "ArrivalOrderMiddleware",
    "IntakeMiddleware",
    "LocaleMiddleware",
    "ProfileMiddleware",
    "TakenIn",
    "reads_only",
]

log = logging.getLogger(__name__)

Handler = Callable[[TelegramObject, dict[str, Any]], Awaitable[Any]]

#: Commands that only read, and so still run while the database cannot be written
#: (everything else gets the ledger-unavailable template from the error router).
READ_ONLY_COMMANDS = frozenset({"budget"})


def reads_only(event: Message) -> bool:
    """True for a command that only reads (:data:`READ_ONLY_COMMANDS`): it still runs
    while the database cannot be written."""
    text = event.text or ""
    if not text.startswith("/"):
        return False
    name = text[1:].split(maxsplit=1)[0].split("@", 1)[0].lower() if len(text) > 1 else ""
    return name in READ_ONLY_COMMANDS


class ArrivalOrderMiddleware(BaseMiddleware):
    """Takes each chat message's place before anything awaits: in its payer's queue
    (private chats) and in a long paste (:class:`bot.chat.paste.PasteJoiner`, any chat).

    aiogram starts one task per update in delivery order; this middleware is the first
    code of each task and does not await before :meth:`ChatService.arrive` and
    :meth:`PasteJoiner.arrive`, so the places follow Telegram's order however the later
    (awaiting) middlewares interleave. The paste ticket reaches the handler as
    ``data["paste"]`` (``None`` for an ordinary message).
    """

    def __init__(self, chat: ChatService, pastes: PasteJoiner | None = None) -> None:
        self._chat = chat
        self._pastes = pastes

    async def __call__(self, handler: Handler, event: TelegramObject, data: dict[str, Any]) -> Any:
        if (
            not isinstance(event, Message)
            or event.from_user is None
            or not event.text
            or event.text.startswith("/")
        ):
            return await handler(event, data)
        payer = payer_id(event)
        if payer is None:  # not reached: from_user is set
            return await handler(event, data)
        ticket = None
        if self._pastes is not None:
            ticket = self._pastes.arrive((payer, event.chat.id), event.message_id, event.text)
        data["paste"] = ticket
        key = (event.chat.id, event.message_id)
        private = event.chat.type == "private"
        if private:
            self._chat.arrive(payer, key)
        try:
            return await handler(event, data)
        finally:
            if private:
                self._chat.depart(payer, key)
            if ticket is not None:
                ticket.leave()


#: ``data`` key: the intake record was written with the profile touch (its value: the
#: message was recorded for the first time); :class:`IntakeMiddleware` then records
#: nothing itself.
INTAKE_RECORDED = "intake_recorded"


class TouchRecorder(Protocol):
    """The profile touch and the message's intake record in one step
    (:meth:`bot.app.wiring.ProfileStoreAdapter.touch_and_record`; ``None``: not available)."""

    async def touch_and_record(
        self,
        user_id: int,
        telegram_language: str | None,
        *,
        chat_id: int,
        message_id: int,
        payer: int,
        status: str,
        thread_id: int | None,
        pick: Callable[[str | None], str],
    ) -> TouchedIntake | None: ...


class ProfileMiddleware(BaseMiddleware):
    """Builds :class:`UserContext` (``data["user_ctx"]``) from the stored profile.

    ``user_ctx.user_id`` is the *payer* (:func:`bot.chat.payer.payer_id`): the sender, or
    for a message sent on behalf of a chat (anonymous admin, channel) that chat's id. No
    profile row is created for such a payer (it is nobody's personal account): it gets
    the defaults (language from the client, DEFAULT_USER_TZ).

    With ``recorder`` (a hot path: :mod:`bot.storage.hot`) a user's message is also taken
    in here, in the touch's step (on SQLite one writer round trip and one commit instead
    of two: ``docs/decisions/061-one-writer-per-sqlite-file.md``), exactly as
    :class:`IntakeMiddleware` would record it — not a message a webhook already took
    in, nor one sent on behalf of a chat.
    """

    def __init__(
        self,
        profiles: ProfileStore,
        admin_ids: frozenset[int],
        default_tz: str,
        *,
        recorder: TouchRecorder | None = None,
    ) -> None:
        self._profiles = profiles
        self._admins = admin_ids
        self._default_tz = default_tz
        self._recorder = recorder

    async def __call__(self, handler: Handler, event: TelegramObject, data: dict[str, Any]) -> Any:
        if not isinstance(event, Message) or event.from_user is None:
            return await handler(event, data)
        user = event.from_user
        payer = payer_id(event)
        if payer is None:  # not reached: from_user is set
            return await handler(event, data)
        on_behalf = is_on_behalf_of_chat(event)
        stored = Preferences(None, None)  # a chat has no profile row
        if not on_behalf:
            try:
                stored = await self._touch(event, user, payer, data)
            except Exception as exc:
                if not (is_storage_failure(exc) and reads_only(event)):
                    raise
                log.warning("profile not readable/writable (storage failure); defaults used")
        data["user_ctx"] = UserContext(
            user_id=payer,
            chat_id=event.chat.id,
            language=pick_language(stored.language, user.language_code),
            tz=stored.tz or self._default_tz,
            is_admin=not on_behalf and user.id in self._admins,
        )
        return await handler(event, data)

    async def _touch(
        self, event: Message, user: User, payer: int, data: dict[str, Any]
    ) -> Preferences:
        """The profile touch, with the intake record when a recorder can take both."""
        if self._recorder is not None and not isinstance(data.get("taken_in"), TakenIn):
            telegram = user.language_code
            both = await self._recorder.touch_and_record(
                user.id,
                telegram,
                chat_id=event.chat.id,
                message_id=event.message_id,
                payer=payer,
                status="command" if (event.text or "").startswith("/") else "received",
                thread_id=topic_of(event),
                pick=lambda stored: pick_language(stored, telegram),
            )
            if both is not None:
                data[INTAKE_RECORDED] = both.first_time
                return both.preferences
        return await self._profiles.touch(user.id, event.chat.id, user.language_code)


class LocaleMiddleware(I18nMiddleware):
    """aiogram i18n with the language chosen by :class:`ProfileMiddleware`."""

    def __init__(self, i18n: I18n) -> None:
        super().__init__(i18n=i18n)

    async def get_locale(self, event: TelegramObject, data: dict[str, Any]) -> str:
        ctx = data.get("user_ctx")
        return ctx.language if isinstance(ctx, UserContext) else self.i18n.default_locale


@dataclass(slots=True)
class TakenIn:
    """A message whose intake row the webhook handler already committed
    (:mod:`bot.app.webhook`), handed to the dispatcher as ``data["taken_in"]``.

    Attributes:
        language: the language recorded with it (from the client's ``language_code``);
            :class:`IntakeMiddleware` corrects it to the profile's when they differ.
        finished: set by :class:`IntakeMiddleware` once the outcome is recorded; a
            message left unfinished (dropped before the handler) is recorded
            ``dropped`` by the webhook task.
    """

    language: str
    finished: bool = False


class IntakeMiddleware(BaseMiddleware):
    """Records every message's (chat_id, message_id) before anything else happens.

    A message Telegram delivers again (the offset was not confirmed before a crash;
    a webhook retried, or delivered to a second replica) is dropped here, so it never
    reaches the LLM twice. In webhook mode the row is committed before Telegram gets
    its 200 (``data["taken_in"]``, :class:`TakenIn`); this middleware then only corrects
    the language and records the outcome. The handler returns its
    :class:`~bot.middlewares.context.IntakeStatus`, which this middleware persists (default
    ``answered``,
    ``command`` for a command; ``failed`` on an exception).

    Args:
        intake: the intake store.
        clock: the one clock.
        on_taken_in: polling: called with the update's id once its intake record is
            committed (or found already there, or the database cannot be written and a
            read-only command runs without one), before the handler runs — the
            ``getUpdates`` that confirms the update waits for it
            (:class:`bot.session.updates.IntakeBarrier`).
    """

    def __init__(
        self, intake: Intake, clock: Clock, on_taken_in: Callable[[int], None] | None = None
    ) -> None:
        self._intake = intake
        self._clock = clock
        self._on_taken_in = on_taken_in

    async def __call__(self, handler: Handler, event: TelegramObject, data: dict[str, Any]) -> Any:
        # the same test as bot.session.updates.keeps_intake_record (the polling barrier
        # takes every other update in as it starts)
        if not isinstance(event, Message) or event.from_user is None:
            return await handler(event, data)
        ctx = data.get("user_ctx")
        language = ctx.language if isinstance(ctx, UserContext) else "en"
        is_command = (event.text or "").startswith("/")
        taken = data.get("taken_in")
        if isinstance(taken, TakenIn):
            return await self._handle_taken(handler, event, data, taken, language, is_command)
        recorded = data.pop(INTAKE_RECORDED, None)  # with the profile touch
        if isinstance(recorded, bool):
            first = recorded
        else:
            try:
                first = await self._intake.record(
                    status="command" if is_command else "received",
                    chat_id=event.chat.id,
                    message_id=event.message_id,
                    user_id=ctx.user_id if isinstance(ctx, UserContext) else event.from_user.id,
                    language=language,
                    now=self._clock.now(),
                    thread_id=topic_of(event),
                )
            except Exception as exc:
                if not (is_storage_failure(exc) and reads_only(event)):
                    raise
                # the database cannot be written: a read-only command still reads what it can
                log.warning("intake not recorded (storage failure); running a read-only command")
                self._taken_in(data)
                return await handler(event, data)
        self._taken_in(data)
        if not first:
            log.info("dropping a message delivered twice (chat %s)", event.chat.id)
            return None
        default = IntakeStatus.COMMAND if is_command else IntakeStatus.ANSWERED
        with self._intake.open_message():
            try:
                result = await handler(event, data)
            except BaseException:
                await self._finish(event, IntakeStatus.FAILED)
                raise
            await self._finish(event, result if isinstance(result, IntakeStatus) else default)
        return result

    def _taken_in(self, data: dict[str, Any]) -> None:
        update = data.get("event_update")
        if self._on_taken_in is not None and isinstance(update, Update):
            self._on_taken_in(update.update_id)

    async def _handle_taken(
        self,
        handler: Handler,
        event: Message,
        data: dict[str, Any],
        taken: TakenIn,
        language: str,
        is_command: bool,
    ) -> Any:
        if language != taken.language:  # the "please resend" notice speaks the profile's
            try:
                await self._intake.relabel(
                    chat_id=event.chat.id, message_id=event.message_id, language=language
                )
            except Exception as exc:
                if not is_storage_failure(exc):
                    raise
                log.warning("intake language not updated (storage failure)")
        default = IntakeStatus.COMMAND if is_command else IntakeStatus.ANSWERED
        with self._intake.open_message():
            try:
                result = await handler(event, data)
            except BaseException:
                await self._finish(event, IntakeStatus.FAILED)
                taken.finished = True
                raise
            await self._finish(event, result if isinstance(result, IntakeStatus) else default)
            taken.finished = True
        return result

    async def _finish(self, event: Message, status: IntakeStatus) -> None:
        """Record the outcome; a storage failure here is logged, never turned into a
        second reply after the handler already answered."""
        try:
            await self._intake.finish(
                chat_id=event.chat.id,
                message_id=event.message_id,
                status=status,
                now=self._clock.now(),
            )
        except Exception as exc:
            if not is_storage_failure(exc):
                raise
            log.error("intake outcome %s not recorded (storage failure)", status)
