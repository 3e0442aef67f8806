"""The provider key names live in one registry,
:mod:`budget.pricing.names`; everything that needs them derives from it, and a registry entry
without its settings fails here rather than falling back in silence."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import pytest

from bot.settings import Settings
from budget.__main__ import BooksSettings
from budget.pricing.names import CASCADE_ORDER, FAMILIES, KEYS, KINDS, family, key_field
from budget.pricing.prices import PriceCard, ProviderModel, parse_overrides
from llm.cascade.factory import DEFAULT_CONTEXT_WINDOWS, provider_specs
from llm.model_caps import max_output_tokens

REPO = Path(__file__).resolve().parents[2]
FAMILY_FIELDS = ("base_url", "model", "cheap_model", "tier", "billing_tz")


def test_every_key_and_family_has_its_settings_in_both_settings_classes() -> None:
    """The bot's Settings has each key's field and each family's five fields;
    ``python -m budget`` has each family's tier and billing zone with the same defaults."""
    bot_fields = Settings.model_fields
    books_fields = BooksSettings.model_fields
    for key in KEYS:
        assert key.key_field in bot_fields, key
    for fam in FAMILIES:
        for suffix in FAMILY_FIELDS:
            assert f"{fam}_{suffix}" in bot_fields, (fam, suffix)
        for suffix in ("tier", "billing_tz"):
            name = f"{fam}_{suffix}"
            assert books_fields[name].default == bot_fields[name].default, name


def test_the_registry_is_consistent() -> None:
    """Names are unique, families are key names, every key has a kind and a default
    context window."""
    assert len(set(CASCADE_ORDER)) == len(CASCADE_ORDER) == len(KEYS)
    assert set(FAMILIES) <= set(CASCADE_ORDER)
    assert set(KINDS) == set(DEFAULT_CONTEXT_WINDOWS) == set(CASCADE_ORDER)
    assert family("groq2") == "groq" and family("deepseek") == "deepseek"
    assert family("nosuch") == "nosuch"
    assert key_field("groq2") == "groq_api_key_2"
    with pytest.raises(KeyError):
        key_field("nosuch")


def test_a_second_key_shares_its_familys_settings_everywhere() -> None:
    """groq2 bills in GROQ_BILLING_TZ (bot and books), has Groq's tier, output limits,
    context window and PRICE_OVERRIDES; a name that is no key bills in UTC and is paid."""
    bot = Settings(
        _env_file=None,
        bot_token="123:abc",
        groq_api_key_2="gsk-x",
        groq_billing_tz="America/Los_Angeles",
        groq_tier="paid",
    )
    books = BooksSettings(_env_file=None, groq_billing_tz="America/Los_Angeles", groq_tier="paid")
    for key in CASCADE_ORDER:
        fam = family(key)
        assert bot.billing_tz(key) == getattr(bot, f"{fam}_billing_tz")
        assert books.billing_tz(key) == getattr(books, f"{fam}_billing_tz")
        assert books.tier(key) == getattr(books, f"{fam}_tier")
        assert DEFAULT_CONTEXT_WINDOWS[key] == DEFAULT_CONTEXT_WINDOWS[fam]
    assert bot.billing_tz("groq2") == books.billing_tz("groq2") == "America/Los_Angeles"
    assert (bot.billing_tz("nosuch"), books.billing_tz("nosuch"), books.tier("nosuch")) == (
        "UTC",
        "UTC",
        "paid",
    )
    assert max_output_tokens("groq2", "llama-3.3-70b-versatile") == max_output_tokens(
        "groq", "llama-3.3-70b-versatile"
    )
    [spec] = provider_specs(
        keys={"groq2": "gsk-x"},
        base_urls={"groq": "http://127.0.0.1:9"},
        models={"groq": "llama-3.3-70b-versatile"},
        cheap_models={},
        tiers={"groq": "paid"},
    )
    assert (spec.name, spec.kind, spec.paid) == ("groq2", "groq", True)
    card = PriceCard(
        [ProviderModel("groq2", "m-x", "paid")],
        overrides=parse_overrides({"groq:m-x": {"input": "1", "output": "2"}}),
    )
    rates = card.rates("groq2", "m-x", datetime(2026, 12, 1, tzinfo=UTC))
    assert rates is not None and rates.input == Decimal(1)


def test_no_other_module_spells_a_second_key_name() -> None:
    """Only the registry writes the key name ``"groq2"`` as a string in the code."""
    hits = [
        path.relative_to(REPO)
        for pkg in ("bot", "llm", "budget", "scheduler")
        for path in (REPO / pkg).rglob("*.py")
        if '"groq2"' in path.read_text(encoding="utf-8")
    ]
    assert hits == [Path("budget/pricing/names.py")]
