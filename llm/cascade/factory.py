"""Build the cascade from plain values (the bot's composition root calls this with
values taken from Settings; ``llm/`` never reads Settings itself).

Example (composition root)::

    specs = provider_specs(
        keys={n: k.get_secret_value() for n, k in settings.provider_keys().items()},
        base_urls={"groq": settings.groq_base_url, ...},
        models={"groq": settings.groq_model, ...},
        cheap_models={"groq": settings.groq_cheap_model, ...},
        tiers={"groq": settings.groq_tier, ...},
    )
    cascade = build_cascade(specs, ledger=ledger, clock=clock, config=CascadeConfig(...),
                            token_counter=counter.messages, registry=registry)
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import httpx
from prometheus_client import CollectorRegistry

from budget.kernel.clock import Clock
from budget.pricing.names import CASCADE_ORDER, KINDS, family
from budget.protocol import LedgerPort
from llm.cascade.cascade import Cascade, CascadeConfig, EventSink, TokenCounter
from llm.keys.admission import KeyStateStore
from llm.keys.share_counts import ShareStore
from llm.keys.slots import CallClaimStore
from llm.providers.base import Provider

if TYPE_CHECKING:  # imported at run time only for families that have a key
    from llm.providers.groq import GroqProvider
    from llm.providers.mistral import MistralProvider
    from llm.providers.openai_compat import OpenAICompatProvider

__all__ = [
    "CASCADE_ORDER",
    "DEFAULT_CONTEXT_WINDOWS",
    "ProviderSpec",
    "build_cascade",
    "build_provider",
    "provider_specs",
]


#: Context window (tokens) of the default models. Sources: console.groq.com/docs/models
#: (llama-3.3-70b-versatile 131,072); docs.mistral.ai/getting-started/models
#: (mistral-small-latest 128k = 131,072; kept at 32,768 as the conservative figure
#: of older small models); inference-docs.cerebras.ai/models (free tier 8,192 for
#: llama-3.3-70b); api-docs.deepseek.com/quick_start/pricing (deepseek-chat 128K).
_FAMILY_CONTEXT_WINDOWS: dict[str, int] = {
    "groq": 131_072,
    "mistral": 32_768,
    "cerebras": 8_192,
    "deepseek": 131_072,
}
#: The same by key name (``groq2`` shares ``groq``'s models).
DEFAULT_CONTEXT_WINDOWS: dict[str, int] = {
    name: _FAMILY_CONTEXT_WINDOWS[family(name)] for name in CASCADE_ORDER
}


@dataclass(frozen=True, slots=True)
class ProviderSpec:
    """One configured provider key.

    Attributes:
        name: key name (``groq``, ``groq2``, ``mistral``, ``cerebras``, ``deepseek``).
        kind: API family: ``groq``, ``mistral`` or ``openai`` (OpenAI-compatible over httpx).
        api_key: the key (kept only inside the client).
        base_url: API root as in Settings (Groq without ``/openai/v1``; Cerebras with ``/v1``).
        model: default model.
        cheap_model: the cheaper model of degraded mode.
        paid: paid tier.
        context_window_tokens: the default model's context window.
    """

    name: str
    kind: str
    api_key: str
    base_url: str
    model: str
    cheap_model: str
    paid: bool
    context_window_tokens: int

    def __repr__(self) -> str:  # never show the key
        return f"ProviderSpec(name={self.name!r}, kind={self.kind!r}, model={self.model!r})"


def provider_specs(
    *,
    keys: Mapping[str, str],
    base_urls: Mapping[str, str],
    models: Mapping[str, str],
    cheap_models: Mapping[str, str],
    tiers: Mapping[str, str],
    context_windows: Mapping[str, int] | None = None,
) -> list[ProviderSpec]:
    """Specs for every key present, in :data:`CASCADE_ORDER`.

    Base URL, model, cheap model and tier are looked up under the key name, then
    under its family's name (``groq2`` uses ``groq``'s); a key that is missing or
    empty leaves its provider out.

    Raises:
        ValueError: a present key with no base URL or model, or an unknown tier.
    """
    windows = {**DEFAULT_CONTEXT_WINDOWS, **(context_windows or {})}
    specs: list[ProviderSpec] = []
    for name in CASCADE_ORDER:
        key = keys.get(name)
        if not key:
            continue
        fam = family(name)

        def pick(table: Mapping[str, str], what: str, _n: str = name, _f: str = fam) -> str:
            value = table.get(_n) or table.get(_f)
            if not value:
                raise ValueError(f"provider {_n}: no {what}")
            return value

        tier = pick(tiers, "tier")
        if tier not in ("free", "paid"):
            raise ValueError(f"provider {name}: tier must be free or paid, not {tier!r}")
        model = pick(models, "model")
        specs.append(
            ProviderSpec(
                name=name,
                kind=KINDS[name],
                api_key=key,
                base_url=pick(base_urls, "base URL"),
                model=model,
                cheap_model=cheap_models.get(name) or cheap_models.get(fam) or model,
                paid=tier == "paid",
                context_window_tokens=windows[name],
            )
        )
    return specs


def build_provider(
    spec: ProviderSpec,
    *,
    timeout_s: float,
    clock: Clock | None = None,
    transport: httpx.AsyncBaseTransport | None = None,
    tls: ssl.SSLContext | None = None,
) -> Provider:
    """The client for one spec. A family's SDK is imported here, on first use, so a bot
    without a Groq or Mistral key never loads that SDK (seconds of start-up).

    Raises:
        ValueError: unknown ``spec.kind``.
    """
    cls: type[GroqProvider] | type[MistralProvider] | type[OpenAICompatProvider]
    if spec.kind == "groq":
        from llm.providers.groq import GroqProvider

        cls = GroqProvider
    elif spec.kind == "mistral":
        from llm.providers.mistral import MistralProvider

        cls = MistralProvider
    elif spec.kind == "openai":
        from llm.providers.openai_compat import OpenAICompatProvider

        cls = OpenAICompatProvider
    else:
        raise ValueError(f"unknown provider kind {spec.kind!r}")
    return cls(
        spec.name,
        api_key=spec.api_key,
        base_url=spec.base_url,
        model=spec.model,
        paid=spec.paid,
        context_window_tokens=spec.context_window_tokens,
        timeout_s=timeout_s,
        clock=clock,
        transport=transport,
        tls=tls,
    )


def build_cascade(
    specs: Sequence[ProviderSpec],
    *,
    ledger: LedgerPort,
    clock: Clock,
    config: CascadeConfig,
    token_counter: TokenCounter,
    on_event: EventSink | None = None,
    registry: CollectorRegistry | None = None,
    key_store: KeyStateStore | None = None,
    lease_store: CallClaimStore | None = None,
    share_store: ShareStore | None = None,
    tls: ssl.SSLContext | None = None,
) -> Cascade:
    """The cascade over ``specs`` (in the given order), with cheap models taken from
    the specs unless ``config.cheap_models`` names them, and absent keys listed for
    ``/providers``; ``key_store`` shares the keys' circuits and paced windows with the
    deployment's other processes (:mod:`llm.keys.admission`), ``lease_store`` its
    ``global_max_inflight_calls`` (:class:`llm.keys.slots.DeploymentSlots`),
    ``share_store`` FREE_SHARE_MAX's counts (:mod:`llm.keys.share_counts`).

    ``tls`` is the TLS context every provider's HTTPS client uses: one per process
    (``httpx.create_ssl_context()``), since each new default context loads the CA bundle
    again (~30 ms of CPU, ~8 clients per bot). ``None``: each client makes its own.

    Raises:
        ValueError: no specs (no provider key configured).
    """
    if not specs:
        raise ValueError("no provider key configured")
    providers = [build_provider(s, timeout_s=config.timeout_s, clock=clock, tls=tls) for s in specs]
    cheap = {s.name: s.cheap_model for s in specs} | dict(config.cheap_models)
    present = {s.name for s in specs}
    return Cascade(
        providers,
        ledger,
        clock,
        replace(config, cheap_models=cheap),
        token_counter,
        on_event=on_event,
        registry=registry,
        absent=[n for n in CASCADE_ORDER if n not in present],
        key_store=key_store,
        lease_store=lease_store,
        share_store=share_store,
    )
