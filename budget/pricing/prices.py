"""The price card: what a call may cost (ceiling) and what it did cost (actual).

Units: prices are USD per 1,000,000 tokens, kept as exact ``Decimal`` (never
float); money out is integer µUSD. Conveniently, µUSD = tokens × (USD per 1M
tokens), so no scaling is involved. Rounding: a *ceiling* is rounded **up** (it
must stay an upper bound); an *actual* cost is rounded to the **nearest** µUSD
(half-even).

Sources, in order of precedence:

1. ``overrides`` passed by the composition root (settings ``PRICE_OVERRIDES``,
   JSON ``{"provider:model": {"input": "0.27", "cached_input": "0.07",
   "output": "1.10"}}``, USD per 1M tokens as strings);
2. :data:`DEFAULT_OVERRIDES`, shipped where genai-prices is behind the provider's own
   price page (each row states its source; :mod:`budget.pricing.rates`, which also holds
   :class:`ModelRates` and the parsing of ``PRICE_OVERRIDES``, re-exported here);
3. the offline data snapshot bundled with ``genai-prices`` (looked up with an
   explicit ``provider_id``; its network updater is never started).

Input, cached-input and output tokens are priced at their own rates; reasoning
tokens are part of ``output_tokens`` (see :class:`budget.types.Usage`) and so are
priced at the output rate. When the price changes during the day (genai-prices'
time-of-day constraints, e.g. DeepSeek's former off-peak discount), the ceiling
uses the highest rate that can apply between the call's start and
``max_call_seconds`` later; the actual uses the rate at the call's start.

Long-context tiers (genai-prices' ``TieredPrices``, ``PRICE_OVERRIDES`` ``tiers``): a
higher rate for every token of a call whose prompt is above a threshold. The ceiling is
priced at the tier of the input it holds (so the provable bound's ceiling at the
bound's tier: never below what the provider can bill), the actual at the tier of the
reported input (cached tokens included, as genai-prices counts it).

Free and paid: a provider configured free-tier has ceiling and actual 0 µUSD, but the
list-price equivalent is still computed for reports (``None`` when unknown). A
paid provider with no known price is a :class:`~budget.errors.BudgetConfigError`
at construction: fail closed, never priced at 0.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any, Literal

from budget.errors import BudgetConfigError
from budget.pricing.names import family
from budget.pricing.rates import (
    DEFAULT_OVERRIDES,
    SPEECH_MODELS_PER_SECOND,
    ModelRates,
    PromptTier,
    parse_overrides,
)
from budget.types import Usage

__all__ = [
    "DEFAULT_OVERRIDES",
    "ModelRates",
    "PriceCard",
    "PromptTier",
    "ProviderModel",
    "parse_overrides",
]

Tier = Literal["free", "paid"]


@dataclass(frozen=True, slots=True)
class ProviderModel:
    """One configured (provider, model) pair and its tier."""

    provider: str
    model: str
    tier: Tier


def _rate(value: object, input_tokens: int) -> Decimal | None:
    """A genai-prices price value (Decimal or TieredPrices) as the one Decimal rate of a
    call with ``input_tokens`` prompt tokens: a tier applies above its ``start`` and then
    to every token (genai-prices' ``calc_unit_price``: ``total_input_tokens >
    tier.start``)."""
    if value is None:
        return None
    if isinstance(value, Decimal):
        return value
    base = getattr(value, "base", None)
    tiers = getattr(value, "tiers", None)
    if isinstance(base, Decimal) and isinstance(tiers, list):
        rate = base
        for tier in tiers:  # sorted ascending; crossing a tier re-prices all tokens
            if input_tokens > tier.start:
                rate = Decimal(tier.price)
        return rate
    return None


class _GenaiModel:
    """A genai-prices model entry, read through its public attributes."""

    __slots__ = ("_info", "label")

    def __init__(self, info: Any, label: str) -> None:
        self._info = info
        self.label = label

    def _prices_at(self, at: datetime) -> Any:
        return self._info.get_prices(at)

    def _boundaries(self, start: datetime, end: datetime) -> list[datetime]:
        """Instants in ``[start, end]`` where a time-of-day constraint flips."""
        points = [start, end]
        prices = self._info.prices
        if isinstance(prices, list):
            for cp in prices:
                c = cp.constraint
                if c is None or not hasattr(c, "start_time"):
                    continue
                for t in (c.start_time, c.end_time):
                    day = start.date()
                    for offset in (0, 1, 2):
                        tt = t if t.tzinfo is not None else t.replace(tzinfo=UTC)
                        cand = datetime.combine(day + timedelta(days=offset), tt).astimezone(UTC)
                        if start <= cand <= end:
                            points.append(cand)
        return points

    def rates(self, at: datetime, *, until: datetime | None, input_tokens: int = 0) -> ModelRates:
        """Rates at ``at`` of a call with ``input_tokens`` prompt tokens (the tier it
        falls in); with ``until``, the highest of each rate over [at, until]."""
        instants = [at] if until is None else self._boundaries(at, until)
        best: dict[str, Decimal] = {}
        for instant in instants:
            mp = self._prices_at(instant)
            for ours, theirs in (
                ("input", "input_mtok"),
                ("cached", "cache_read_mtok"),
                ("output", "output_mtok"),
            ):
                r = _rate(getattr(mp, theirs, None), input_tokens)
                if r is not None and (ours not in best or r > best[ours]):
                    best[ours] = r
        if "input" not in best or "output" not in best:
            raise LookupError(f"{self.label}: genai-prices has no token prices")
        return ModelRates(
            input=best["input"],
            output=best["output"],
            cached_input=best.get("cached"),
            source="genai-prices snapshot",
        )


class PriceCard:
    """Prices per provider/model for the ledger (implements ``PriceCardPort``).

    Args:
        models: every (provider, model, tier) the bot will call.
        overrides: parsed ``PRICE_OVERRIDES`` (see :func:`parse_overrides`); win
            over :data:`DEFAULT_OVERRIDES` and genai-prices.
        max_call_seconds: longest possible attempt (PROVIDER_TIMEOUT_SECONDS); the
            ceiling takes the highest rate that can apply within it.
        use_default_overrides: ``False`` to price from genai-prices only (tests).

    Raises:
        BudgetConfigError: a paid model with no known price.

    A lookup for a (provider, model) not given at construction is resolved on
    first use, with the same fail-closed rule (raises ``BudgetConfigError``).
    """

    __slots__ = ("_max_call", "_models", "_overrides", "_snapshot", "_tiers", "version")

    def __init__(
        self,
        models: Iterable[ProviderModel],
        *,
        overrides: Mapping[str, ModelRates] | None = None,
        max_call_seconds: float = 60.0,
        use_default_overrides: bool = True,
    ) -> None:
        merged: dict[str, ModelRates] = dict(DEFAULT_OVERRIDES) if use_default_overrides else {}
        merged.update({k.lower(): v for k, v in (overrides or {}).items()})
        self._overrides = merged
        self._max_call = timedelta(seconds=max_call_seconds)
        self._tiers: dict[str, Tier] = {}
        self._models: dict[tuple[str, str], ModelRates | _GenaiModel | None] = {}
        self._snapshot: Any = None
        for pm in models:
            prev = self._tiers.get(pm.provider)
            if prev is not None and prev != pm.tier:
                raise BudgetConfigError(f"provider {pm.provider!r} configured both free and paid")
            self._tiers[pm.provider] = pm.tier
            self._resolve(pm.provider, pm.model)
        self.version = self._version()

    # -- lookup ---------------------------------------------------------------
    def _genai(self, provider: str, model: str) -> _GenaiModel | None:
        if self._snapshot is None:
            from genai_prices import data_snapshot  # offline bundled data, no updater

            self._snapshot = data_snapshot.get_snapshot()
        provider_id = family(provider)  # families are genai-prices provider ids
        try:
            _, info = self._snapshot.find_provider_model(model, None, provider_id, None)
        except LookupError:
            return None
        return _GenaiModel(info, f"{provider}:{model}")

    def _resolve(self, provider: str, model: str) -> ModelRates | _GenaiModel | None:
        key = (provider, model)
        if key in self._models:
            return self._models[key]
        found: ModelRates | _GenaiModel | None = self._overrides.get(f"{provider}:{model}".lower())
        if found is None and family(provider) != provider:  # groq2 priced as groq
            found = self._overrides.get(f"{family(provider)}:{model}".lower())
        if found is None:
            found = self._genai(provider, model)
            if found is not None:
                try:  # entries without token prices count as unknown
                    found.rates(datetime(2026, 1, 1, tzinfo=UTC), until=None)
                except LookupError:
                    found = None
        if found is None and not self.is_free(provider):
            raise BudgetConfigError(
                f"no price for paid model {provider}:{model}: set PRICE_OVERRIDES "
                f'{{"{provider}:{model}": {{"input": "...", "output": "..."}}}} (USD per 1M tokens)'
            )
        self._models[key] = found
        return found

    def _version(self) -> str:
        try:
            from importlib.metadata import version

            lib = version("genai-prices")
        except Exception:  # noqa: BLE001 - metadata missing only in odd installs
            lib = "unknown"
        digest = sorted(
            f"{k}={v.input}/{v.cached}/{v.output}"
            + "".join(
                f";>{t.above_input_tokens}={t.rates.input}/{t.rates.cached}/{t.rates.output}"
                for t in v.tiers
            )
            for k, v in self._overrides.items()
        )
        sha = hashlib.sha256("\n".join(digest).encode()).hexdigest()[:10]
        return f"genai-prices {lib}; overrides {len(digest)}:{sha}"

    def rates(
        self,
        provider: str,
        model: str,
        at: datetime,
        *,
        for_ceiling: bool = False,
        input_tokens: int = 0,
    ) -> ModelRates | None:
        """List rates of ``provider:model`` at ``at`` (highest over the call when
        ``for_ceiling``) for a call of ``input_tokens`` prompt tokens: the long-context
        tier that prompt falls in (0: the base tier, as for a day's summed usage, whose
        calls' tiers are unknown); ``None`` when unknown (free tier only).

        Raises:
            BudgetConfigError: a paid model with no known price.
        """
        found = self._resolve(provider, model)
        if found is None:
            return None
        if isinstance(found, ModelRates):
            return found.for_prompt(input_tokens)
        until = at + self._max_call if for_ceiling else None
        return found.rates(at, until=until, input_tokens=input_tokens)

    # -- PriceCardPort ----------------------------------------------------------
    def is_free(self, provider: str) -> bool:
        """True when ``provider`` is configured free tier (unknown providers are paid)."""
        return self._tiers.get(provider) == "free"

    def list_ceiling_musd(
        self, provider: str, model: str, input_tokens: int, max_tokens: int, at: datetime
    ) -> int | None:
        """The ceiling at list price (µUSD, rounded up), ``None`` if no list price."""
        rates = self.rates(provider, model, at, for_ceiling=True, input_tokens=input_tokens)
        return None if rates is None else rates.ceiling_musd(input_tokens, max_tokens)

    def ceiling_musd(
        self, provider: str, model: str, input_tokens: int, max_tokens: int, at: datetime
    ) -> int:
        """Money to hold (µUSD, rounded up); 0 for a free-tier provider.

        Raises:
            BudgetConfigError: a paid model with no known price.
        """
        if self.is_free(provider):
            return 0
        listed = self.list_ceiling_musd(provider, model, input_tokens, max_tokens, at)
        assert listed is not None  # _resolve raised for a paid model without price
        return listed

    def list_actual_musd(self, provider: str, model: str, usage: Usage, at: datetime) -> int | None:
        """Cost of ``usage`` at list price (µUSD, nearest), ``None`` if no list price."""
        rates = self.rates(provider, model, at, input_tokens=usage.input_tokens)
        return None if rates is None else rates.actual_musd(usage)

    def actual_musd(self, provider: str, model: str, usage: Usage, at: datetime) -> int:
        """Money charged for ``usage`` (µUSD, nearest); 0 for a free-tier provider."""
        if self.is_free(provider):
            return 0
        listed = self.list_actual_musd(provider, model, usage, at)
        assert listed is not None
        return listed

    def max_tokens_within(
        self, provider: str, model: str, input_tokens: int, budget_musd: int, at: datetime
    ) -> int:
        """Largest ``max_tokens`` whose ceiling is ≤ ``budget_musd`` (0 if the input alone
        does not fit). For a free-tier provider any size fits: returns a large number
        (2**31 − 1)."""
        if self.is_free(provider):
            return 2**31 - 1
        rates = self.rates(provider, model, at, for_ceiling=True, input_tokens=input_tokens)
        assert rates is not None
        left = Decimal(budget_musd) - Decimal(input_tokens) * rates.input
        if left < 0:
            return 0
        if rates.output == 0:
            return 2**31 - 1
        n = int(left / rates.output)
        while n > 0 and rates.ceiling_musd(input_tokens, n) > budget_musd:
            n -= 1
        return n

    def configured(self) -> list[tuple[str, str]]:
        """Every (provider key, model) the card knows: those given at construction and
        those resolved since, sorted."""
        return sorted(self._models)

    def describe(self, at: datetime) -> list[str]:
        """One start-up log line per configured model, rates as they apply at ``at``
        (the highest over the following day for time-of-day prices), e.g.
        ``"deepseek:deepseek-chat paid: in $0.28 / cached $0.028 / out $0.42 per 1M tokens (…)"``.
        """
        lines: list[str] = []
        for (provider, model), found in sorted(self._models.items()):
            tier = "free" if self.is_free(provider) else "paid"
            if found is None:
                lines.append(f"{provider}:{model} {tier}: list price unknown")
            elif (
                isinstance(found, ModelRates)
                and f"{family(provider)}:{model}" in SPEECH_MODELS_PER_SECOND  # groq2 as groq
            ):
                lines.append(f"{provider}:{model} {tier}: {found.describe_per_hour_of_audio()}")
            elif isinstance(found, ModelRates):
                lines.append(f"{provider}:{model} {tier}: {found.describe()}")
            else:
                rates = found.rates(at, until=at + timedelta(days=1))
                lines.append(f"{provider}:{model} {tier}: {rates.describe()}")
        return lines

    def __repr__(self) -> str:
        return f"PriceCard(models={len(self._models)}, version={self.version!r})"
