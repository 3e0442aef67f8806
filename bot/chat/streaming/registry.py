"""Every answer streaming now, and the three ways to stop one.

Stop: a ``stopped_message_generation`` update (the draft's Stop), the inline button, or
``/stop`` ask :class:`StreamRegistry` to stop the stream; the cascade then closes the
provider connection at once (:class:`llm.stream.StreamControl`). Only the message's own
sender or an admin may stop it; a press by anyone else changes nothing (they are told
who can). ``/kill hard`` and a shutdown past its grace stop every stream in flight.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import secrets
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

from bot.chat.streaming.pacing import EditPacer
from bot.ops.signals import SignalWatcher
from budget.kernel.clock import Clock
from llm.stream import StreamControl

__all__ = [
    "STOP_PREFIX",
    "LiveStream",
    "StopRelayPort",
    "StopResult",
    "StreamRegistry",
    "new_draft_id",
    "new_token",
]

#: ``callback_data`` prefix of the inline Stop button (``stop:<token>``).
STOP_PREFIX = "stop:"
#: Seconds after its last call a chat nobody streams to is forgotten by the pacer.
IDLE_CHAT_S = 60.0
_draft_ids = itertools.count(1)


class StopResult(StrEnum):
    """What a stop request did."""

    STOPPED = "stopped"
    DENIED = "denied"  # someone other than the sender or an admin
    GONE = "gone"  # nothing streaming under that id (finished already)


class StopRelayPort(Protocol):
    """Stops relayed between replicas (:class:`bot.ops.stop_relay.StopRelay`)."""

    async def relay(self, token: str, user_id: int, *, is_admin: bool) -> StopResult:
        """What the replica writing the answer of button ``token`` did for ``user_id``."""

    async def relay_user(self, chat_id: int, user_id: int, *, is_admin: bool) -> int:
        """How many answers ``/stop`` stopped on the other replicas."""

    async def relay_draft(self, chat_id: int, draft_id: int) -> None:
        """Pass a draft's Stop to the replica writing that draft."""

    async def start(self) -> None:
        """Start acting on the presses other replicas relay."""

    async def stop(self) -> None:
        """Stop acting on them."""


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


class StreamRegistry:
    """Every answer streaming now, for the three ways to stop one and for ``/kill hard``.

    Entries are added when a stream starts and removed when it ends, so the registry
    never outgrows what is in flight.

    Args:
        clock: the one clock (the pacer's pace, :meth:`wait_stopped`'s timeout).

    Attributes:
        pacer: one draft/edit at a time per chat, across the chat's answers.
        kill_watch: replicas on one PostgreSQL: tells the others of a ``/kill hard`` and
            cuts this one's streams when another raised it (:mod:`bot.ops.signals`);
            ``None``: one process.
        stop_relay: replicas on one PostgreSQL: a Stop press for a stream another
            replica writes is relayed to it (:mod:`bot.ops.stop_relay`); ``None``: one
            process.
    """

    __slots__ = ("_clock", "_left", "_live", "kill_watch", "pacer", "stop_relay")

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._live: list[LiveStream] = []
        self.pacer = EditPacer(clock)
        #: set (and dropped) when a stream leaves; created by whoever waits for that
        self._left: asyncio.Event | None = None
        self.kill_watch: SignalWatcher | None = None
        self.stop_relay: StopRelayPort | None = None

    def __repr__(self) -> str:
        return f"StreamRegistry(in_flight={len(self._live)})"

    @property
    def in_flight(self) -> int:
        """Streams in flight."""
        return len(self._live)

    def add(self, entry: LiveStream) -> None:
        """Register a stream that has started (and forget the pace of chats idle for
        :data:`IDLE_CHAT_S`, so the pacer stays as small as the chats recently streamed to)."""
        self._live.append(entry)
        self.pacer.forget_idle(self._clock.monotonic() - IDLE_CHAT_S)

    def remove(self, entry: LiveStream) -> None:
        """Forget a stream that has ended (no-op when already gone)."""
        with contextlib.suppress(ValueError):
            self._live.remove(entry)
        if self._left is not None:
            self._left.set()
            self._left = None

    async def wait_stopped(self, timeout_s: float) -> int:
        """Wait until every stream asked to stop has left — its attempt settled (a
        stream leaves once the cascade returned) — for at most ``timeout_s`` seconds of
        the clock.

        Returns:
            How many stopped streams are still in flight (0: all settled).
        """
        end = self._clock.monotonic() + timeout_s
        while True:
            left = sum(1 for entry in self._live if entry.control.stopped.is_set())
            remaining = end - self._clock.monotonic()
            if not left or remaining <= 0:
                return left
            if self._left is None:
                self._left = asyncio.Event()
            await self._set_or_slept(self._left, remaining)

    async def _set_or_slept(self, event: asyncio.Event, seconds: float) -> None:
        """Until ``event`` is set or the clock slept ``seconds``, whichever comes first."""
        waiter = asyncio.ensure_future(event.wait())
        pause = asyncio.ensure_future(self._clock.sleep(seconds))
        try:
            await asyncio.wait({waiter, pause}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for each in (waiter, pause):
                each.cancel()
            await asyncio.gather(waiter, pause, return_exceptions=True)

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


def _stopped(entry: LiveStream, reason: str) -> StopResult:
    entry.control.stop(reason)
    return StopResult.STOPPED


def new_draft_id() -> int:
    """A non-zero draft id, unique in this process."""
    return next(_draft_ids)


def new_token() -> str:
    """An unguessable id for an inline Stop button."""
    return secrets.token_urlsafe(9)
