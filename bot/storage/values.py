"""The values the bot's stores take and give back at their seams (frozen dataclasses, so
a field is read by name, never by its place in a tuple).

* :class:`Turn`: one turn of a conversation's history, as
  :meth:`bot.storage.repos.History.append` stores it and ``load_turns`` gives it back.
* :class:`Preferences`: what the profile touch of every update answers
  (:class:`bot.middlewares.context.ProfileStore`).
* :class:`TouchedIntake`: the touch and the message's intake record in one writer step
  (:class:`bot.middlewares.intake.TouchRecorder`).
* :class:`StoredSummary`, :class:`NumberedTurn`: a conversation's running summary and
  the turns after it (:mod:`bot.storage.summaries`, read on SQLite by
  :mod:`bot.storage.sqlite_hot`).
"""

from __future__ import annotations

from dataclasses import dataclass

from llm.types import Message

__all__ = ["NumberedTurn", "Preferences", "StoredSummary", "TouchedIntake", "Turn"]


@dataclass(frozen=True, slots=True)
class Turn:
    """One turn of a conversation (``chat_turns``).

    Attributes:
        message: who said it (``user`` or ``assistant``) and the text.
        tokens: the ceiling count (tokens, with TOKEN_SAFETY_FACTOR) that history is
            trimmed by.
        raw_tokens: the turn's raw count as a prompt turn (tokens, no factor, no
            priming), so a later prompt is priced without counting it again; ``None`` for
            a turn stored before the count was kept.
    """

    message: Message
    tokens: int
    raw_tokens: int | None = None


@dataclass(frozen=True, slots=True)
class Preferences:
    """A user's stored language and timezone; ``None`` where the profile holds none
    (the caller then takes the client's language, DEFAULT_USER_TZ)."""

    language: str | None
    tz: str | None


@dataclass(frozen=True, slots=True)
class TouchedIntake:
    """The profile touch and the intake record, done in one step.

    Attributes:
        preferences: as :class:`Preferences`, read in that step.
        first_time: the message was recorded now; ``False``: it was already (a
            redelivery, to be dropped).
    """

    preferences: Preferences
    first_time: bool


@dataclass(frozen=True, slots=True)
class StoredSummary:
    """A conversation's running summary (see :class:`bot.storage.tables.ChatSummary`)."""

    through_turn_id: int
    content: str
    tokens: int
    raw_tokens: int
    summarised_turns: int
    dropped_turns: int


@dataclass(frozen=True, slots=True)
class NumberedTurn:
    """A stored turn with its ``chat_turns.id``."""

    turn_id: int
    turn: Turn
