"""Rates of one model (USD per 1M tokens, exact ``Decimal``), its long-context tiers,
the shipped overrides and the parsing of ``PRICE_OVERRIDES``; the price card
(:mod:`budget.pricing.prices`) is built on them.

``PRICE_OVERRIDES`` is JSON ``{"provider:model": {"input": "0.27", "cached_input":
"0.07", "output": "1.10"}}``, USD per 1M tokens as strings; an entry may list
long-context ``tiers`` (``[{"above_input_tokens": 200000, "input": "2.5", "output":
"15"}]``): every token of a call whose prompt is above the threshold at that tier's
rates.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from decimal import ROUND_HALF_EVEN, Decimal, InvalidOperation
from typing import Any

from budget.errors import BudgetConfigError
from budget.types import Usage

__all__ = [
    "DEFAULT_OVERRIDES",
    "SPEECH_MODELS_PER_SECOND",
    "ModelRates",
    "PromptTier",
    "parse_overrides",
]


@dataclass(frozen=True, slots=True)
class PromptTier:
    """A long-context price tier: ``rates`` apply to *every* token of a call whose prompt
    (input tokens, cached ones included) is above ``above_input_tokens`` — the "cliff"
    genai-prices models (``TieredPrices``: crossing a tier re-prices all tokens)."""

    above_input_tokens: int
    rates: ModelRates


@dataclass(frozen=True, slots=True)
class ModelRates:
    """Rates of one model, USD per 1M tokens.

    Attributes:
        input: uncached prompt tokens.
        cached_input: prompt tokens served from cache (``None`` = same as input).
        output: generated tokens, reasoning included.
        source: where the figures come from (for the start-up log line).
        tiers: long-context tiers, rising (``PRICE_OVERRIDES`` ``tiers``); the rates
            above are the base tier's. :meth:`ceiling_musd` and :meth:`actual_musd` price
            at these rates as they are: :meth:`for_prompt` picks the tier of a prompt
            first (the card does it for every call).
    """

    input: Decimal
    output: Decimal
    cached_input: Decimal | None = None
    source: str = ""
    tiers: tuple[PromptTier, ...] = ()

    @property
    def cached(self) -> Decimal:
        """The cached-input rate (falls back to the input rate)."""
        return self.input if self.cached_input is None else self.cached_input

    def for_prompt(self, input_tokens: int) -> ModelRates:
        """The flat rates of a call with ``input_tokens`` prompt tokens: the highest tier
        whose threshold the prompt is above, else the base rates."""
        chosen = ModelRates(self.input, self.output, self.cached_input, self.source)
        for tier in self.tiers:
            if input_tokens > tier.above_input_tokens:
                chosen = tier.rates
        return chosen

    def ceiling_musd(self, input_tokens: int, max_tokens: int) -> int:
        """Upper bound in µUSD, rounded up: every input token uncached, all of max_tokens."""
        exact = Decimal(input_tokens) * self.input + Decimal(max_tokens) * self.output
        return math.ceil(exact)

    def actual_musd(self, usage: Usage) -> int:
        """Cost of ``usage`` in µUSD, rounded to nearest (half-even)."""
        cached = min(max(usage.cached_input_tokens, 0), max(usage.input_tokens, 0))
        uncached = max(usage.input_tokens, 0) - cached
        exact = (
            Decimal(uncached) * self.input
            + Decimal(cached) * self.cached
            + Decimal(max(usage.output_tokens, 0)) * self.output
        )
        return int(exact.quantize(Decimal(1), rounding=ROUND_HALF_EVEN))

    def describe_per_hour_of_audio(self) -> str:
        """A speech model's rate as its provider's page states it, ``"$0.04 per hour of
        audio (…)"``: its "input tokens" are audio seconds (:data:`SPEECH_MODELS_PER_SECOND`)."""
        hourly = (self.input * 3600 / 1_000_000).quantize(Decimal("0.000001")).normalize()
        return f"${hourly:f} per hour of audio" + (f" ({self.source})" if self.source else "")

    def describe(self) -> str:
        """``"in $0.28 / cached $0.028 / out $0.42 per 1M tokens"`` (and each tier's,
        ``"; above 200000 input tokens: in $2.5 / …"``)."""
        text = f"in ${self.input} / cached ${self.cached} / out ${self.output} per 1M tokens"
        for tier in self.tiers:
            r = tier.rates
            text += (
                f"; above {tier.above_input_tokens} input tokens: in ${r.input} / cached "
                f"${r.cached} / out ${r.output}"
            )
        return text + (f" ({self.source})" if self.source else "")


_DEEPSEEK_SRC = (
    "api-docs.deepseek.com/quick_start/pricing: DeepSeek-V3.2, from 2025-09-29; "
    "night discount cancelled 2025-09-05"
)

_GROQ_STT_SRC = (
    "console.groq.com/docs/speech-to-text: $0.04 per hour of audio, 10 s billed at least; "
    "per audio second"
)
_MISTRAL_STT_SRC = (
    "mistral.ai/news/voxtral-transcribe-2: $0.003 per minute ($0.18 per hour); per audio second"
)

#: Shipped overrides, ``"provider:model"`` → rates (USD per 1M tokens), where the
#: genai-prices snapshot is behind the provider's page. genai-prices 0.2.3 still
#: carries DeepSeek's V3 prices with the 16:30–00:30 UTC discount; DeepSeek's page
#: lists one flat V3.2 price for both endpoints.
DEFAULT_OVERRIDES: dict[str, ModelRates] = {
    "deepseek:deepseek-chat": ModelRates(
        Decimal("0.28"), Decimal("0.42"), Decimal("0.028"), source=_DEEPSEEK_SRC
    ),
    "deepseek:deepseek-reasoner": ModelRates(
        Decimal("0.28"), Decimal("0.42"), Decimal("0.028"), source=_DEEPSEEK_SRC
    ),
    # speech models, priced per second of audio: for these a "token" is one second
    # (docs/decisions/083-a-transcription-is-held-in-audio-seconds.md), so the input
    # rate is USD per 1M seconds = USD per hour × 1e6 / 3600 and the output rate 0
    "groq:whisper-large-v3-turbo": ModelRates(
        Decimal("0.04") * 1_000_000 / 3600, Decimal(0), source=_GROQ_STT_SRC
    ),
    "mistral:voxtral-mini-latest": ModelRates(
        Decimal("0.18") * 1_000_000 / 3600, Decimal(0), source=_MISTRAL_STT_SRC
    ),
}

#: The speech models priced per second above (their "tokens" are audio seconds).
SPEECH_MODELS_PER_SECOND = frozenset({"groq:whisper-large-v3-turbo", "mistral:voxtral-mini-latest"})


def _dec(value: object, where: str) -> Decimal:
    if isinstance(value, float):
        raise BudgetConfigError(f"{where}: write prices as strings, not floats")
    try:
        out = Decimal(str(value))
    except InvalidOperation as exc:
        raise BudgetConfigError(f"{where}: {value!r} is not a decimal number") from exc
    if not out.is_finite() or out < 0:
        raise BudgetConfigError(f"{where}: price must be a finite number >= 0")
    return out


_RATE_FIELDS = frozenset({"input", "cached_input", "output"})


def _rates_of(spec: Mapping[str, Any], where: str, fields: frozenset[str]) -> ModelRates:
    """One entry's (or one tier's) rates.

    Raises:
        BudgetConfigError: an unknown field, no ``input``/``output``, a non-decimal value.
    """
    unknown = set(spec) - fields
    if unknown:
        raise BudgetConfigError(f"{where}: unknown fields {sorted(unknown)}")
    if "input" not in spec or "output" not in spec:
        raise BudgetConfigError(f"{where} needs 'input' and 'output'")
    cached = spec.get("cached_input")
    return ModelRates(
        input=_dec(spec["input"], f"{where}.input"),
        output=_dec(spec["output"], f"{where}.output"),
        cached_input=None if cached is None else _dec(cached, f"{where}.cached_input"),
        source="PRICE_OVERRIDES",
    )


def _tiers_of(raw: object, where: str) -> tuple[PromptTier, ...]:
    """An entry's ``tiers``: a list of ``{"above_input_tokens": N, "input": …, "output":
    …[, "cached_input": …]}``, thresholds whole, ≥ 0 and rising strictly.

    Raises:
        BudgetConfigError: anything else.
    """
    if not isinstance(raw, list):
        raise BudgetConfigError(f"{where} must be a list of tiers")
    tiers: list[PromptTier] = []
    for i, spec in enumerate(raw):
        at = f"{where}[{i}]"
        if not isinstance(spec, Mapping):
            raise BudgetConfigError(f"{at} must be an object")
        start = spec.get("above_input_tokens")
        if isinstance(start, bool) or not isinstance(start, int) or start < 0:
            raise BudgetConfigError(f"{at}.above_input_tokens must be a whole number >= 0")
        if tiers and start <= tiers[-1].above_input_tokens:
            raise BudgetConfigError(f"{at}: tiers must rise (above_input_tokens increasing)")
        rates = _rates_of(spec, at, _RATE_FIELDS | {"above_input_tokens"})
        tiers.append(PromptTier(start, rates))
    return tuple(tiers)


def parse_overrides(raw: str | Mapping[str, Mapping[str, Any]]) -> dict[str, ModelRates]:
    """Parse ``PRICE_OVERRIDES``.

    Args:
        raw: JSON text (``""`` = none) or an already-decoded mapping
            ``{"provider:model": {"input": "0.27", "cached_input": "0.07", "output": "1.10"}}``;
            USD per 1M tokens; ``cached_input`` optional; optional ``"tiers": [{
            "above_input_tokens": 200000, "input": "2.5", "output": "15"}]`` for a
            long-context tier (a tier without ``cached_input`` bills cached tokens at
            its ``input``).

    Raises:
        BudgetConfigError: malformed JSON, a key without ``:``, a missing
            ``input``/``output``, an unknown field, a non-decimal value, or tiers that
            do not rise.
    """
    if isinstance(raw, str):
        if not raw.strip():
            return {}
        try:
            decoded = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise BudgetConfigError(f"PRICE_OVERRIDES is not JSON: {exc}") from exc
    else:
        decoded = raw
    if not isinstance(decoded, Mapping):
        raise BudgetConfigError("PRICE_OVERRIDES must be a JSON object")
    out: dict[str, ModelRates] = {}
    for key, spec in decoded.items():
        if not isinstance(key, str) or ":" not in key:
            raise BudgetConfigError(f"PRICE_OVERRIDES key {key!r} must be 'provider:model'")
        if not isinstance(spec, Mapping):
            raise BudgetConfigError(f"PRICE_OVERRIDES[{key!r}] must be an object")
        where = f"PRICE_OVERRIDES[{key!r}]"
        rates = _rates_of(spec, where, _RATE_FIELDS | {"tiers"})
        if "tiers" in spec:
            rates = replace(rates, tiers=_tiers_of(spec["tiers"], f"{where}.tiers"))
        out[key.lower()] = rates
    return out
