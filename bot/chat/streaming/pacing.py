"""The per-chat pace of streamed drafts and edits.

Telegram's flood limits are per chat, not per answer, so every answer streaming into one
chat shares one interval: :class:`EditPacer` gives the chat's displays turns (round
robin, first come first served), and :class:`PacedDisplay` (the base of the draft and
edit displays) waits for its turn, then shows the text as it is then. Final answers never
pass through here.

Time is the injected clock's (``docs/decisions/020-clock-rule.md``): the interval is a
policy about real time, so it is read with :meth:`Clock.monotonic` and waited with
:meth:`Clock.sleep`, like every other pace of the bot.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import logging
from collections.abc import Callable

from aiogram import Bot
from aiogram.exceptions import TelegramAPIError, TelegramRetryAfter

from bot.chat.failures import refuses_chat
from bot.chat.streaming.metrics import StreamMetrics
from budget.kernel.clock import Clock
from llm.stream import StreamControl

__all__ = ["EditPacer", "PacedDisplay"]

log = logging.getLogger(__name__)


class _EditQueue:
    """One chat's turn order: the displays waiting to show text (first = next), and the
    clock's monotonic time from which the next draft/edit may go."""

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
    ends leaves the queue; final answers never pass through the pacer.

    Args:
        clock: the one clock; times given to :meth:`done` and :meth:`forget_idle` are its
            :meth:`~budget.kernel.clock.Clock.monotonic` seconds.
    """

    __slots__ = ("_clock", "_lanes")

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._lanes: dict[int, _EditQueue] = {}

    def __repr__(self) -> str:
        return f"EditPacer(chats={len(self._lanes)})"

    async def turn(self, chat: int, who: object) -> None:
        """Wait until ``who`` may make the chat's next call (it stays first meanwhile:
        call :meth:`done` or :meth:`leave` after). Cancelled: ``who`` leaves."""
        lane = self._lanes.get(chat)
        if lane is None:
            lane = self._lanes[chat] = _EditQueue()
        if who not in lane.queue:
            lane.queue.append(who)
        try:
            while True:
                if lane.queue[0] is who:
                    wait = lane.next_at - self._clock.monotonic()
                    if wait <= 0:
                        return
                    await self._clock.sleep(wait)  # next_at may move (a flood wait): look again
                else:
                    if lane.moved is None:
                        lane.moved = asyncio.Event()
                    await lane.moved.wait()
        except BaseException:
            self.leave(chat, who)
            raise

    def done(self, chat: int, who: object, next_at: float) -> None:
        """``who`` made its call; the chat's next one may go at monotonic ``next_at``."""
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
        """Drop the chats nobody waits in whose last call was before monotonic ``before``."""
        for chat in [
            c for c, lane in self._lanes.items() if not lane.queue and lane.next_at < before
        ]:
            del self._lanes[chat]


class PacedDisplay(abc.ABC):
    """Shows the latest text when its chat's :class:`EditPacer` gives it a turn (at most
    one draft/edit per ``interval_s`` per chat, across the chat's answers), only when it
    changed; the Bot API call runs in its own task so the provider stream is never held
    up.

    A turn that comes once the provider's stream has been read to its end shows
    nothing (``StreamControl.reading``): the final answer follows at once.

    A flood wait pauses the display until the wait ends, then it shows the text as it is
    then; a refusal meaning the chat takes no message from the bot
    (:func:`bot.chat.failures.refuses_chat`) stops the stream — the answer could never be
    delivered, so it is not generated further; any other failure ends the display only
    (the answer continues and is sent as usual).

    Args:
        bot: the bot.
        chat_id: the chat shown in (the interval holds per chat, across answers).
        interval_s: seconds between two calls into the chat.
        control: the stream.
        clock: the one clock (the pace, and the time given to ``on_shown``).
        on_shown: called once with the clock's monotonic time of the first text accepted.
        metrics: counters (optional).
        pacer: the per-chat pacer shared by the chat's displays (the registry's);
            ``None``: one of its own.
    """

    __slots__ = (
        "_bot",
        "_changed",
        "_chat_id",
        "_clock",
        "_closed",
        "_in_flight",
        "_interval_s",
        "_latest",
        "_metrics",
        "_on_shown",
        "_pacer",
        "_shown_text",
        "_starting",
        "_task",
        "control",
    )

    def __init__(
        self,
        bot: Bot,
        chat_id: int,
        interval_s: float,
        control: StreamControl,
        clock: Clock,
        *,
        on_shown: Callable[[float], None] | None,
        metrics: StreamMetrics | None,
        pacer: EditPacer | None,
    ) -> None:
        self.control = control
        self._bot = bot
        self._chat_id = chat_id
        self._interval_s = interval_s
        self._clock = clock
        self._on_shown = on_shown
        self._metrics = metrics
        self._pacer = pacer if pacer is not None else EditPacer(clock)
        self._latest = ""
        self._shown_text = ""
        self._changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._starting = False  # the sender's start is scheduled (next loop iteration)
        self._closed = False
        self._in_flight = False  # a Bot API call of this display is at Telegram

    def on_text(self, text: str) -> None:
        """The stream's callback: remember the text, wake the sender — started on the
        loop's next iteration, and only if the stream is still being read then: a
        provider that answers at once costs no sender task (its answer goes out whole)."""
        self._latest = text
        self._changed.set()
        if self._task is None and not self._starting:
            self._starting = True
            asyncio.get_running_loop().call_soon(self._start)

    def _start(self) -> None:
        self._starting = False
        if self._task is None and not self._closed and self.control.reading:
            self._task = asyncio.ensure_future(self._run())

    def _next_at(self, after_s: float) -> float:
        return self._clock.monotonic() + after_s

    async def _run(self) -> None:
        try:
            await self._take_turns()
        finally:
            if self._in_flight:
                # closed while a call was at Telegram (the final answer came): it counts
                # as the chat's last call, answered now, so the next answer's turn still
                # waits the interval (seen under load: two edits 25 ms apart)
                self._pacer.done(self._chat_id, self, self._next_at(self._interval_s))
            else:
                self._pacer.leave(self._chat_id, self)

    async def _take_turns(self) -> None:
        pacer, chat = self._pacer, self._chat_id
        while True:
            await self._changed.wait()
            # the interval runs from the last call Telegram answered in this chat, any answer's
            await pacer.turn(chat, self)
            self._changed.clear()
            text = self._latest
            if not text.strip() or text == self._shown_text or not self.control.reading:
                # nothing new, or the stream already ended: its answer is about to go
                # out whole (a provider that answers at once costs no draft)
                pacer.leave(chat, self)
                continue
            try:
                shown = await self._shown_once(text)
            except TelegramRetryAfter as exc:
                # resume once the wait is over, with the text as it is then
                log.info("stream display paused for %s s: flood wait", exc.retry_after)
                pacer.done(chat, self, self._next_at(exc.retry_after))
                self._changed.set()
                continue
            except TelegramAPIError as exc:
                pacer.done(chat, self, self._next_at(self._interval_s))
                if refuses_chat(exc):
                    # the answer could never be delivered: stop paying for it
                    log.info("stream display refused (%s); the stream is stopped", exc.message)
                    self.control.stop("undeliverable")
                else:
                    self._failed(exc)
                return
            pacer.done(chat, self, self._next_at(self._interval_s))
            if shown:
                self._shown_text = text
                if not self.control.shown and self._on_shown is not None:
                    self._on_shown(self._clock.monotonic())  # the first text the user sees
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
        self._closed = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
