"""The settings of conversations that stay cheap: the cheap-model router, history
summaries, duplicate messages (a mixin of :class:`bot.settings.Settings`; flat names,
docs/decisions/060-settings-stay-flat.md). Each is documented in ``.env.example`` and
``docs/configuration.md``."""

from __future__ import annotations

from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings

__all__ = ["ConversationSettings"]

#: The ceiling of these ``*_TOKENS`` settings (as ``bot.settings.env.MAX_TOKENS``).
_MAX_TOKENS = 1_000_000


class ConversationSettings(BaseSettings):
    """Router, summaries, duplicates (docs/chat.md)."""

    # the router (llm/router.py): "off" sends every request to the main models
    chat_router: Literal["on", "off"] = "on"
    # the longest chat message (tokens) and the most history (tokens) routed small
    router_small_max_tokens: int = Field(60, ge=0, le=_MAX_TOKENS)
    router_small_max_context_tokens: int = Field(1500, ge=0, le=_MAX_TOKENS)
    # a history summary's output cap (tokens); 0 = never summarise: cut oldest-first
    chat_summary_max_tokens: int = Field(256, ge=0, le=_MAX_TOKENS)
    # after an answer, the same text again within this many seconds is not paid again
    # unless the user presses "regenerate"; 0 = off (only copies still being answered join)
    duplicate_window_seconds: float = Field(60.0, ge=0, le=86_400)
