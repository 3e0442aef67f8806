"""What a message other than typed text brings to the chat path: :class:`MediaTurn`.

A document or a page is text by the time it reaches the chat service (read in a worker
process, refused there if it cannot be): only its input cap differs. A photo adds its
image to the user's turn and is answered by the vision cascade. A voice note's text is
only known once it is transcribed, which is a paid step *of the same operation*
(``OPERATION_MAX_USD`` covers both): :attr:`MediaTurn.transcribe` runs after the
operation is admitted and before the answer is held.

:class:`PlanTurn` is how the user's plan makes a message wait: its concurrency and the
priority of its provider-call slot.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from budget.plans import Plan
from budget.protocol import OperationTicket
from llm.types import ImagePart, Priority

__all__ = ["MediaTurn", "PlanTurn"]


@dataclass(frozen=True, slots=True)
class MediaTurn:
    """The media part of one user turn.

    Attributes:
        kind: ``document``, ``link``, ``photo`` or ``voice`` (logs and metrics).
        images: images attached to the turn (a photo): answered by the vision cascade.
        transcribe: the operation's first step (a voice note): holds, downloads,
            transcribes, settles, and returns the transcript, which becomes the turn's
            text. Raises ``HoldRefused``, ``LLMError``, ``MediaRefused`` or a download
            error.
        max_input_tokens: the turn's input cap, tokens (``None``: CHAT_MAX_INPUT_TOKENS).
        stored: the turn as history keeps it (``None``: its text). A photo is kept as
            its caption and a mark: the image itself is never stored.
    """

    kind: str
    images: tuple[ImagePart, ...] = ()
    transcribe: Callable[[OperationTicket], Awaitable[str]] | None = None
    max_input_tokens: int | None = None
    stored: str | None = None

    @property
    def answer_step(self) -> str:
        """What the answer's hold is for, in a refusal's words
        (:func:`bot.text.templates.refusal_text`): about a ``photo``, a ``document`` or a
        ``link``'s page (its prompt holds it), else an ``answer`` (a transcript's)."""
        return self.kind if self.kind in ("photo", "document", "link") else "answer"


@dataclass(frozen=True, slots=True)
class PlanTurn:
    """How one message waits: the user's operations at once (the queue's slots) and the
    priority of its provider-call slot (lower first)."""

    slots: int
    priority: int

    @classmethod
    def of(cls, plan: Plan | None, default_slots: int) -> PlanTurn:
        """The plan's concurrency (else ``default_slots``, USER_MAX_INFLIGHT) and its
        priority p (0..9, higher first) as slot priority -p (lower first); no plan:
        ``default_slots`` at chat priority."""
        slots = default_slots
        if plan is not None and plan.limits.max_inflight is not None:
            slots = plan.limits.max_inflight
        return cls(slots, Priority.CHAT - (plan.priority if plan is not None else 0))
