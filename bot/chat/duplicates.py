"""The same question twice is paid once (docs/decisions/154-the-same-question-is-paid-once.md).

A message is identified by a hash of (user, chat, topic, text). While one copy is being
answered, another copy *joins* it: no provider request, a short "answering your message
above". For ``DUPLICATE_WINDOW_SECONDS`` after its answer, a copy is *recent*: it is not
answered again unless the user presses the "regenerate" button under the notice, which
makes one new, paid, request. Anything else is *new* and answered as usual. Only an
answer that ended by itself starts the window: after a stopped or cut-off stream, a
refusal or a failure, the same question is asked again as new.

The state is this process's (in memory, bounded: :data:`MAX_ENTRIES` recent answers and
regenerate buttons, the oldest forgotten first; buttons expire after
:data:`REGENERATE_TTL_S`). Replicas each keep their own: a copy delivered to another
replica is answered there (a webhook sends a user's updates one at a time, so copies
reach replicas only when they run in parallel). Times are the injected clock's
monotonic seconds.
"""

from __future__ import annotations

import hashlib
import secrets
from collections import OrderedDict
from dataclasses import dataclass
from enum import StrEnum
from typing import TypeVar

from bot.chat.outcome import ChatAnswer, ChatOutcome
from budget.kernel.clock import Clock

__all__ = [
    "MAX_ENTRIES",
    "REGENERATE_PREFIX",
    "REGENERATE_TTL_S",
    "Claim",
    "DuplicateGate",
    "Regenerate",
    "Verdict",
    "answered_in_full",
]

_V = TypeVar("_V")

#: Recent answers and regenerate buttons kept, each (oldest dropped first).
MAX_ENTRIES = 10_000
#: Seconds a regenerate button works (then "send the question again").
REGENERATE_TTL_S = 3600.0
#: ``callback_data`` of a regenerate button: this prefix and a random token.
REGENERATE_PREFIX = "regen:"


class Verdict(StrEnum):
    """What to do with a message."""

    NEW = "new"  # answer it (the caller must :meth:`DuplicateGate.finish` its claim)
    JOINED = "joined"  # its copy is being answered now
    RECENT = "recent"  # its copy was answered within the window: offer regenerate


@dataclass(frozen=True, slots=True)
class Regenerate:
    """What a regenerate button re-asks: whose question, where, in which language and
    zone (a button press carries no profile)."""

    user_id: int
    chat_id: int
    thread_id: int | None
    text: str
    language: str
    tz: str


@dataclass(frozen=True, slots=True)
class Claim:
    """A message's verdict; ``key`` is its hash, ``token`` the regenerate button's
    (``RECENT`` only)."""

    verdict: Verdict
    key: str
    token: str = ""


def answered_in_full(outcome: ChatOutcome) -> bool:
    """True for an answer that ended by itself: a stopped or cut-off stream, a refusal
    or a failure starts no window (asking again is not a duplicate then)."""
    if not isinstance(outcome, ChatAnswer):
        return False
    completion = outcome.completion
    return not completion.stopped and not completion.stream_cut


def message_key(user_id: int, chat_id: int, thread_id: int | None, text: str) -> str:
    """The hash of one message's identity (SHA-256, hex)."""
    raw = f"{user_id}\x1f{chat_id}\x1f{thread_id}\x1f{text.strip()}"
    return hashlib.sha256(raw.encode("utf-8", "surrogatepass")).hexdigest()


class DuplicateGate:
    """Joins, remembers and offers to regenerate (see the module docstring).

    Args:
        clock: the one clock (monotonic seconds).
        window_s: DUPLICATE_WINDOW_SECONDS (0: only in-flight copies join).
    """

    def __init__(self, clock: Clock, window_s: float) -> None:
        self._clock = clock
        self._window = window_s
        self._flying: dict[str, int] = {}
        self._answered: OrderedDict[str, float] = OrderedDict()
        self._buttons: OrderedDict[str, tuple[float, Regenerate]] = OrderedDict()

    def __repr__(self) -> str:
        return f"DuplicateGate(in_flight={len(self._flying)}, recent={len(self._answered)})"

    def claim(self, ask: Regenerate) -> Claim:
        """The verdict for a message (synchronous: no await between the check and the
        claim, so of copies handled at once exactly one is ``NEW``)."""
        key = message_key(ask.user_id, ask.chat_id, ask.thread_id, ask.text)
        if key in self._flying:
            return Claim(Verdict.JOINED, key)
        now = self._clock.monotonic()
        answered = self._answered.get(key)
        if answered is not None and now - answered < self._window:
            token = secrets.token_urlsafe(12)
            self._buttons[token] = (now, ask)
            _trim(self._buttons)
            return Claim(Verdict.RECENT, key, token)
        self._flying[key] = 1
        return Claim(Verdict.NEW, key)

    def start_regenerate(self, ask: Regenerate) -> str | None:
        """Claim a regenerated question's answer (its copies join it); ``None`` when a
        copy is being answered right now (the press then does nothing)."""
        key = message_key(ask.user_id, ask.chat_id, ask.thread_id, ask.text)
        if key in self._flying:
            return None
        self._flying[key] = 1
        return key

    def finish(self, key: str, *, answered: bool) -> None:
        """The ``NEW`` (or regenerated) message of ``key`` ended; ``answered``: with an
        answer, which starts its window."""
        self._flying.pop(key, None)
        if answered and self._window > 0:
            self._answered[key] = self._clock.monotonic()
            self._answered.move_to_end(key)
            _trim(self._answered)

    def owner_of(self, token: str) -> int | None:
        """Whose question a live regenerate button re-asks (``None``: unknown token)."""
        entry = self._buttons.get(token)
        return None if entry is None else entry[1].user_id

    def button(self, token: str, presser_id: int) -> Regenerate | None:
        """The question behind a regenerate button pressed by ``presser_id``; ``None``
        when it expired, is unknown, or is someone else's. A button works once."""
        entry = self._buttons.get(token)
        if entry is None:
            return None
        at, ask = entry
        if ask.user_id != presser_id:
            return None
        del self._buttons[token]
        if self._clock.monotonic() - at > REGENERATE_TTL_S:
            return None
        return ask


def _trim(table: OrderedDict[str, _V]) -> None:
    """Forget the oldest entries beyond :data:`MAX_ENTRIES`."""
    while len(table) > MAX_ENTRIES:
        table.popitem(last=False)
