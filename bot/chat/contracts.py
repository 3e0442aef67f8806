"""What :class:`bot.chat.service.ChatService` is built from: its knobs
(:class:`ChatConfig`) and what it needs of the token counter and of the cascade
(re-exported by :mod:`bot.chat.service`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from budget.protocol import OperationTicket
from llm.router import RouterConfig
from llm.stream import StreamControl
from llm.types import Completion, LLMRequest, Message

__all__ = ["ChatConfig", "CompletionBackend", "PromptCounter"]


class PromptCounter(Protocol):
    """What the chat needs of ``budget.pricing.tokens.TokenCounter``."""

    def raw_messages(self, messages: Sequence[Message]) -> int: ...

    def scale(self, raw: int) -> int: ...


class CompletionBackend(Protocol):
    """What the chat needs of ``llm.cascade.cascade.Cascade``."""

    async def complete(
        self, op: OperationTicket, request: LLMRequest, *, stream: StreamControl | None = None
    ) -> Completion: ...


@dataclass(frozen=True, slots=True)
class ChatConfig:
    """Chat knobs (tokens; counts)."""

    max_output_tokens: int = 1024
    max_input_tokens: int = 4000
    history_max_tokens: int = 3000
    user_max_inflight: int = 2
    user_queue_max: int = 3
    router: RouterConfig = field(default_factory=RouterConfig)
