"""Provider key names: the one list of them, in cascade order (free tiers first, the
paid anchor last). Settings, the composition root and the factory all derive from it.

A *key name* is one configured key (``groq2`` is a second Groq key); its *family* is
the provider whose settings it shares (``groq2`` → ``groq``: same base URL, models,
tier), its *kind* the API it speaks. No imports: settings read this without loading
any client.
"""

from __future__ import annotations

__all__ = ["CASCADE_ORDER", "KINDS", "family"]

#: Provider key names in cascade order.
CASCADE_ORDER: tuple[str, ...] = ("groq", "groq2", "mistral", "cerebras", "deepseek")

#: API kind of each key name: ``groq`` and ``mistral`` through their SDKs, ``openai``
#: (OpenAI-compatible) over httpx.
KINDS: dict[str, str] = {
    "groq": "groq",
    "groq2": "groq",
    "mistral": "mistral",
    "cerebras": "openai",
    "deepseek": "openai",
}


def family(name: str) -> str:
    """The provider whose settings key ``name`` shares (``groq2`` → ``groq``)."""
    return "groq" if name == "groq2" else name
