"""Shared helpers of the ``llm/`` tests (keys, models, fixtures loader, specs)."""

from __future__ import annotations

import functools
import json
import ssl
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx

from llm.cascade.factory import ProviderSpec
from llm.types import Message
from tests.support.providers import FakeProviders

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "llm"
CORPUS = Path(__file__).resolve().parents[3] / "shared" / "corpus" / "llm"

#: key name → (api family, provider served by the fake, api key used)
KEYS: dict[str, tuple[str, str, str]] = {
    "groq": ("groq", "groq", "gsk-key-1"),
    "groq2": ("groq", "groq", "gsk-key-2"),
    "mistral": ("mistral", "mistral", "mistral-key"),
    "cerebras": ("openai", "cerebras", "csk-key"),
    "deepseek": ("openai", "deepseek", "sk-deepseek"),
}
MODELS = {
    "groq": "llama-3.3-70b-versatile",
    "groq2": "llama-3.3-70b-versatile",
    "mistral": "mistral-small-latest",
    "cerebras": "llama-3.3-70b",
    "deepseek": "deepseek-chat",
}
CONTEXT = {
    "groq": 131_072,
    "groq2": 131_072,
    "mistral": 32_768,
    "cerebras": 8_192,
    "deepseek": 131_072,
}


@functools.cache
def tls() -> ssl.SSLContext:
    """One TLS context for every provider client the tests build, as the bot makes one
    per process (``bot/app/factory.py``): each new default context loads the CA bundle (~30 ms)."""
    return httpx.create_ssl_context()


def load_fixture(name: str) -> Any:
    """A recorded provider body from ``tests/fixtures/llm``."""
    return json.loads((FIXTURES / name).read_text(encoding="utf-8"))


def count_tokens(messages: Sequence[Message]) -> int:
    """Test token counter: the fake's own rule (ceil(chars/4) + 4 per message)."""
    return sum(-(-len(m.content) // 4) + 4 for m in messages)


def spec(name: str, fake: FakeProviders, *, paid: bool | None = None) -> ProviderSpec:
    """A provider spec pointing at the fake."""
    kind, served, key = KEYS[name]
    return ProviderSpec(
        name=name,
        kind=kind,
        api_key=key,
        base_url=fake.base_urls[served],
        model=MODELS[name],
        cheap_model="deepseek-chat-lite" if name == "deepseek" else MODELS[name],
        paid=(name == "deepseek") if paid is None else paid,
        context_window_tokens=CONTEXT[name],
    )
