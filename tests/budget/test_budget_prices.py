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


def test_a_speech_model_is_described_per_hour_of_audio_as_its_page_says() -> None:
    """A speech model's "tokens" are audio seconds: the start-up line states its page's
    figure per hour of audio, not a per-1M-tokens rate of 28 digits."""
    card = PriceCard(
        [
            ProviderModel("groq", "whisper-large-v3-turbo", "free"),
            ProviderModel("mistral", "voxtral-mini-latest", "free"),
        ]
    )
    groq, mistral = card.describe(NOON)
    assert groq.startswith("groq:whisper-large-v3-turbo free: $0.04 per hour of audio (")
    assert mistral.startswith("mistral:voxtral-mini-latest free: $0.18 per hour of audio (")
    assert "1M tokens" not in groq + mistral


def test_mixed_tier_for_one_provider_rejected() -> None:
    """One provider cannot be both free and paid."""
    with pytest.raises(BudgetConfigError):
        PriceCard([ProviderModel("groq", "a", "free"), ProviderModel("groq", "b", "paid")])


# -- long-context price tiers -------------------------------------------------------------

#: genai-prices' card of OpenAI gpt-5.4 (a tiered model: every rate doubles, or × 1.5
#: for output, once the prompt is above 272,000 tokens), USD per 1M tokens.
TIERED = ProviderModel("openai", "gpt-5.4", "paid")


def test_the_snapshot_really_tiers_the_test_model() -> None:
    """The figures below are genai-prices' own: base 2.5 / 0.25 / 15, above 272,000 input
    tokens 5 / 0.5 / 22.5 (if the snapshot changes, this says so first)."""
    card = PriceCard([TIERED])
    assert card.rates("openai", "gpt-5.4", NOON) == ModelRates(
        Decimal("2.5"), Decimal("15"), Decimal("0.25"), source="genai-prices snapshot"
    )
    assert card.rates("openai", "gpt-5.4", NOON, input_tokens=272_001) == ModelRates(
        Decimal("5"), Decimal("22.5"), Decimal("0.5"), source="genai-prices snapshot"
    )


def test_a_prompt_above_the_threshold_is_priced_at_the_upper_rate_exactly() -> None:
    """Hold and settle price the tier the prompt falls in (every token of the call, as
    the provider bills a prompt past the threshold): 300,000 input + 1,000 max_tokens →
    ceiling 300,000×5 + 1,000×22.5 = 1,522,500 µUSD; 300,000 input of which 100,000
    cached + 2,000 output → 200,000×5 + 100,000×0.5 + 2,000×22.5 = 1,095,000 µUSD. Before,
    the actual was the base rate (555,000: about half the bill) and every ceiling, even
    of a short prompt, the upper rate."""
    card = PriceCard([TIERED])
    assert card.ceiling_musd("openai", "gpt-5.4", 300_000, 1_000, NOON) == 1_522_500
    usage = Usage(input_tokens=300_000, cached_input_tokens=100_000, output_tokens=2_000)
    assert card.actual_musd("openai", "gpt-5.4", usage, NOON) == 1_095_000
    # a short prompt, and one exactly at the threshold, are priced at the base rate
    assert card.ceiling_musd("openai", "gpt-5.4", 1_000, 1_000, NOON) == 17_500
    assert card.ceiling_musd("openai", "gpt-5.4", 272_000, 1, NOON) == 680_015
    small = Usage(input_tokens=1_000, output_tokens=100)
    assert card.actual_musd("openai", "gpt-5.4", small, NOON) == 4_000
    # ceilings round up: 272,001 × 5 + 1 × 22.5 = 1,360,027.5 → 1,360,028
    assert card.ceiling_musd("openai", "gpt-5.4", 272_001, 1, NOON) == 1_360_028
    # the degradation ladder's max_tokens fits the upper rate too
    assert card.max_tokens_within("openai", "gpt-5.4", 300_000, 1_522_500, NOON) == 1_000


def test_price_overrides_take_tiers() -> None:
    """``PRICE_OVERRIDES`` may list tiers (``above_input_tokens`` and that tier's rates):
    a gateway's tiered model is priced like genai-prices' own."""
    overrides = parse_overrides(
        '{"deepseek:gateway-pro": {"input": "1", "output": "2", "cached_input": "0.1",'
        ' "tiers": [{"above_input_tokens": 1000, "input": "3", "output": "4"},'
        ' {"above_input_tokens": 5000, "input": "5", "output": "6", "cached_input": "0.5"}]}}'
    )
    card = PriceCard([ProviderModel("deepseek", "gateway-pro", "paid")], overrides=overrides)
    assert card.ceiling_musd("deepseek", "gateway-pro", 1_000, 10, NOON) == 1_020
    assert card.ceiling_musd("deepseek", "gateway-pro", 1_001, 10, NOON) == 3_043
    assert card.ceiling_musd("deepseek", "gateway-pro", 6_000, 10, NOON) == 30_060
    cached = Usage(input_tokens=2_000, cached_input_tokens=1_000, output_tokens=10)
    assert card.actual_musd("deepseek", "gateway-pro", cached, NOON) == 3_000 + 3_000 + 40
    assert any("above 1000 input tokens" in line for line in card.describe(NOON))


@pytest.mark.parametrize(
    "tiers",
    [
        '[{"input": "3", "output": "4"}]',
        '[{"above_input_tokens": -1, "input": "3", "output": "4"}]',
        '[{"above_input_tokens": 10, "input": "3"}]',
        '[{"above_input_tokens": 10, "input": "3", "output": "4", "x": 1}]',
        '[{"above_input_tokens": 10, "input": "3", "output": "4"},'
        ' {"above_input_tokens": 10, "input": "5", "output": "6"}]',
        '{"above_input_tokens": 10}',
    ],
)
def test_bad_tiers_are_config_errors(tiers: str) -> None:
    """A tier needs a whole ``above_input_tokens`` ≥ 0, ``input`` and ``output``, no other
    field, and tiers rise strictly."""
    raw = f'{{"deepseek:x": {{"input": "1", "output": "2", "tiers": {tiers}}}}}'
    with pytest.raises(BudgetConfigError):
        parse_overrides(raw)
