"""A chat's persona as the chat service uses it: the system prompt and model of one
message (:class:`ChatPersona`), and the counts of the system prompts in use
(:class:`SystemCounts`). Their tokens are part of every hold
(docs/decisions/160-personas-are-part-of-every-hold.md).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from llm.types import Message

__all__ = ["DEFAULT_PROMPT", "ChatPersona", "SystemCounts"]

#: The bot's own system prompt, the default persona (not translated: the model answers
#: in the language of the message).
DEFAULT_PROMPT = (
    "You are Kopek, a concise and helpful assistant in a Telegram chat. "
    "Answer in the language of the user's message. Use Markdown sparingly."
)

#: System prompts whose counts are kept (the default and the personas in use).
SYSTEM_COUNTS_KEPT = 64


@dataclass(frozen=True, slots=True)
class ChatPersona:
    """A chat's choices for one message: its system prompt (``/persona``, resolved in
    the user's language) and its model (``/model``; ``None``: automatic)."""

    prompt: str
    model: str | None = None


class SystemCounts:
    """Raw token counts of system prompts, each text counted once (the newest
    :data:`SYSTEM_COUNTS_KEPT` texts are kept).

    Args:
        count: a message's raw count as one turn (no factor, no priming).
    """

    __slots__ = ("_count", "_known")

    def __init__(self, count: Callable[[Message], Awaitable[int]]) -> None:
        self._count = count
        self._known: dict[str, int] = {}

    def __repr__(self) -> str:
        return f"SystemCounts(kept={len(self._known)})"

    async def raw(self, prompt: str) -> int:
        """``prompt``'s raw count as the system message."""
        known = self._known.get(prompt)
        if known is None:
            known = await self._count(Message("system", prompt))
            if len(self._known) >= SYSTEM_COUNTS_KEPT:
                self._known.pop(next(iter(self._known)))
            self._known[prompt] = known
        return known
