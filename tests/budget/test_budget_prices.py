"""The price card: overrides, fail-closed, rounding, cached input, time-of-day."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

import pytest

from budget.errors import BudgetConfigError
from budget.pricing.prices import (
    DEFAULT_OVERRIDES,
    ModelRates,
    PriceCard,
    ProviderModel,
    parse_overrides,
)
from budget.types import Usage

NOON = datetime(2026, 5, 1, 12, tzinfo=UTC)
DEFAULT_MODELS = [
    ProviderModel("groq", "llama-3.3-70b-versatile", "free"),
    ProviderModel("groq2", "llama-3.3-70b-versatile", "free"),
    ProviderModel("mistral", "mistral-small-latest", "free"),
    ProviderModel("cerebras", "llama-3.3-70b", "free"),
    ProviderModel("deepseek", "deepseek-chat", "paid"),
]


def test_deepseek_cached_uncached_output_exact() -> None:
    """10,000 prompt tokens of which 8,000 cached + 200 output, at the shipped DeepSeek
    V3.2 rates: 2,000×0.28 + 8,000×0.028 + 200×0.42 = 560 + 224 + 84 = 868 µUSD."""
    card = PriceCard(DEFAULT_MODELS)
    usage = Usage(input_tokens=10_000, cached_input_tokens=8_000, output_tokens=200)
    assert card.actual_musd("deepseek", "deepseek-chat", usage, NOON) == 868
    assert (
        card.ceiling_musd("deepseek", "deepseek-chat", 10_000, 1024, NOON) == 3231
    )  # 2800+430.08↑


def test_reasoning_is_priced_as_output() -> None:
    """Reasoning tokens are part of output_tokens: counting them does not add cost."""
    rates = ModelRates(Decimal(1), Decimal(2))
    assert rates.actual_musd(Usage(10, 0, 5, reasoning_tokens=4)) == 20


def test_ceiling_rounds_up_actual_rounds_nearest() -> None:
    """0.5 µUSD → ceiling 1, actual 0 (half-even); 1.5 → actual 2."""
    rates = ModelRates(Decimal("0.5"), Decimal("0.5"))
    assert rates.ceiling_musd(1, 0) == 1
    assert rates.actual_musd(Usage(1)) == 0
    assert rates.actual_musd(Usage(3)) == 2


def test_free_tier_zero_with_list_equivalent() -> None:
    """Groq free tier: ceiling/actual 0, list price from genai-prices ($0.59/$0.79)."""
    card = PriceCard(DEFAULT_MODELS)
    assert card.ceiling_musd("groq", "llama-3.3-70b-versatile", 1000, 1000, NOON) == 0
    assert card.list_ceiling_musd("groq", "llama-3.3-70b-versatile", 1000, 1000, NOON) == 1380
    assert (
        card.list_actual_musd("groq2", "llama-3.3-70b-versatile", Usage(1000, 0, 1000), NOON)
        == 1380
    )
    assert card.is_free("groq") and not card.is_free("deepseek")


def test_paid_unknown_model_fails_closed_free_unknown_is_none() -> None:
    """A paid model without price is a start-up error; a free one has list price None."""
    with pytest.raises(BudgetConfigError, match="no price"):
        PriceCard([ProviderModel("deepseek", "no-such-model", "paid")])
    card = PriceCard([ProviderModel("groq", "no-such-model", "free")])
    assert card.list_ceiling_musd("groq", "no-such-model", 10, 10, NOON) is None
    assert card.ceiling_musd("groq", "no-such-model", 10, 10, NOON) == 0
    assert card.describe(NOON) == ["groq:no-such-model free: list price unknown"]


def test_settings_override_wins() -> None:
    """PRICE_OVERRIDES beats the shipped table and genai-prices."""
    over = parse_overrides(
        '{"deepseek:deepseek-chat": {"input": "0.27", "cached_input": "0.07", "output": "1.10"}}'
    )
    card = PriceCard(DEFAULT_MODELS, overrides=over)
    assert card.ceiling_musd("deepseek", "deepseek-chat", 1_000_000, 0, NOON) == 270_000
    assert any("PRICE_OVERRIDES" in line for line in card.describe(NOON))


@pytest.mark.parametrize(
    "raw",
    [
        "not json",
        '{"nocolon": {"input": "1", "output": "1"}}',
        '{"a:b": {"input": "1"}}',
        '{"a:b": {"input": "x", "output": "1"}}',
        '{"a:b": {"input": 0.1, "output": "1"}}',
        '{"a:b": {"input": "1", "output": "1", "typo": "1"}}',
        '{"a:b": {"input": "-1", "output": "1"}}',
    ],
)
def test_bad_overrides_are_config_errors(raw: str) -> None:
    """Malformed PRICE_OVERRIDES fail at start-up with BudgetConfigError."""
    with pytest.raises(BudgetConfigError):
        parse_overrides(raw)


def test_time_of_day_ceiling_takes_the_higher_price() -> None:
    """genai-prices' DeepSeek entry has an off-peak discount (16:30–00:30 UTC): an
    attempt starting 16:29:30 may run into it but is held at the standard price;
    one starting 20:00 is held at the discount; actual uses the start time's rate."""
    card = PriceCard(
        [ProviderModel("deepseek", "deepseek-chat", "paid")], use_default_overrides=False
    )
    before = datetime(2026, 5, 1, 16, 29, 30, tzinfo=UTC)
    night = datetime(2026, 5, 1, 20, tzinfo=UTC)
    assert card.ceiling_musd("deepseek", "deepseek-chat", 1_000_000, 0, before) == 270_000
    assert card.ceiling_musd("deepseek", "deepseek-chat", 1_000_000, 0, night) == 135_000
    dawn = datetime(2026, 5, 1, 0, 29, 30, tzinfo=UTC)  # discount ends inside the call
    assert card.ceiling_musd("deepseek", "deepseek-chat", 1_000_000, 0, dawn) == 270_000
    assert card.actual_musd("deepseek", "deepseek-chat", Usage(1_000_000), dawn) == 135_000


def test_max_tokens_within_budget() -> None:
    """The largest max_tokens whose ceiling fits; 0 when the input alone does not."""
    card = PriceCard(DEFAULT_MODELS)
    n = card.max_tokens_within("deepseek", "deepseek-chat", 1000, 1000, NOON)
    assert card.ceiling_musd("deepseek", "deepseek-chat", 1000, n, NOON) <= 1000
    assert card.ceiling_musd("deepseek", "deepseek-chat", 1000, n + 1, NOON) > 1000
    assert card.max_tokens_within("deepseek", "deepseek-chat", 10_000, 100, NOON) == 0


def test_describe_lists_every_model_with_source() -> None:
    """describe() gives one line per configured model, stating where prices come from."""
    lines = PriceCard(DEFAULT_MODELS).describe(NOON)
    assert len(lines) == len(DEFAULT_MODELS)
    assert any(
        line.startswith("deepseek:deepseek-chat paid") and "deepseek.com" in line for line in lines
    )
    assert "deepseek:deepseek-chat" in DEFAULT_OVERRIDES


def test_mixed_tier_for_one_provider_rejected() -> None:
    """One provider cannot be both free and paid."""
    with pytest.raises(BudgetConfigError):
        PriceCard([ProviderModel("groq", "a", "free"), ProviderModel("groq", "b", "paid")])
