"""Provider clients, one small module per API family, all satisfying :class:`Provider`."""

from __future__ import annotations

from llm.providers.base import Provider
from llm.providers.groq import GroqProvider
from llm.providers.mistral import MistralProvider
from llm.providers.openai_compat import OpenAICompatProvider

__all__ = ["GroqProvider", "MistralProvider", "OpenAICompatProvider", "Provider"]
