"""Questions waiting for a Go ahead: :class:`Confirmations`
(``docs/decisions/086-the-price-before-the-spend.md``).

A question is an unguessable token (16 random bytes, URL-safe: it is the inline button's
``callback_data``, 64 bytes at most) bound to the user who sent the input, the chat it was
sent in, the time it was asked (the injected monotonic clock) and the work to run. Taking
it is one synchronous step on the event loop — check the presser, check the age, remove —
so two presses (a double tap, a replay, two users) run it at most once, and only the
sender's press runs it. Nothing is held while a question waits: the work holds its
ceiling when it runs, as then computed.

The questions live in this process's memory, bounded (:data:`MAX_PER_USER`,
:data:`MAX_OPEN`: the oldest is dropped first). A restart, or a press that reaches another
webhook replica, finds no question: the press is told it is no longer open, and nothing
is spent.
"""

from __future__ import annotations

import secrets
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from enum import StrEnum

from budget.kernel.clock import Clock

__all__ = ["MAX_OPEN", "MAX_PER_USER", "Confirmations", "Pending", "Taken"]

#: Questions one user may have open; a newer one drops their oldest.
MAX_PER_USER = 3
#: Questions open in this process; a newer one drops the oldest.
MAX_OPEN = 1000


class Taken(StrEnum):
    """What a press found."""

    GO = "go"  # the sender's press within the deadline: run it
    EXPIRED = "expired"  # older than CONFIRM_TTL_SECONDS (now removed)
    NOT_YOURS = "not_yours"  # someone else pressed (the question stays)
    GONE = "gone"  # no such question (answered, cancelled, dropped, another process)


@dataclass(frozen=True, slots=True)
class Pending:
    """One open question.

    Attributes:
        user_id: who sent the input (the only one who may confirm it).
        chat_id: where it was asked.
        asked_at: monotonic time it was asked.
        run: the work, run once on Go ahead.
    """

    user_id: int
    chat_id: int
    asked_at: float
    run: Callable[[], Awaitable[object]]


class Confirmations:
    """The open questions of this process.

    Args:
        clock: the one clock (monotonic readings).
        ttl_s: CONFIRM_TTL_SECONDS, seconds a question stays open.
    """

    __slots__ = ("_clock", "_open", "ttl_s")

    def __init__(self, clock: Clock, ttl_s: float) -> None:
        if not ttl_s > 0:
            raise ValueError("ttl_s must be > 0")
        self._clock = clock
        self.ttl_s = ttl_s
        self._open: OrderedDict[str, Pending] = OrderedDict()

    def __repr__(self) -> str:
        return f"Confirmations(open={len(self._open)}, ttl_s={self.ttl_s})"

    def __len__(self) -> int:
        return len(self._open)

    def ask(self, user_id: int, chat_id: int, run: Callable[[], Awaitable[object]]) -> str:
        """Open a question; returns its token."""
        self._drop_expired()
        mine = [t for t, p in self._open.items() if p.user_id == user_id]
        for token in mine[: max(0, len(mine) - MAX_PER_USER + 1)]:
            del self._open[token]
        while len(self._open) >= MAX_OPEN:
            self._open.popitem(last=False)
        token = secrets.token_urlsafe(16)
        self._open[token] = Pending(user_id, chat_id, self._clock.monotonic(), run)
        return token

    def take(self, token: str, user_id: int, chat_id: int) -> tuple[Taken, Pending | None]:
        """A press on ``token`` by ``user_id`` in ``chat_id``: ``GO`` with the question
        (removed: it runs once), or why not. Synchronous: no press can come between the
        check and the removal."""
        pending = self._open.get(token)
        if pending is None or pending.chat_id != chat_id:
            return Taken.GONE, None
        if pending.user_id != user_id:
            return Taken.NOT_YOURS, None
        del self._open[token]
        if self._clock.monotonic() - pending.asked_at > self.ttl_s:
            return Taken.EXPIRED, None
        return Taken.GO, pending

    def cancel(self, token: str, user_id: int, chat_id: int) -> Taken:
        """A Cancel press: the question is removed when its sender pressed."""
        pending = self._open.get(token)
        if pending is None or pending.chat_id != chat_id:
            return Taken.GONE
        if pending.user_id != user_id:
            return Taken.NOT_YOURS
        del self._open[token]
        return Taken.GO

    def _drop_expired(self) -> None:
        now = self._clock.monotonic()
        for token in [t for t, p in self._open.items() if now - p.asked_at > self.ttl_s]:
            del self._open[token]
