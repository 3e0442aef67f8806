"""Provider key names: the one list of them, in cascade order (free tiers first, the
paid anchor last). Both settings classes (the bot's and ``python -m budget``'s), the
price card, the books, the output limits and the factory all derive from it.

A *key name* is one configured key (``groq2`` is a second Groq key); its *family* is
the provider (company) whose settings it shares (``groq2`` → ``groq``: same base URL,
models, tier, billing zone) and whose id genai-prices knows; its *kind* is the API it
speaks. Settings fields follow the family: ``<family>_base_url``, ``_model``,
``_cheap_model``, ``_tier``, ``_billing_tz``; each key has its own ``key_field``.

It lives in ``budget/`` because ``llm/`` imports ``budget/`` (never the reverse), so
every layer can import it. No imports: settings read this without loading any client.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "CASCADE_ORDER",
    "FAMILIES",
    "KEYS",
    "KINDS",
    "KeyName",
    "family",
    "family_fields",
    "key_field",
]


@dataclass(frozen=True, slots=True)
class KeyName:
    """One provider key.

    Attributes:
        name: the key name (``groq2``), as the ledger books it.
        family: the provider whose settings it shares and whose genai-prices id it
            has (``groq``).
        kind: API kind: ``groq`` and ``mistral`` through their SDKs, ``openai``
            (OpenAI-compatible) over httpx.
        key_field: the settings field holding the API key (``groq_api_key_2``; the
            variable is its upper case).
    """

    name: str
    family: str
    kind: str
    key_field: str


#: Every provider key, in cascade order.
KEYS: tuple[KeyName, ...] = (
    KeyName("groq", "groq", "groq", "groq_api_key"),
    KeyName("groq2", "groq", "groq", "groq_api_key_2"),
    KeyName("mistral", "mistral", "mistral", "mistral_api_key"),
    KeyName("cerebras", "cerebras", "openai", "cerebras_api_key"),
    KeyName("deepseek", "deepseek", "openai", "deepseek_api_key"),
)

_BY_NAME: dict[str, KeyName] = {k.name: k for k in KEYS}

#: Provider key names in cascade order.
CASCADE_ORDER: tuple[str, ...] = tuple(k.name for k in KEYS)

#: The providers (families), in cascade order of their first key.
FAMILIES: tuple[str, ...] = tuple(dict.fromkeys(k.family for k in KEYS))

#: API kind of each key name.
KINDS: dict[str, str] = {k.name: k.kind for k in KEYS}


def family(name: str) -> str:
    """The provider whose settings key ``name`` shares (``groq2`` → ``groq``); a name
    that is no key is returned unchanged."""
    key = _BY_NAME.get(name)
    return name if key is None else key.family


def key_field(name: str) -> str:
    """The settings field of key ``name``: ``groq_api_key``, ``groq_api_key_2``, ...

    Raises:
        KeyError: ``name`` is no provider key name.
    """
    return _BY_NAME[name].key_field


def family_fields(suffix: str) -> tuple[str, ...]:
    """The settings field ``<family>_<suffix>`` of every provider (``base_url`` →
    ``groq_base_url``, ``mistral_base_url``, ...)."""
    return tuple(f"{f}_{suffix}" for f in FAMILIES)
