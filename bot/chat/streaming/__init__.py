"""Showing an answer while it streams, and stopping it.

Two displays (``STREAM_MODE_PRIVATE`` / ``STREAM_MODE_GROUP``):

* **draft** (private chats): ``sendMessageDraft`` with ``can_stop`` — at most one draft
  per ``STREAM_DRAFT_INTERVAL_MS`` and only when the text grew; the text goes through
  the same Markdown pipeline as final answers (a draft Telegram refuses is retried as
  plain text); over 4096 UTF-16 units the draft shows the tail part. Drafts are
  ephemeral: the final answer is sent exactly as without streaming (``sendMessage``,
  split, entities).
* **edit** (groups and topics): a first ``sendMessage`` (in the message's topic, as a
  reply) with an inline Stop button, then ``editMessageText`` at most once per
  ``STREAM_EDIT_INTERVAL_MS``; at the end the same message is edited to the final
  answer's first part (no button) and the other parts follow as new messages.

Either display: a flood wait pauses it until the wait ends, then it shows the text as
it is then; a refusal meaning the chat takes no message from the bot (403,
``CHAT_WRITE_FORBIDDEN``, ``TOPIC_CLOSED``…: :func:`refuses_chat`) stops the stream —
the answer could never be delivered, so it is not generated further; any other failure
ends the display only (the answer continues and is sent as usual).

Stop: a ``stopped_message_generation`` update (the draft's Stop), the inline button, or
``/stop`` ask :class:`StreamRegistry` to stop the stream; the cascade then closes the
provider connection at once (:class:`llm.stream.StreamControl`). Only the message's
own sender or an admin may stop it; a press by anyone else changes nothing (they are
told who can). ``/kill hard`` and a shutdown past its grace stop every stream in flight.

Throttling is per chat, across every answer streaming into it at once
(:class:`EditPacer`: the answers take turns, one draft/edit per interval in all; final
answers are not throttled), and uses the event loop's clock (the interval is a Telegram
flood limit, real time by nature). A Bot API server without ``sendMessageDraft`` (404)
ends each answer's drafts and is logged once per process as a WARNING.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import itertools
import logging
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum

from aiogram import Bot
from aiogram.exceptions import (
    TelegramAPIError,
    TelegramBadRequest,
    TelegramForbiddenError,
    TelegramNotFound,
    TelegramRetryAfter,
)
from aiogram.types import (
    InlineKeyboardButton,
    InlineKeyboardMarkup,
    MessageEntity,
    ReplyParameters,
)
from prometheus_client import CollectorRegistry, Counter, Histogram

from bot.chat.delivery import (
    OFF_LOOP_CHARS,
    TELEGRAM_TEXT_LIMIT,
    send_formatted,
    split_formatted,
    split_markdown,
)
from bot.chat.outbox import Outbox
from bot.ops.metrics import delivery_failure_reason
from bot.ops.signals import SignalWatcher
from bot.text import templates
from budget.kernel.clock import Clock
from llm.stream import StreamControl

__all__ = [
    "STOP_PREFIX",
    "DraftDisplay",
    "EditDisplay",
    "EditPacer",
    "LiveStream",
    "StopResult",
    "StreamConfig",
    "StreamMetrics",
    "StreamRegistry",
    "StreamSession",
    "tail_part",
]

log = logging.getLogger(__name__)

#: ``callback_data`` prefix of the inline Stop button (``stop:<token>``).
STOP_PREFIX = "stop:"
_draft_ids = itertools.count(1)
#: set once the Bot API server answered sendMessageDraft with 404 (warned once per process)
_drafts_unsupported_warned = False


@dataclass(frozen=True, slots=True)
class StreamConfig:
    """How answers stream (from Settings).

    Attributes:
        private: STREAM_MODE_PRIVATE: ``draft``, ``edit`` or ``off``.
        group: STREAM_MODE_GROUP: ``edit`` or ``off``.
        draft_interval_s: STREAM_DRAFT_INTERVAL_MS ÷ 1000, seconds.
        edit_interval_s: STREAM_EDIT_INTERVAL_MS ÷ 1000, seconds.
    """

    private: str = "draft"
    group: str = "edit"
    draft_interval_s: float = 0.6
    edit_interval_s: float = 1.5


class StopResult(StrEnum):
    """What a stop request did."""

    STOPPED = "stopped"
    DENIED = "denied"  # someone other than the sender or an admin
    GONE = "gone"  # nothing streaming under that id (finished already)


class StreamMetrics:
    """Prometheus figures of streamed answers.

    * ``kopek_stream_first_token_seconds`` — update received → first chunk from the provider;
    * ``kopek_stream_first_visible_seconds`` — update received → first text shown (draft or
      message);
    * ``kopek_stream_stops_total{by}`` — answers stopped (``user``, ``kill``, ``shutdown``,
      ``undeliverable``: the chat refused the streamed display);
    * ``kopek_stream_tokens_saved_total`` — output tokens not generated thanks to stops
      (``max_tokens`` held − output settled);
    * ``kopek_stream_drafts_total`` / ``kopek_stream_edits_total`` — Bot API calls made.
    """

    __slots__ = ("drafts", "edits", "first_token", "first_visible", "stops", "tokens_saved")

    def __init__(self, registry: CollectorRegistry) -> None:
        buckets = (0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 60)
        self.first_token = Histogram(
            "kopek_stream_first_token_seconds",
            "Update received to the provider's first chunk, seconds",
            buckets=buckets,
            registry=registry,
        )
        self.first_visible = Histogram(
            "kopek_stream_first_visible_seconds",
            "Update received to the first text shown to the user, seconds",
            buckets=buckets,
            registry=registry,
        )
        self.stops = Counter(
            "kopek_stream_stops", "Streamed answers stopped", ["by"], registry=registry
        )
        self.tokens_saved = Counter(
            "kopek_stream_tokens_saved",
            "Output tokens not generated thanks to stops (max_tokens held minus output settled)",
            registry=registry,
        )
        self.drafts = Counter("kopek_stream_drafts", "sendMessageDraft calls", registry=registry)
        self.edits = Counter(
            "kopek_stream_edits", "editMessageText calls of streamed answers", registry=registry
        )


@dataclass(slots=True)
class LiveStream:
    """One answer streaming now.

    Attributes:
        control: shared with the cascade (stop, text so far).
        chat_id: the chat it streams into.
        owner_id: the Telegram user whose message it answers (may stop it).
        draft_id: the draft's id (0 in edit mode).
        token: the inline Stop button's id (``""`` in draft mode).
    """

    control: StreamControl
    chat_id: int
    owner_id: int
    draft_id: int = 0
    token: str = ""


@dataclass(slots=True)
class StreamRegistry:
    """Every answer streaming now, for the three ways to stop one and for ``/kill hard``.

    Entries are added when a stream starts and removed when it ends, so the registry
    never outgrows what is in flight.
    """

    _live: list[LiveStream] = field(default_factory=list)
    #: one draft/edit at a time per chat, across the chat's answers (the per-chat interval)
    gate: EditPacer = field(default_factory=lambda: EditPacer())
    #: set (and dropped) when a stream leaves; created by whoever waits for that
    _left: asyncio.Event | None = None
    #: replicas on one PostgreSQL: tells the others of a ``/kill hard`` and cuts this
    #: one's streams when another raised it (:mod:`bot.ops.signals`); ``None``: one process
    kill_watch: SignalWatcher | None = None

    def __repr__(self) -> str:
        return f"StreamRegistry(in_flight={len(self._live)})"

    @property
    def in_flight(self) -> int:
        """Streams in flight."""
        return len(self._live)

    def add(self, entry: LiveStream) -> None:
        """Register a stream that has started (and forget the pace of chats idle for a
        minute, so the gate stays as small as the chats recently streamed to)."""
        self._live.append(entry)
        self.gate.forget_idle(asyncio.get_running_loop().time() - 60)

    def remove(self, entry: LiveStream) -> None:
        """Forget a stream that has ended (no-op when already gone)."""
        with contextlib.suppress(ValueError):
            self._live.remove(entry)
        if self._left is not None:
            self._left.set()
            self._left = None

    async def wait_stopped(self, timeout_s: float) -> int:
        """Wait until every stream asked to stop has left — its attempt settled (a
        stream leaves once the cascade returned) — for at most ``timeout_s`` seconds.

        Returns:
            How many stopped streams are still in flight (0: all settled).
        """
        loop = asyncio.get_running_loop()
        end = loop.time() + timeout_s
        while True:
            left = sum(1 for entry in self._live if entry.control.stopped.is_set())
            if not left or loop.time() >= end:
                return left
            if self._left is None:
                self._left = asyncio.Event()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout_at(end):
                    await self._left.wait()

    def stop_draft(self, chat_id: int, draft_id: int) -> StopResult:
        """The draft's Stop (``stopped_message_generation``): only the chat's user sees
        a private draft, so it is the sender."""
        for entry in self._live:
            if entry.chat_id == chat_id and entry.draft_id == draft_id and draft_id:
                return _stopped(entry, "user")
        return StopResult.GONE

    def stop_token(self, token: str, user_id: int, *, is_admin: bool) -> StopResult:
        """The inline Stop button: stops only for the sender or an admin."""
        for entry in self._live:
            if entry.token and entry.token == token:
                if user_id != entry.owner_id and not is_admin:
                    return StopResult.DENIED
                return _stopped(entry, "user")
        return StopResult.GONE

    def stop_user(self, chat_id: int, user_id: int, *, is_admin: bool) -> int:
        """``/stop``: the sender's streams in that chat (an admin's: all of that chat's).
        Returns how many were stopped."""
        stopped = 0
        for entry in list(self._live):
            if entry.chat_id == chat_id and (is_admin or entry.owner_id == user_id):
                stopped += _stopped(entry, "user") is StopResult.STOPPED
        return stopped

    def stop_all(self, reason: str = "kill") -> int:
        """``/kill hard`` (``"kill"``) or shutdown (``"shutdown"``): every stream in
        flight. Returns how many were stopped."""
        return sum(self.stop_counted(reason))

    def stop_counted(self, reason: str = "kill") -> tuple[int, int]:
        """As :meth:`stop_all`, and say what the stops did.

        Returns:
            ``(cut, waiting)``: streams whose provider call had started (a connection
            was cut; settled on what it received), and answers still waiting for a
            call slot or a hold (no provider call is made for them).
        """
        cut = waiting = 0
        for entry in list(self._live):
            started = entry.control.attempts > 0
            if _stopped(entry, reason) is StopResult.STOPPED:
                cut += started
                waiting += not started
        return cut, waiting


class _EditQueue:
    """One chat's turn order: the displays waiting to show text (first = next), and the
    loop time from which the next draft/edit may go."""

    __slots__ = ("moved", "next_at", "queue")

    def __init__(self) -> None:
        self.next_at = float("-inf")
        self.queue: list[object] = []
        self.moved: asyncio.Event | None = None


class EditPacer:
    """At most one streaming draft/edit per chat per interval, shared by every answer
    streaming into that chat (Telegram's flood limits are per chat, not per answer).

    A display with new text joins its chat's queue; the first in the queue waits until
    the chat's interval has passed since the last call Telegram answered, then makes one
    call (holding the turn while the call is in flight) and leaves the queue (joining at
    the back again when its text grows). Turns go round the chat's answers; the text
    sent is read when the turn comes, so no stale text is ever queued. A display that
    ends leaves the queue; final answers never pass through the gate.
    """

    __slots__ = ("_lanes",)

    def __init__(self) -> None:
        self._lanes: dict[int, _EditQueue] = {}

    def __repr__(self) -> str:
        return f"EditPacer(chats={len(self._lanes)})"

    async def turn(self, chat: int, who: object) -> None:
        """Wait until ``who`` may make the chat's next call (it stays first meanwhile:
        call :meth:`done` or :meth:`leave` after). Cancelled: ``who`` leaves."""
        loop = asyncio.get_running_loop()
        lane = self._lanes.get(chat)
        if lane is None:
            lane = self._lanes[chat] = _EditQueue()
        if who not in lane.queue:
            lane.queue.append(who)
        try:
            while True:
                if lane.queue[0] is who:
                    wait = lane.next_at - loop.time()
                    if wait <= 0:
                        return
                    await asyncio.sleep(wait)  # next_at may move (a flood wait): look again
                else:
                    if lane.moved is None:
                        lane.moved = asyncio.Event()
                    await lane.moved.wait()
        except BaseException:
            self.leave(chat, who)
            raise

    def done(self, chat: int, who: object, next_at: float) -> None:
        """``who`` made its call; the chat's next one may go at loop time ``next_at``."""
        lane = self._lanes.get(chat)
        if lane is not None:
            lane.next_at = next_at
        self.leave(chat, who)

    def leave(self, chat: int, who: object) -> None:
        """``who`` no longer waits (no-op when it did not)."""
        lane = self._lanes.get(chat)
        if lane is None or who not in lane.queue:
            return
        lane.queue.remove(who)
        if lane.moved is not None:
            lane.moved.set()
            lane.moved = None

    def forget_idle(self, before: float) -> None:
        """Drop the chats nobody waits in whose last call was before loop time ``before``."""
        for chat in [
            c for c, lane in self._lanes.items() if not lane.queue and lane.next_at < before
        ]:
            del self._lanes[chat]


def _stopped(entry: LiveStream, reason: str) -> StopResult:
    entry.control.stop(reason)
    return StopResult.STOPPED


def refuses_chat(exc: TelegramAPIError) -> bool:
    """Telegram's refusal means the chat takes no message from the bot now (a 403:
    blocked, kicked; a 400 naming the chat or topic: ``CHAT_WRITE_FORBIDDEN``,
    ``TOPIC_CLOSED``, not enough rights, chat not found) — not a refusal of one text."""
    if isinstance(exc, TelegramForbiddenError):
        return True
    if isinstance(exc, TelegramBadRequest):
        return delivery_failure_reason(exc.message, 400) != "bad_request"
    return False


def new_draft_id() -> int:
    """A non-zero draft id, unique in this process."""
    return next(_draft_ids)


def new_token() -> str:
    """An unguessable id for an inline Stop button."""
    return secrets.token_urlsafe(9)


def tail_part(text: str) -> tuple[str, list[MessageEntity]]:
    """The Markdown pipeline's last part of ``text`` (the tail over 4096 UTF-16 units)."""
    parts = split_markdown(text)
    if not parts:
        return text[-TELEGRAM_TEXT_LIMIT:], []
    return parts[-1]


def _plain_tail(text: str) -> str:
    """The last ≤ 4096 UTF-16 units of ``text`` as plain text (never half a pair)."""
    out: list[str] = []
    units = 0
    for char in reversed(text):
        size = 2 if ord(char) > 0xFFFF else 1
        if units + size > TELEGRAM_TEXT_LIMIT:
            break
        out.append(char)
        units += size
    return "".join(reversed(out))


class _Throttled(abc.ABC):
    """Shows the latest text when its chat's :class:`EditPacer` gives it a turn (at most
    one draft/edit per ``interval_s`` per chat, across the chat's answers), only when it
    changed; the Bot API call runs in its own task so the provider stream is never held
    up."""

    __slots__ = (
        "_bot",
        "_changed",
        "_chat_id",
        "_gate",
        "_in_flight",
        "_interval_s",
        "_latest",
        "_loop",
        "_metrics",
        "_on_shown",
        "_shown_text",
        "_task",
        "control",
    )

    def __init__(
        self,
        bot: Bot,
        chat_id: int,
        interval_s: float,
        control: StreamControl,
        *,
        on_shown: Callable[[float], None] | None,
        metrics: StreamMetrics | None,
        gate: EditPacer | None,
    ) -> None:
        self.control = control
        self._bot = bot
        self._chat_id = chat_id  # the interval holds per chat, across answers
        self._interval_s = interval_s
        self._on_shown = on_shown
        self._metrics = metrics
        self._gate = gate if gate is not None else EditPacer()
        self._latest = ""
        self._shown_text = ""
        self._changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._in_flight = False  # a Bot API call of this display is at Telegram
        self._loop = asyncio.get_running_loop()

    def on_text(self, text: str) -> None:
        """The stream's callback: remember the text, wake the sender."""
        self._latest = text
        self._changed.set()
        if self._task is None:
            self._task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        try:
            await self._loop_turns()
        finally:
            if self._in_flight:
                # closed while a call was at Telegram (the final answer came): it counts
                # as the chat's last call, answered now, so the next answer's turn still
                # waits the interval (seen under load: two edits 25 ms apart)
                self._gate.done(self._chat_id, self, self._loop.time() + self._interval_s)
            else:
                self._gate.leave(self._chat_id, self)

    async def _loop_turns(self) -> None:
        gate, chat = self._gate, self._chat_id
        while True:
            await self._changed.wait()
            # the interval runs from the last call Telegram answered in this chat, any answer's
            await gate.turn(chat, self)
            self._changed.clear()
            text = self._latest
            if not text.strip() or text == self._shown_text:
                gate.leave(chat, self)
                continue
            try:
                shown = await self._shown_once(text)
            except TelegramRetryAfter as exc:
                # resume once the wait is over, with the text as it is then
                log.info("stream display paused for %s s: flood wait", exc.retry_after)
                gate.done(chat, self, self._loop.time() + exc.retry_after)
                self._changed.set()
                continue
            except TelegramAPIError as exc:
                gate.done(chat, self, self._loop.time() + self._interval_s)
                if refuses_chat(exc):
                    # the answer could never be delivered: stop paying for it
                    log.info("stream display refused (%s); the stream is stopped", exc.message)
                    self.control.stop("undeliverable")
                else:
                    self._failed(exc)
                return
            gate.done(chat, self, self._loop.time() + self._interval_s)
            if shown:
                self._shown_text = text
                if not self.control.shown and self._on_shown is not None:
                    self._on_shown(self._loop.time())  # the first text the user sees
                self.control.shown = True

    async def _shown_once(self, text: str) -> bool:
        """:meth:`_show`, marked in flight meanwhile; a cancellation (the display closed)
        leaves the mark for :meth:`_run` to count the call."""
        self._in_flight = True
        try:
            shown = await self._show(text)
        except TelegramAPIError:
            self._in_flight = False
            raise
        self._in_flight = False
        return shown

    def _failed(self, exc: TelegramAPIError) -> None:
        """A refusal that ends the display only (the answer continues)."""
        log.info("stream display failed (%s); the answer continues", exc.message)

    @abc.abstractmethod
    async def _show(self, text: str) -> bool:
        """Show ``text`` once; ``True`` when Telegram accepted it (drafts or an edit)."""

    async def close(self) -> None:
        """Stop showing (the final answer follows)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task


class DraftDisplay(_Throttled):
    """Drafts in a private chat (see the module docstring).

    Args:
        bot: the bot.
        chat_id: the private chat.
        draft_id: non-zero id shared by every draft of this answer.
        interval_s: STREAM_DRAFT_INTERVAL_MS ÷ 1000.
        control: the stream.
        on_shown: called once with the loop time of the first draft accepted.
        metrics: counters (optional).
        gate: the per-chat gate shared by the chat's displays (the registry's).
    """

    __slots__ = ("_draft_id", "_plain")

    def __init__(
        self,
        bot: Bot,
        chat_id: int,
        draft_id: int,
        interval_s: float,
        control: StreamControl,
        *,
        on_shown: Callable[[float], None] | None = None,
        metrics: StreamMetrics | None = None,
        gate: EditPacer | None = None,
    ) -> None:
        super().__init__(
            bot, chat_id, interval_s, control, on_shown=on_shown, metrics=metrics, gate=gate
        )
        self._draft_id = draft_id
        self._plain = False

    async def _show(self, text: str) -> bool:
        body, entities = (_plain_tail(text), []) if self._plain else tail_part(text)
        try:
            await self._draft(body, entities)
        except TelegramBadRequest as exc:
            if self._plain:
                raise
            log.info("draft refused (%s); drafts go plain", exc.message)
            self._plain = True
            await self._draft(_plain_tail(text), [])
        return True

    def _failed(self, exc: TelegramAPIError) -> None:
        global _drafts_unsupported_warned
        if isinstance(exc, TelegramNotFound):
            # an older (local) Bot API server without the method: every answer's drafts
            # end here, so say it once, where an operator looks
            if not _drafts_unsupported_warned:
                _drafts_unsupported_warned = True
                log.warning(
                    "sendMessageDraft is not supported by the Bot API server (404 %s): "
                    "private answers are not streamed, each arrives in one piece; set "
                    "STREAM_MODE_PRIVATE=edit (stream by editing a message) or off",
                    exc.message,
                )
            return
        super()._failed(exc)

    async def _draft(self, text: str, entities: list[MessageEntity]) -> None:
        await self._bot.send_message_draft(
            chat_id=self._chat_id,
            draft_id=self._draft_id,
            text=text,
            entities=entities or None,
            parse_mode=None,
            can_stop=True,
        )
        if self._metrics is not None:
            self._metrics.drafts.inc()


class EditDisplay(_Throttled):
    """A message edited in place, with an inline Stop button (see the module docstring).

    Args:
        bot: the bot (its session puts the first message into the handler's topic).
        chat_id: the chat.
        reply_to: the message answered (groups), or ``None``.
        token: the Stop button's id.
        interval_s: STREAM_EDIT_INTERVAL_MS ÷ 1000.
        control: the stream.
        on_shown: called once with the loop time of the first message sent.
        metrics: counters (optional).
        gate: the per-chat gate shared by the chat's displays (the registry's).
    """

    __slots__ = ("_clock", "_message_id", "_reply_to", "_token")

    def __init__(
        self,
        bot: Bot,
        chat_id: int,
        reply_to: int | None,
        token: str,
        interval_s: float,
        control: StreamControl,
        clock: Clock,
        *,
        on_shown: Callable[[float], None] | None = None,
        metrics: StreamMetrics | None = None,
        gate: EditPacer | None = None,
    ) -> None:
        super().__init__(
            bot, chat_id, interval_s, control, on_shown=on_shown, metrics=metrics, gate=gate
        )
        self._clock = clock
        self._reply_to = reply_to
        self._token = token
        self._message_id: int | None = None

    @property
    def message_id(self) -> int | None:
        """The streamed message, once sent."""
        return self._message_id

    def _button(self) -> InlineKeyboardMarkup:
        return InlineKeyboardMarkup(
            inline_keyboard=[
                [
                    InlineKeyboardButton(
                        text=templates.stop_button_text(), callback_data=STOP_PREFIX + self._token
                    )
                ]
            ]
        )

    async def _show(self, text: str) -> bool:
        body, entities = tail_part(text)
        try:
            await self._put(body, entities)
        except TelegramBadRequest as exc:
            if "not modified" in exc.message.lower():
                return True
            if "parse entities" not in exc.message.lower():
                raise
            await self._put(_plain_tail(text), [])
        return True

    async def _put(self, text: str, entities: list[MessageEntity]) -> None:
        if self._message_id is None:
            reply = (
                ReplyParameters(message_id=self._reply_to, allow_sending_without_reply=True)
                if self._reply_to
                else None
            )
            sent = await self._bot.send_message(
                self._chat_id,
                text,
                entities=entities or None,
                parse_mode=None,
                reply_parameters=reply,
                reply_markup=self._button(),
            )
            self._message_id = sent.message_id
            return
        await self._bot.edit_message_text(
            text=text,
            chat_id=self._chat_id,
            message_id=self._message_id,
            entities=entities or None,
            parse_mode=None,
            reply_markup=self._button(),
        )
        if self._metrics is not None:
            self._metrics.edits.inc()

    async def finish(self, markdown: str, outbox: Outbox | None = None) -> bool:
        """Turn the streamed message into the final answer: its first part replaces the
        text (no button), the other parts follow as new messages. If Telegram refuses
        the entities, the whole answer goes plain (first plain part edited in, the rest
        sent). A flood wait (Telegram's 429, or the per-chat gate) on any of it hands
        what is not delivered yet to ``outbox``, sent when the wait ends: the whole
        answer as new messages if the final edit itself waited (the streamed message
        keeps its partial text), else the parts not yet sent.

        Returns:
            False when nothing was streamed yet (the caller sends the answer as usual).

        Raises:
            aiogram.exceptions.TelegramRetryAfter: a flood wait, when no ``outbox``.
            aiogram.exceptions.TelegramAPIError: any other refusal.
        """
        await self.close()
        if self._message_id is None:
            return False
        parts = (
            split_markdown(markdown)
            if len(markdown) <= OFF_LOOP_CHARS
            else await asyncio.to_thread(split_markdown, markdown)
        )
        delivered = 0

        def progress(n: int) -> None:
            nonlocal delivered
            delivered = n

        try:
            first_text, first_entities = parts[0]
            try:
                await self._final_edit(first_text, first_entities)
            except TelegramBadRequest as exc:
                low = exc.message.lower()
                if "parse entities" in low:
                    log.warning("telegram refused entities; the streamed answer goes plain")
                    parts = split_formatted("\n".join(p for p, _e in parts), [])
                    await self._final_edit(parts[0][0], [])
                elif "not modified" not in low:
                    raise
            delivered = 1
            if len(parts) > 1:
                await send_formatted(
                    self._bot,
                    self._chat_id,
                    parts,
                    clock=self._clock,
                    skip_parts=1,
                    on_part_sent=progress,
                )
        except TelegramRetryAfter as exc:
            if outbox is None:
                raise
            await outbox.keep(
                self._chat_id,
                markdown,
                reply_to=self._reply_to,
                parts_sent=delivered,
                wait_s=float(exc.retry_after),
            )
            log.info(
                "streamed answer for chat %s kept in the outbox (%d part(s) shown): flood "
                "wait %s s",
                self._chat_id,
                delivered,
                exc.retry_after,
            )
        return True

    async def _final_edit(self, text: str, entities: list[MessageEntity]) -> None:
        assert self._message_id is not None
        await self._bot.edit_message_text(
            text=text,
            chat_id=self._chat_id,
            message_id=self._message_id,
            entities=entities or None,
            parse_mode=None,
            reply_markup=None,
        )


class StreamSession:
    """One answer's stream from the handler's side: its control (for the cascade), its
    display and its registry entry. Open with :meth:`open`; always :meth:`close`."""

    __slots__ = ("_display", "_entry", "_metrics", "_received_at", "_registry", "control")

    def __init__(
        self,
        control: StreamControl,
        display: DraftDisplay | EditDisplay,
        entry: LiveStream,
        registry: StreamRegistry,
        metrics: StreamMetrics | None,
        received_at: float,
    ) -> None:
        self.control = control
        self._display = display
        self._entry = entry
        self._registry = registry
        self._metrics = metrics
        self._received_at = received_at

    def __repr__(self) -> str:
        return f"StreamSession({type(self._display).__name__}, {self.control!r})"

    @classmethod
    def open(
        cls,
        *,
        bot: Bot,
        chat_id: int,
        private: bool,
        reply_to: int | None,
        owner_id: int,
        config: StreamConfig,
        registry: StreamRegistry,
        metrics: StreamMetrics | None,
        clock: Clock,
        received_at: float,
    ) -> StreamSession | None:
        """Start showing an answer in ``chat_id``, or ``None`` when its chat type's mode
        is ``off``.

        Args:
            received_at: loop time at which the update arrived (for the metrics).
        """
        mode = config.private if private else config.group
        if mode == "off":
            return None
        control = StreamControl()

        def shown(at: float) -> None:
            if metrics is not None:
                metrics.first_visible.observe(max(0.0, at - received_at))

        display: DraftDisplay | EditDisplay
        if mode == "draft" and private:
            entry = LiveStream(control, chat_id, owner_id, draft_id=new_draft_id())
            display = DraftDisplay(
                bot,
                chat_id,
                entry.draft_id,
                config.draft_interval_s,
                control,
                on_shown=shown,
                metrics=metrics,
                gate=registry.gate,
            )
        else:
            entry = LiveStream(control, chat_id, owner_id, token=new_token())
            display = EditDisplay(
                bot,
                chat_id,
                reply_to,
                entry.token,
                config.edit_interval_s,
                control,
                clock,
                on_shown=shown,
                metrics=metrics,
                gate=registry.gate,
            )
        control.on_text = display.on_text
        registry.add(entry)
        return cls(control, display, entry, registry, metrics, received_at)

    async def close(self) -> None:
        """The stream ended: no more drafts or edits; leave the registry (idempotent)."""
        self._registry.remove(self._entry)
        await self._display.close()
        if self._metrics is not None and self.control.first_token_at is not None:
            first = max(0.0, self.control.first_token_at - self._received_at)
            self._metrics.first_token.observe(first)
            self.control.first_token_at = None  # observed once

    async def finish(self, markdown: str, outbox: Outbox | None = None) -> bool:
        """Deliver the final answer through the display when it owns a message (edit
        mode; a flood wait hands the rest to ``outbox``); ``False`` when the caller
        sends it as usual (drafts, or nothing shown).

        Raises:
            aiogram.exceptions.TelegramAPIError: as :meth:`EditDisplay.finish`.
        """
        if isinstance(self._display, EditDisplay):
            return await self._display.finish(markdown, outbox)
        return False
