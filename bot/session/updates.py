"""Polling survives an update the client cannot decode, and takes updates in small
batches.

aiogram decodes a whole ``getUpdates`` batch at once: one update whose shape its models
reject (seen with shapes newer than the installed aiogram: a ``forward_origin``, reaction
or paid-media ``type`` it does not know) fails the whole batch with
``ClientDecodeError``, the offset never advances, and polling retries the same batch
forever. :class:`SkipUndecodableUpdates`, a session middleware on ``getUpdates`` only,
decodes such a batch one update at a time, passes on those that decode, and skips the
others: logged (update id and where the model refused it, never the content), counted,
and confirmed by moving the offset past them, so polling goes on. The same holds for a
batch the session's JSON reader refused as a whole
(:func:`bot.session.update_json.load_checked`: nested deeper than the decoder goes,
integers beyond 64 bits): its items are found without decoding it
(:func:`bot.session.update_json.result_items`, in a worker thread: the text may be
megabytes) and read one at a time.

:class:`PollInSmallBatches` asks ``getUpdates`` for at most :data:`POLL_BATCH` updates:
aiogram decodes a batch in one synchronous step of the event loop (~70 µs an update:
Telegram's default of 100 held the loop ~7 ms in a burst, every other task and timer
behind it) and then starts a task for each, whose first steps all become ready
together. Ten at a time cost a ``getUpdates`` round trip per ten (~1 ms on
loopback, long polling answers at once while updates wait).

:class:`ConfirmWhenTakenIn` closes the polling's crash gap. aiogram confirms a batch (the
next ``getUpdates``'s ``offset``) as soon as it has started the batch's tasks; Telegram
never sends a confirmed update again, so a crash between that and a message's intake
record (``seen_messages``, :class:`bot.middlewares.intake.IntakeMiddleware`) used to lose the
message silently: no answer, and no resend template at the next start, which knew
nothing of it. This session middleware keeps an :class:`IntakeBarrier`: the update ids
of each batch fetched, each removed once its intake record is committed (the intake
middleware says so) or once its handling ended without one (:class:`EndOfUpdate`, the
outermost update middleware: commands refused before intake, updates dropped by the
rate limit, failures). An update that never gets an intake record (a callback press, an
edit, a member change: anything but a message with a sender, :func:`keeps_intake_record`)
is taken in as its handling *starts*: the barrier has nothing to wait for, and a press
whose answer runs for a minute (a confirmed transcription held at a global cap) must not
hold every other user's update behind it (docs/decisions/210-callbacks-hold-no-poll.md).
A ``getUpdates`` that would
confirm ids still there waits for them, for at most ``wait_s`` seconds
(POLL_INTAKE_WAIT_SECONDS): a stuck intake (a database locked from outside) must not
stop polling for good. After that it polls anyway and logs one WARNING naming the update
ids not taken in (a crash from then on until their intake would lose them, as before).
A crash while the ``getUpdates`` waits loses nothing: Telegram sends the unconfirmed
batch again, and a message taken in before the crash is dropped as a duplicate (the
next start sent its resend template). Webhook mode needs none of this: its intake row
is committed before Telegram gets the 200 (:mod:`bot.app.webhook`).

A committed intake record survives a *process* crash (SIGKILL, OOM) on SQLite as on
PostgreSQL; on SQLite it is a grouped write (committed to the WAL, not fsync'd), so an
OS crash or power cut can still drop it with the WAL's unsynced tail (README, "Which
writes wait for the disk").
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any, cast

from aiogram import BaseMiddleware
from aiogram.client.session.middlewares.base import (
    BaseRequestMiddleware,
    NextRequestMiddlewareType,
)
from aiogram.exceptions import ClientDecodeError
from aiogram.methods import GetUpdates, Response, TelegramMethod
from aiogram.methods.base import TelegramType
from aiogram.types import TelegramObject, Update
from pydantic import ValidationError

from bot.session.update_json import UndecodableJson, load_checked, result_items
from budget.kernel.clock import Clock

if TYPE_CHECKING:
    from aiogram import Bot

__all__ = [
    "INTAKE_WAIT_S",
    "POLL_BATCH",
    "ConfirmWhenTakenIn",
    "EndOfUpdate",
    "IntakeBarrier",
    "PollInSmallBatches",
    "SkipUndecodableUpdates",
    "keeps_intake_record",
]

log = logging.getLogger(__name__)

#: Skipped update ids remembered, so that one seen again is counted once.
REMEMBERED = 1000
#: Updates asked of one ``getUpdates`` (Telegram's default and maximum: 100).
POLL_BATCH = 10
#: Seconds a confirming ``getUpdates`` waits at most for its batch's intake
#: (POLL_INTAKE_WAIT_SECONDS' default; see the module docstring).
INTAKE_WAIT_S = 5.0
#: Update ids named in the WARNING of a wait that ran out (the rest are counted).
NAMED_IDS = 20


class PollInSmallBatches(BaseRequestMiddleware):
    """Sets ``limit`` (:data:`POLL_BATCH`) on a ``getUpdates`` that has none (see the
    module docstring); every other request passes untouched."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"PollInSmallBatches(limit={POLL_BATCH})"

    async def __call__(
        self,
        make_request: NextRequestMiddlewareType[TelegramType],
        bot: Bot,
        method: TelegramMethod[TelegramType],
    ) -> Response[TelegramType]:
        if isinstance(method, GetUpdates) and method.limit is None:
            method.limit = POLL_BATCH
        return await make_request(bot, method)


class SkipUndecodableUpdates(BaseRequestMiddleware):
    """Skips updates aiogram cannot decode (see the module docstring).

    Args:
        on_skip: called once per skipped update (a metric), if given.
    """

    __slots__ = ("_on_skip", "_skipped")

    def __init__(self, on_skip: Callable[[], None] | None = None) -> None:
        self._on_skip = on_skip
        self._skipped: dict[int, None] = {}

    def __repr__(self) -> str:
        return f"SkipUndecodableUpdates(skipped={len(self._skipped)})"

    async def __call__(
        self,
        make_request: NextRequestMiddlewareType[TelegramType],
        bot: Bot,
        method: TelegramMethod[TelegramType],
    ) -> Response[TelegramType]:
        try:
            return await make_request(bot, method)
        except ClientDecodeError as exc:
            if not isinstance(method, GetUpdates):
                raise
            batch = _batch(exc.data)
            if batch is None and isinstance(exc.data, str):  # refused by the JSON reader
                batch = await asyncio.to_thread(_read_items, exc.data)
            if batch is None:
                raise
            good, bad = self._split(batch, bot)
            if not bad:
                raise
            if not good:
                # nothing for aiogram to confirm: move the offset past the skipped ones
                method.offset = max(bad) + 1
            # a session's make_request hands back the *result* (aiogram's annotations say
            # Response, its AiohttpSession returns ``response.result``)
            return cast(Response[TelegramType], good)

    def _split(self, batch: list[Any], bot: Bot) -> tuple[list[Update], list[int]]:
        good: list[Update] = []
        bad: list[int] = []
        for raw in batch:
            if isinstance(raw, UndecodableJson):
                update_id, where = raw.update_id, raw.where
            else:
                update_id = raw.get("update_id") if isinstance(raw, dict) else None
                try:
                    good.append(Update.model_validate(raw, context={"bot": bot}))
                    continue
                except ValidationError as err:
                    where = ".".join(str(p) for p in err.errors()[0].get("loc", ()))
            if not isinstance(update_id, int):
                continue
            bad.append(update_id)
            if update_id not in self._skipped:
                self._skipped[update_id] = None
                if len(self._skipped) > REMEMBERED:
                    del self._skipped[next(iter(self._skipped))]
                log.error(
                    "skipped update %s: the client cannot decode it (at %s)", update_id, where
                )
                if self._on_skip is not None:
                    self._on_skip()
        return good, bad


def _read_items(text: str) -> list[Any] | None:
    """The items of a ``getUpdates`` answer refused as a whole, each decoded alone: the
    raw update, or the :class:`UndecodableJson` it raised. ``None``: no result array."""
    items = result_items(text)
    if items is None:
        return None
    read: list[Any] = []
    for item in items:
        try:
            read.append(load_checked(item))
        except UndecodableJson as exc:
            read.append(exc)
    return read


def _batch(data: Any) -> list[Any] | None:
    if isinstance(data, dict) and data.get("ok") is True and isinstance(data.get("result"), list):
        return cast(list[Any], data["result"])
    return None


class IntakeBarrier:
    """The fetched updates not yet taken in (see the module docstring).

    :meth:`fetched` adds a batch's update ids, :meth:`taken_in` removes one (idempotent;
    an id never fetched is ignored), and :meth:`wait` returns once no id below an offset
    is left, or after ``wait_s`` seconds (then those ids are forgotten, with one WARNING).

    Args:
        clock: the one clock (``monotonic`` seconds and ``sleep`` for the deadline).
        wait_s: seconds :meth:`wait` waits at most (POLL_INTAKE_WAIT_SECONDS), above 0.
    """

    __slots__ = ("_changed", "_clock", "_pending", "wait_s")

    def __init__(self, clock: Clock, wait_s: float = INTAKE_WAIT_S) -> None:
        self._clock = clock
        self.wait_s = wait_s
        self._pending: dict[int, None] = {}  # update ids, in fetch order
        self._changed: asyncio.Event | None = None  # set while a wait() is waiting

    def __repr__(self) -> str:
        return f"IntakeBarrier(wait_s={self.wait_s}, pending={len(self._pending)})"

    @property
    def pending(self) -> list[int]:
        """Update ids fetched and not yet taken in, in fetch order."""
        return list(self._pending)

    def fetched(self, update_ids: Iterable[int]) -> None:
        """A ``getUpdates`` returned these updates; each will be :meth:`taken_in`."""
        for update_id in update_ids:
            self._pending[update_id] = None

    def taken_in(self, update_id: int) -> None:
        """The update's intake record is committed, or its handling ended (it needs
        none, or it failed). Idempotent."""
        if self._pending.pop(update_id, False) is None and self._changed is not None:
            self._changed.set()

    async def wait(self, offset: int | None) -> None:
        """Return once no update id below ``offset`` (the ``getUpdates`` about to
        confirm them) is left, or after ``wait_s`` seconds: then the ids still left are
        logged (WARNING, once) and forgotten. ``None`` confirms nothing: no wait.

        Cancelling the wait (polling stopped) leaves the ids as they are.
        """
        if offset is None or not self._left(offset):
            return
        log.debug("getUpdates waits for the intake of updates %s", self._left(offset))
        deadline = self._clock.monotonic() + self.wait_s
        while left := self._left(offset):
            remaining = deadline - self._clock.monotonic()
            if remaining <= 0:
                for update_id in left:
                    del self._pending[update_id]
                named = ", ".join(str(i) for i in left[:NAMED_IDS])
                more = f" and {len(left) - NAMED_IDS} more" if len(left) > NAMED_IDS else ""
                log.warning(
                    "polling goes on after %.1f s although updates %s%s are not taken in yet"
                    " (no intake record): a crash before their intake loses them",
                    self.wait_s,
                    named,
                    more,
                )
                return
            changed = self._changed = asyncio.Event()
            sleeper = asyncio.ensure_future(self._clock.sleep(remaining))
            waiter = asyncio.ensure_future(changed.wait())
            try:
                await asyncio.wait({sleeper, waiter}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                self._changed = None
                for task in (sleeper, waiter):
                    task.cancel()
                await asyncio.gather(sleeper, waiter, return_exceptions=True)

    def _left(self, offset: int) -> list[int]:
        return [update_id for update_id in self._pending if update_id < offset]


class ConfirmWhenTakenIn(BaseRequestMiddleware):
    """Session middleware: a ``getUpdates`` goes out once the updates its ``offset``
    confirms are taken in (:meth:`IntakeBarrier.wait`); the updates it returns are
    handed to the barrier (:meth:`IntakeBarrier.fetched`). Every other request passes
    untouched. Register it outside :class:`SkipUndecodableUpdates`, so that it sees the
    batch that middleware passes on (a skipped update is never handled)."""

    __slots__ = ("_barrier",)

    def __init__(self, barrier: IntakeBarrier) -> None:
        self._barrier = barrier

    def __repr__(self) -> str:
        return f"ConfirmWhenTakenIn({self._barrier!r})"

    async def __call__(
        self,
        make_request: NextRequestMiddlewareType[TelegramType],
        bot: Bot,
        method: TelegramMethod[TelegramType],
    ) -> Response[TelegramType]:
        poll = method if isinstance(method, GetUpdates) else None
        if poll is None:
            return await make_request(bot, method)
        await self._barrier.wait(poll.offset)
        result = await make_request(bot, method)
        # a session's make_request hands back the result: the list of updates
        batch = cast(Any, result)
        if isinstance(batch, list):
            self._barrier.fetched(u.update_id for u in batch if isinstance(u, Update))
        return result


def keeps_intake_record(update: Update) -> bool:
    """True for an update that :class:`bot.middlewares.intake.IntakeMiddleware` records
    (a ``message`` with a sender: the same test as that middleware's); every other
    update (callback query, edited message, channel post, member change …) never gets
    an intake record."""
    return update.message is not None and update.message.from_user is not None


class EndOfUpdate(BaseMiddleware):
    """Outer middleware on ``update``, registered first: an update that keeps no intake
    record (:func:`keeps_intake_record`) is taken in as far as the
    :class:`IntakeBarrier` is concerned before its handling starts, so however long its
    handler runs it holds no ``getUpdates`` back; any other update is taken in when its
    handling ends (answered, refused, dropped, failed) — its intake record was committed
    earlier (:class:`bot.middlewares.intake.IntakeMiddleware` said so) or never will be."""

    __slots__ = ("_barrier",)

    def __init__(self, barrier: IntakeBarrier) -> None:
        self._barrier = barrier

    def __repr__(self) -> str:
        return f"EndOfUpdate({self._barrier!r})"

    async def __call__(
        self,
        handler: Callable[[TelegramObject, dict[str, Any]], Awaitable[Any]],
        event: TelegramObject,
        data: dict[str, Any],
    ) -> Any:
        if isinstance(event, Update) and not keeps_intake_record(event):
            self._barrier.taken_in(event.update_id)
        try:
            return await handler(event, data)
        finally:
            if isinstance(event, Update):
                self._barrier.taken_in(event.update_id)
