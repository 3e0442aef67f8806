"""The most output tokens each known model can produce in one completion.

Used at start to refuse a ``CHAT_MAX_OUTPUT_TOKENS`` that no configured model can honour.
Figures are the providers' documented maxima for a completion (tokens), as published
on their model pages in 2025:

* DeepSeek ``deepseek-chat``: max output 8K (api-docs.deepseek.com, "Models & Pricing");
  ``deepseek-reasoner``: 64K.
* Groq ``llama-3.3-70b-versatile``: max completion tokens 32,768;
  ``llama-3.1-8b-instant``: 131,072 (console.groq.com/docs/models).
* Mistral ``mistral-small-latest`` and ``ministral-8b-latest``: 128K context window, which
  bounds the output (docs.mistral.ai, "Models overview").
* Cerebras ``llama-3.3-70b``: 128,000 and ``llama3.1-8b``: 32,768 context (the
  ``genai-prices`` data); a completion cannot exceed its context.

A model not listed has no known limit (``None``): nothing is refused because of it.
"""

from __future__ import annotations

from budget.pricing.names import family

__all__ = ["MAX_OUTPUT_TOKENS", "max_output_tokens"]

#: ``(provider family, model)`` → most output tokens of one completion (see the module docstring).
MAX_OUTPUT_TOKENS: dict[tuple[str, str], int] = {
    ("deepseek", "deepseek-chat"): 8_192,
    ("deepseek", "deepseek-reasoner"): 65_536,
    ("groq", "llama-3.3-70b-versatile"): 32_768,
    ("groq", "llama-3.1-8b-instant"): 131_072,
    ("mistral", "mistral-small-latest"): 128_000,
    ("mistral", "ministral-8b-latest"): 128_000,
    ("cerebras", "llama-3.3-70b"): 128_000,
    ("cerebras", "llama3.1-8b"): 32_768,
}


def max_output_tokens(provider: str, model: str) -> int | None:
    """The documented output limit of ``provider:model`` in tokens, ``None`` if unknown.

    ``groq2`` (the second Groq key) shares Groq's models.
    """
    return MAX_OUTPUT_TOKENS.get((family(provider), model))
