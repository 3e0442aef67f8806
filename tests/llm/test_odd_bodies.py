"""Provider bodies that lie in new shapes: 200 bodies whose error is a string or a
``detail``, usage counts in non-ASCII digits, JSON that Python's decoder refuses with
something other than ``JSONDecodeError`` (an integer over 4,300 digits, deep nesting)."""

from __future__ import annotations

import pytest

from llm.errors import (
    BalanceExhausted,
    ProviderRateLimited,
    ProviderRejected,
    ProviderUnavailable,
)
from llm.providers.base import (
    UsageReading,
    decode_json,
    error_for_status,
    parse_completion_body,
    read_usage,
)
from llm.types import RateLimitInfo


def _parse(body: object) -> None:
    parse_completion_body("deepseek", "deepseek-chat", body, RateLimitInfo(), paid=True)


@pytest.mark.parametrize(
    "body",
    [{"error": "Insufficient Balance"}, {"error": "You exceeded your current quota"}],
)
def test_string_error_about_balance_is_a_balance_failure(body: object) -> None:
    with pytest.raises(BalanceExhausted) as info:
        _parse(body)
    assert info.value.billed_usage is None


@pytest.mark.parametrize(
    "body", [{"error": "Rate limit exceeded"}, {"detail": "Rate limit reached for requests"}]
)
def test_string_error_or_detail_about_rate_limits_is_rate_limited(body: object) -> None:
    with pytest.raises(ProviderRateLimited):
        _parse(body)


def test_string_error_otherwise_is_unavailable_and_released() -> None:
    with pytest.raises(ProviderUnavailable) as info:
        _parse({"error": "upstream overloaded"})
    assert info.value.interrupted is False
    assert info.value.billed_usage is None


@pytest.mark.parametrize("digits", ["²", "⑤", "¹²"])
def test_usage_in_non_ascii_digit_characters_is_invalid_not_a_crash(digits: str) -> None:
    usage = {"prompt_tokens": digits, "completion_tokens": 3}
    assert read_usage({"usage": usage}) == UsageReading(None, "invalid")
    details = {"prompt_tokens": 4, "completion_tokens": 3, "prompt_tokens_details": {}}
    details["prompt_tokens_details"] = {"cached_tokens": digits}
    assert read_usage({"usage": details}) == UsageReading(None, "invalid")


@pytest.mark.parametrize(
    "raw",
    [
        b'{"choices": [], "usage": {"prompt_tokens": ' + b"9" * 5000 + b"}}",
        b"[" * 100_000 + b"]" * 100_000,
    ],
)
def test_json_the_decoder_refuses_otherwise_is_an_interrupted_failure(raw: bytes) -> None:
    with pytest.raises(ProviderUnavailable) as info:
        decode_json("deepseek", raw)
    assert info.value.interrupted is True  # possibly billed: settled at the ceiling


@pytest.mark.parametrize(
    "body",
    [
        {"error": {"message": "Insufficient credits. Add more using the dashboard"}},
        {"error": {"code": "billing_hard_limit_reached", "message": "Billing hard limit"}},
        {"error": "You are out of credits"},
    ],
)
def test_other_balance_wordings_in_a_200_are_balance_failures(body: object) -> None:
    with pytest.raises(BalanceExhausted):
        _parse(body)


def test_an_error_body_nested_too_deep_is_translated_not_a_crash() -> None:
    exc = error_for_status("deepseek", 400, "[" * 100_000 + "]" * 100_000, RateLimitInfo())
    assert isinstance(exc, ProviderRejected)
