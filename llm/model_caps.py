"""What each known model can do in one completion: its most output tokens and its
context window.

Output limits are used at start to refuse a ``CHAT_MAX_OUTPUT_TOKENS`` that no configured
model can honour. Figures are the providers' documented maxima for a completion (tokens),
as published on their model pages in 2025:

* DeepSeek ``deepseek-chat``: max output 8K (api-docs.deepseek.com, "Models & Pricing");
  ``deepseek-reasoner``: 64K.
* Groq ``llama-3.3-70b-versatile``: max completion tokens 32,768;
  ``llama-3.1-8b-instant``: 131,072 (console.groq.com/docs/models).
* Mistral ``mistral-small-latest`` and ``ministral-8b-latest``: 128K context window, which
  bounds the output (docs.mistral.ai, "Models overview").
* Cerebras ``llama-3.3-70b``: 128,000 and ``llama3.1-8b``: 32,768 context (the
  ``genai-prices`` data); a completion cannot exceed its context.

Context windows bound what a provider can possibly bill for one call: at most the
window plus the ``max_tokens`` sent (:func:`possible_tokens`; a report beyond that is
garbage, see ``llm/cascade/attempt.py``). So each figure is the model's *largest*
documented window (a "128K" read as 131,072), never the conservative one the cascade
uses to skip a key for a long prompt (``llm/cascade/factory.py``):

* Groq ``llama-3.3-70b-versatile`` and ``llama-3.1-8b-instant``: 131,072 context window
  (console.groq.com/docs/models; genai-prices 0.2.3 has no figure for either).
* Mistral ``mistral-small-latest`` and ``ministral-8b-latest``: 128K (docs.mistral.ai,
  "Models overview": Mistral Small 3.x and Ministral 8B 128k), read as 131,072.
* Cerebras ``llama-3.3-70b``: 128,000 and ``llama3.1-8b``: 32,768 (genai-prices 0.2.3's
  ``context_window``; inference-docs.cerebras.ai/models gives the same on paid tiers).
* DeepSeek ``deepseek-chat`` and ``deepseek-reasoner``: 128K, DeepSeek-V3.2
  (api-docs.deepseek.com/quick_start/pricing, "context length 128K"), read as 131,072;
  genai-prices 0.2.3 still says 64,000 (the V3 figure).

A model not listed has no known limit (``None``): nothing is refused because of it, and
its possible usage is bounded by the window configured for its key.
"""

from __future__ import annotations

from budget.pricing.names import family

__all__ = [
    "CONTEXT_WINDOW_TOKENS",
    "MAX_OUTPUT_TOKENS",
    "context_window_tokens",
    "max_output_tokens",
    "possible_tokens",
]

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

#: ``(provider family, model)`` → largest documented context window, tokens (see the
#: module docstring for each figure's source).
CONTEXT_WINDOW_TOKENS: dict[tuple[str, str], int] = {
    ("deepseek", "deepseek-chat"): 131_072,
    ("deepseek", "deepseek-reasoner"): 131_072,
    ("groq", "llama-3.3-70b-versatile"): 131_072,
    ("groq", "llama-3.1-8b-instant"): 131_072,
    ("mistral", "mistral-small-latest"): 131_072,
    ("mistral", "ministral-8b-latest"): 131_072,
    ("cerebras", "llama-3.3-70b"): 128_000,
    ("cerebras", "llama3.1-8b"): 32_768,
}


def max_output_tokens(provider: str, model: str) -> int | None:
    """The documented output limit of ``provider:model`` in tokens, ``None`` if unknown.

    ``groq2`` (the second Groq key) shares Groq's models.
    """
    return MAX_OUTPUT_TOKENS.get((family(provider), model))


def context_window_tokens(provider: str, model: str) -> int | None:
    """The largest documented context window of ``provider:model`` in tokens, ``None``
    if unknown (``groq2`` shares Groq's models)."""
    return CONTEXT_WINDOW_TOKENS.get((family(provider), model))


def possible_tokens(provider: str, model: str, configured_window: int, max_tokens: int) -> int:
    """The most tokens (input + output) one call of ``max_tokens`` can be billed for:
    the model's context window — the larger of its documented one and
    ``configured_window`` (the key's, tokens) — plus ``max_tokens``."""
    window = max(context_window_tokens(provider, model) or 0, configured_window)
    return window + max_tokens
