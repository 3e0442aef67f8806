"""The models a chat may choose with ``/model``: exactly those the cascade can serve
(each configured key's default and cheap model), narrowed by CHAT_MODELS, with their
list prices (docs/decisions/161-model-choice-per-chat.md).

Prices come from the ledger's price card (:class:`budget.pricing.prices.PriceCard`, USD
per 1M tokens); a model is *free* when a free-tier key serves it (the cascade tries
free keys first and holds 0 µUSD there), else *paid*.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass
from datetime import datetime
from decimal import ROUND_CEILING, Decimal

from budget.pricing.prices import PriceCard, ProviderModel

__all__ = ["ModelMenu", "ModelOffer"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ModelOffer:
    """One model users may choose.

    Attributes:
        model: the model id, as the providers name it.
        providers: the configured keys that serve it, in cascade order.
        free: a free-tier key serves it.
    """

    model: str
    providers: tuple[str, ...]
    free: bool


class ModelMenu:
    """The choosable models.

    Args:
        served: every (key, model, tier) the cascade may call
            (``bot.app.wiring.provider_models``), in cascade order.
        prices: the price card.
        allowed: CHAT_MODELS (empty: every served model); ids the cascade does not
            serve are left out, with a warning in the log.
        clock_now: the wall clock, for time-dependent prices.
    """

    def __init__(
        self,
        served: Iterable[ProviderModel],
        prices: PriceCard,
        allowed: Collection[str],
        clock_now: Callable[[], datetime],
    ) -> None:
        by_model: dict[str, list[ProviderModel]] = {}
        for pm in served:
            by_model.setdefault(pm.model, []).append(pm)
        unknown = sorted(m for m in allowed if m not in by_model)
        if unknown:
            log.warning("CHAT_MODELS names models no configured key serves: %s", unknown)
        self._all = tuple(
            ModelOffer(
                model=m,
                providers=tuple(pm.provider for pm in by_model[m]),
                free=any(pm.tier == "free" for pm in by_model[m]),
            )
            for m in by_model
        )
        self._offers = tuple(o for o in self._all if not allowed or o.model in allowed)
        self._served = frozenset(by_model)
        self._prices = prices
        self._now = clock_now

    def __repr__(self) -> str:
        return f"ModelMenu({[o.model for o in self._offers]})"

    @property
    def offers(self) -> tuple[ModelOffer, ...]:
        """The models users may choose, in cascade order."""
        return self._offers

    def find(self, model: str | None) -> ModelOffer | None:
        """The offer named ``model`` (exact id, else ignoring case), or ``None``."""
        if not model:
            return None
        exact = next((o for o in self._offers if o.model == model), None)
        if exact is not None:
            return exact
        folded = model.casefold()
        return next((o for o in self._offers if o.model.casefold() == folded), None)

    def served(self, model: str) -> bool:
        """A configured key serves ``model`` (offered or not)."""
        return model in self._served or model.casefold() in {m.casefold() for m in self._served}

    def per_1k_usd(self, offer: ModelOffer) -> tuple[Decimal, Decimal] | None:
        """(input, output) list price of 1,000 tokens in USD, at the first key serving
        ``offer``; ``None`` when unknown (a free model genai-prices does not list)."""
        rates = self._prices.rates(offer.providers[0], offer.model, self._now())
        if rates is None:
            return None
        return rates.input / 1000, rates.output / 1000

    def paid_input_musd(self, tokens: int) -> tuple[str, int] | None:
        """What ``tokens`` input tokens cost at the dearest paid model's input rate (any
        the cascade may fall back to, offered or not): (model, µUSD rounded up);
        ``None`` when every model is free."""
        worst: tuple[str, int] | None = None
        for offer in self._all:
            if offer.free:
                continue
            rates = self._prices.rates(offer.providers[0], offer.model, self._now())
            if rates is None:
                continue
            musd = int((Decimal(tokens) * rates.input).to_integral_value(ROUND_CEILING))
            if worst is None or musd > worst[1]:
                worst = (offer.model, musd)
        return worst
