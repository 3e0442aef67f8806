"""Money display, settings validation and secret redaction."""

from __future__ import annotations

import logging
from decimal import Decimal
from typing import Any

import pytest
from pydantic import ValidationError

from bot.ops.logs import RedactSecrets
from bot.settings import Settings
from budget.__main__ import BooksSettings
from budget.policy.money import (
    musd_to_usd,
    parse_usd,
    round_musd,
    usd,
    usd_to_exact_musd,
    usd_to_musd,
)


def test_usd_display_is_exact() -> None:
    """µUSD are shown as dollars without float rounding; None is a dash."""
    assert usd(1) == "$0.000001"
    assert usd(868) == "$0.000868"
    assert usd(1_234_567) == "$1.234567"
    assert usd(1_234_567, places=2) == "$1.23"
    assert usd(None) == "—"


@pytest.mark.parametrize(
    ("text", "musd"),
    [
        ("0.05", 50_000),
        ("$1", 1_000_000),
        ("0.0000005", None),
        ("abc", None),
        ("1_000", None),
        ("1e3", None),
        ("0.000001", 1),
        ("-1", None),
        ("nan", None),
    ],
)
def test_parse_usd(text: str, musd: int | None) -> None:
    """Admin amounts parse to integer µUSD; junk and negatives are refused."""
    assert parse_usd(text) == musd


def test_usd_to_musd_half_even() -> None:
    """Settings' decimal dollars become integer µUSD."""
    assert usd_to_musd(Decimal("0.05")) == 50_000
    assert usd_to_musd(None) is None


def test_musd_to_usd_is_exact() -> None:
    """µUSD → decimal USD without rounding (the chart's figures), negatives too."""
    assert musd_to_usd(1) == Decimal("0.000001")
    assert musd_to_usd(1_234_567) == Decimal("1.234567")
    assert musd_to_usd(-700) == Decimal("-0.0007")


def test_exact_musd_and_its_rounding() -> None:
    """A provider's USD keeps fractions of a µUSD until rounded half-even once."""
    assert usd_to_exact_musd(Decimal("0.0000015")) == Decimal("1.5")
    assert usd_to_exact_musd(Decimal("12.345678")) == Decimal(12_345_678)
    assert [round_musd(Decimal(x)) for x in ("1.5", "2.5", "2.5000001", "-0.5")] == [2, 2, 3, 0]


@pytest.mark.parametrize(
    ("written", "musd"),
    [("0.01", 10_000), ("0", 0), ("0.0000005", 0), ("0.0000015", 2), ("0.0000025", 2)],
)
def test_books_tolerance_is_the_bots_conversion(written: str, musd: int) -> None:
    """python -m budget reads RECONCILE_TOLERANCE_USD with the money helper, as the bot
    does: half-even to whole µUSD."""
    books = BooksSettings(_env_file=None, reconcile_tolerance_usd=Decimal(written))
    assert books.tolerance_musd == musd == (usd_to_musd(Decimal(written)) or 0)


def _settings(**kw: Any) -> Settings:
    return Settings(_env_file=None, **kw)


def test_settings_parse_admin_ids_and_ignore_empty_keys() -> None:
    """ADMIN_IDS is a comma list; an empty key leaves its provider out."""
    s = _settings(bot_token="1:x", groq_api_key="k", mistral_api_key="", admin_ids="1, 2")
    assert s.admin_ids == frozenset({1, 2})
    assert list(s.provider_keys()) == ["groq"]


@pytest.mark.parametrize(
    "kw",
    [
        {"bot_token": "1:x"},  # no provider key
        {"bot_token": "1:x", "groq_api_key": "k", "budget_tz": "Mars/Olympus"},
        {"bot_token": "1:x", "groq_api_key": "k", "admin_ids": "one,two"},
        {"bot_token": "1:x", "groq_api_key": "k", "hold_ttl_seconds": 10},
    ],
)
def test_settings_fail_fast(kw: dict[str, object]) -> None:
    """Unusable configuration is refused at start."""
    with pytest.raises(ValidationError):
        _settings(**kw)


def test_secret_never_reaches_a_log_line() -> None:
    """The filter removes the whole token, its secret half, and keys, incl. tracebacks."""
    token = "123456:ABCDEFsecretpart"
    record = logging.LogRecord(
        "x", logging.ERROR, __file__, 1, "url /bot%s/getMe key=%s", (token, "gsk_abcdef"), None
    )
    try:
        raise RuntimeError("ABCDEFsecretpart leaked")
    except RuntimeError:
        import sys

        record.exc_info = sys.exc_info()
    RedactSecrets([token, "gsk_abcdef"]).filter(record)
    text = record.getMessage()
    assert "ABCDEFsecretpart" not in text and "gsk_abcdef" not in text
    assert "***" in text
