"""The settings of personas, model choice and tools: personas and model choice
(``/persona``, ``/model``). A part of :class:`bot.settings.env.Settings` (which inherits
these fields), kept apart so each part stays readable; the names stay flat
(docs/decisions/060-settings-stay-flat.md).
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, NoDecode

__all__ = ["CHAT_TOOL_NAMES", "PersonaSettings"]

#: The tools CHAT_TOOLS may name (``bot.chat.tools``).
CHAT_TOOL_NAMES = ("my_budget", "channel_posts", "fetch_url")

#: Longest model id accepted in CHAT_MODELS (the ``chat_prefs.model`` column).
MODEL_ID_MAX = 128


class PersonaSettings(BaseSettings):
    """PERSONA_MAX_CHARS, CHAT_MODELS and CHAT_TOOLS (see ``.env.example``)."""

    #: characters a custom persona (``/persona custom TEXT``) may have
    persona_max_chars: int = Field(1000, ge=1, le=4000)
    #: model ids users may choose with /model (comma-separated); empty: every model
    #: the cascade serves
    chat_models: Annotated[frozenset[str], NoDecode] = frozenset()

    #: the tools the chat model may call (comma-separated names of CHAT_TOOL_NAMES);
    #: empty: none (one model call per message)
    chat_tools: Annotated[frozenset[str], NoDecode] = frozenset()

    @field_validator("chat_tools", mode="before")
    @classmethod
    def _split_tools(cls, value: object) -> object:
        if isinstance(value, str):
            names = frozenset(v.strip().lower() for v in value.split(",") if v.strip())
            unknown = sorted(names - set(CHAT_TOOL_NAMES))
            if unknown:
                raise ValueError(
                    f"unknown tool {unknown[0]!r}: the tools are {', '.join(CHAT_TOOL_NAMES)}"
                )
            return names
        return value

    @field_validator("chat_models", mode="before")
    @classmethod
    def _split_models(cls, value: object) -> object:
        if isinstance(value, str):
            names = frozenset(v.strip() for v in value.split(",") if v.strip())
            for name in names:
                if len(name) > MODEL_ID_MAX:
                    raise ValueError(f"a model id is at most {MODEL_ID_MAX} characters")
            return names
        return value
