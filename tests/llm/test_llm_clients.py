"""Each provider client against the loopback fake: answers, usage, and every failure
translated into the ``llm`` error tree."""

from __future__ import annotations

import time
from typing import Any

import pytest

from budget.types import Usage
from llm.errors import (
    AuthFailed,
    ContextTooLong,
    ProviderRateLimited,
    ProviderRejected,
    ProviderUnavailable,
    QuotaExhausted,
)
from llm.types import Message
from tests.llm.llm_helpers import KEYS, load_fixture
from tests.support.providers import FakeProviders

NAMES = ["groq", "mistral", "cerebras", "deepseek"]
PROMPT = (Message("system", "Be brief."), Message("user", "What is the capital of France?"))


def _target(name: str) -> str:
    return KEYS[name][2]


@pytest.mark.parametrize("name", NAMES)
async def test_answer_with_usage_and_cached_tokens(
    name: str, fake: FakeProviders, make_client: Any
) -> None:
    """A 200 becomes a Completion with the provider's usage, cached tokens included."""
    fake.script(
        _target(name),
        {"text": "Paris.", "prompt_tokens": 120, "completion_tokens": 3, "cached_tokens": 100},
    )
    client = make_client(name)
    done = await client.complete(PROMPT, max_tokens=64)
    assert done.text == "Paris."
    assert done.finish_reason == "stop"
    assert done.provider == name
    assert done.usage.input_tokens == 120
    assert done.usage.cached_input_tokens == 100
    assert done.usage.output_tokens == 3
    sent = fake.requests[-1]
    assert sent.key == _target(name)
    assert sent.body["max_tokens"] == 64
    assert sent.body["messages"][1] == {"role": "user", "content": PROMPT[1].content}


@pytest.mark.parametrize("name", ["groq", "mistral", "cerebras"])
async def test_rate_limit_headers_are_read(
    name: str, fake: FakeProviders, make_client: Any
) -> None:
    """Free providers' rate-limit headers reach Completion.rate_limits."""
    fake.set_bucket(_target(name), 12_000)
    done = await make_client(name).complete(PROMPT, max_tokens=32)
    assert done.rate_limits.remaining_tokens is not None
    assert 11_000 < done.rate_limits.remaining_tokens < 12_000
    assert done.rate_limits.limit_tokens == 12_000
    assert done.rate_limits.raw


@pytest.mark.parametrize("name", NAMES)
async def test_429_with_retry_after(name: str, fake: FakeProviders, make_client: Any) -> None:
    """429 with Retry-After → ProviderRateLimited carrying the seconds."""
    fake.script(_target(name), {"status": 429, "retry_after": "30"})
    with pytest.raises(ProviderRateLimited) as info:
        await make_client(name).complete(PROMPT, max_tokens=16)
    assert info.value.retry_after_s == 30.0
    assert info.value.provider == name
    assert info.value.status == 429


@pytest.mark.parametrize("name", NAMES)
async def test_429_without_retry_after(name: str, fake: FakeProviders, make_client: Any) -> None:
    """429 without Retry-After → ProviderRateLimited with retry_after_s None."""
    fake.script(_target(name), {"status": 429})
    with pytest.raises(ProviderRateLimited) as info:
        await make_client(name).complete(PROMPT, max_tokens=16)
    assert info.value.retry_after_s is None


async def test_429_naming_a_daily_limit_is_quota(fake: FakeProviders, make_client: Any) -> None:
    """A Groq 429 about requests per day (RPD) is QuotaExhausted, not a short rate limit."""
    body = {"error": {"message": "Rate limit reached on requests per day (RPD): Limit 14400"}}
    fake.script(_target("groq"), {"status": 429, "body": body, "retry_after": "3600"})
    with pytest.raises(QuotaExhausted) as info:
        await make_client("groq").complete(PROMPT, max_tokens=16)
    assert info.value.retry_after_s == 3600.0


async def test_402_insufficient_balance_is_quota(fake: FakeProviders, make_client: Any) -> None:
    """DeepSeek's 402 Insufficient Balance is QuotaExhausted."""
    body = {"error": {"message": "Insufficient Balance", "type": "unknown_error"}}
    fake.script(_target("deepseek"), {"status": 402, "body": body})
    with pytest.raises(QuotaExhausted):
        await make_client("deepseek").complete(PROMPT, max_tokens=16)


@pytest.mark.parametrize("status", [500, 503])
@pytest.mark.parametrize("name", NAMES)
async def test_5xx_is_unavailable_before_tokens(
    name: str, status: int, fake: FakeProviders, make_client: Any
) -> None:
    """500/503 → ProviderUnavailable, not interrupted (the hold may be released)."""
    fake.script(_target(name), {"status": status})
    with pytest.raises(ProviderUnavailable) as info:
        await make_client(name).complete(PROMPT, max_tokens=16)
    assert info.value.status == status
    assert info.value.interrupted is False


@pytest.mark.parametrize("name", NAMES)
async def test_total_deadline_cuts_a_trickle(
    name: str, fake: FakeProviders, make_client: Any
) -> None:
    """A body trickled for longer than the deadline is cut at the deadline (interrupted)."""
    fake.script(_target(name), {"trickle_s": 3.0})
    client = make_client(name, timeout_s=0.4)
    started = time.monotonic()
    with pytest.raises(ProviderUnavailable) as info:
        await client.complete(PROMPT, max_tokens=16)
    assert time.monotonic() - started < 2.0
    assert info.value.interrupted is True


@pytest.mark.parametrize("name", NAMES)
async def test_short_trickle_within_deadline_answers(
    name: str, fake: FakeProviders, make_client: Any
) -> None:
    """Blank keep-alive lines before the body (DeepSeek under load) are tolerated."""
    fake.script(_target(name), {"trickle_s": 0.15, "text": "late but fine"})
    done = await make_client(name, timeout_s=5.0).complete(PROMPT, max_tokens=16)
    assert done.text == "late but fine"


@pytest.mark.parametrize("name", NAMES)
async def test_401_is_auth_failed_without_the_key(
    name: str, fake: FakeProviders, make_client: Any
) -> None:
    """401 → AuthFailed; the key never appears in the error text."""
    fake.script(_target(name), {"status": 401})
    with pytest.raises(AuthFailed) as info:
        await make_client(name).complete(PROMPT, max_tokens=16)
    assert _target(name) not in str(info.value)
    assert _target(name) not in repr(info.value.args)


@pytest.mark.parametrize("name", NAMES)
async def test_403_is_auth_failed(name: str, fake: FakeProviders, make_client: Any) -> None:
    """403 (region-blocked key) → AuthFailed."""
    fake.script(_target(name), {"status": 403, "body": {"error": {"message": "Forbidden"}}})
    with pytest.raises(AuthFailed):
        await make_client(name).complete(PROMPT, max_tokens=16)


@pytest.mark.parametrize("name", NAMES)
async def test_garbage_200_is_unavailable(name: str, fake: FakeProviders, make_client: Any) -> None:
    """A 200 with an HTML body is a provider failure (interrupted: it may be billed)."""
    fake.script(_target(name), {"garbage": True})
    with pytest.raises(ProviderUnavailable) as info:
        await make_client(name).complete(PROMPT, max_tokens=16)
    assert info.value.interrupted is True


@pytest.mark.parametrize("name", NAMES)
async def test_json_200_without_choices_is_unavailable(
    name: str, fake: FakeProviders, make_client: Any
) -> None:
    """A JSON 200 that is not a completion is a provider failure too."""
    fake.script(_target(name), {"raw_body": {"object": "error", "message": "overloaded"}})
    with pytest.raises(ProviderUnavailable):
        await make_client(name).complete(PROMPT, max_tokens=16)


@pytest.mark.parametrize("name", NAMES)
async def test_stream_cut_is_unavailable_interrupted(
    name: str, fake: FakeProviders, make_client: Any
) -> None:
    """A body cut mid-way (Content-Length not reached) → ProviderUnavailable, interrupted."""
    fake.script(_target(name), {"cut": True})
    with pytest.raises(ProviderUnavailable) as info:
        await make_client(name).complete(PROMPT, max_tokens=16)
    assert info.value.interrupted is True


@pytest.mark.parametrize("name", NAMES)
async def test_400_is_rejected(name: str, fake: FakeProviders, make_client: Any) -> None:
    """400 → ProviderRejected (not ContextTooLong) with the provider's message."""
    fake.script(
        _target(name), {"status": 400, "body": load_fixture("groq_error_400_tool_use_failed.json")}
    )
    with pytest.raises(ProviderRejected) as info:
        await make_client(name).complete(PROMPT, max_tokens=16)
    assert not isinstance(info.value, ContextTooLong)
    assert "Tool call validation failed" in info.value.detail


@pytest.mark.parametrize("name", NAMES)
async def test_context_length_400_is_context_too_long(
    name: str, fake: FakeProviders, make_client: Any
) -> None:
    """A 400 about the context length → ContextTooLong."""
    body = {
        "error": {
            "message": "This model's maximum context length is 8192 tokens.",
            "code": "context_length_exceeded",
        }
    }
    fake.script(_target(name), {"status": 400, "body": body})
    with pytest.raises(ContextTooLong):
        await make_client(name).complete(PROMPT, max_tokens=16)


@pytest.mark.parametrize(
    ("name", "api_key", "model", "paid"),
    [("deepseek", "sk-x", "deepseek-chat", True), ("groq", "gsk-x", "llama-3.1-8b-instant", False)],
)
async def test_connection_refused_is_unavailable_not_interrupted(
    name: str, api_key: str, model: str, paid: bool
) -> None:
    """Nothing listening → ProviderUnavailable before any token (hold can be released),
    for the OpenAI-compatible keys and Groq's plain call (both over aiohttp)."""
    from llm.providers.groq import GroqProvider
    from llm.providers.openai_compat import OpenAICompatProvider

    kind = GroqProvider if name == "groq" else OpenAICompatProvider
    client = kind(
        name,
        api_key=api_key,
        base_url="http://127.0.0.1:9",
        model=model,
        paid=paid,
        context_window_tokens=1000,
        timeout_s=2.0,
    )
    try:
        with pytest.raises(ProviderUnavailable) as info:
            await client.complete(PROMPT, max_tokens=16)
        assert info.value.interrupted is False
    finally:
        await client.aclose()


RECORDED = [
    ("groq", "groq_chat_completion_200.json", Usage(48, 0, 8, 0)),
    ("groq", "groq_chat_completion_gpt-oss_reasoning_200.json", Usage(84, 0, 41, 31)),
    ("mistral", "mistral_chat_completion_200.json", Usage(28, 0, 6, 0)),
    ("mistral", "mistral_chat_completion_num_cached_tokens_200.json", Usage(10, 9, 224, 0)),
    ("mistral", "mistral_chat_completion_prompt_tokens_details_200.json", Usage(28, 0, 2, 0)),
    ("cerebras", "cerebras_chat_completion_time_info_200.json", Usage(43, 0, 9, 0)),
    ("cerebras", "cerebras_chat_completion_gpt-oss_200.json", Usage(80, 0, 45, 34)),
    ("deepseek", "deepseek_chat_completion_cache_hit_200.json", Usage(976, 896, 61, 25)),
    ("deepseek", "deepseek_chat_completion_reasoner_200.json", Usage(12, 0, 789, 415)),
]


@pytest.mark.parametrize(("name", "fixture", "expected"), RECORDED)
async def test_recorded_bodies_normalise(
    name: str, fixture: str, expected: Usage, fake: FakeProviders, make_client: Any
) -> None:
    """Real recorded bodies (pydantic-ai cassettes) give the right normalised usage."""
    body = load_fixture(fixture)
    fake.script(_target(name), {"raw_body": body})
    done = await make_client(name).complete(PROMPT, max_tokens=1024)
    assert done.text == body["choices"][0]["message"]["content"]
    assert done.model == body["model"]
    got = done.usage
    assert (got.input_tokens, got.cached_input_tokens, got.output_tokens, got.reasoning_tokens) == (
        expected.input_tokens,
        expected.cached_input_tokens,
        expected.output_tokens,
        expected.reasoning_tokens,
    )


async def test_groq_second_key_is_its_own_client(fake: FakeProviders, make_client: Any) -> None:
    """groq and groq2 share the endpoint but send their own keys (scripts per key)."""
    fake.script(_target("groq"), {"status": 429})
    with pytest.raises(ProviderRateLimited):
        await make_client("groq").complete(PROMPT, max_tokens=8)
    done = await make_client("groq2").complete(PROMPT, max_tokens=8)
    assert done.provider == "groq2"
    assert [r.key for r in fake.requests] == [_target("groq"), _target("groq2")]


def test_a_cut_after_connecting_is_interrupted() -> None:
    """A plain call (aiohttp) that broke after connecting may have reached the provider:
    interrupted (its hold is not released: the call may have been billed)."""
    import aiohttp

    from llm.providers.plain_post import aiohttp_transport_error

    assert aiohttp_transport_error("groq", aiohttp.ServerDisconnectedError()).interrupted
    assert aiohttp_transport_error("groq", TimeoutError()).interrupted


def test_the_plain_call_takes_the_proxy_the_environment_names(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """HTTPS_PROXY (else ALL_PROXY, as httpx reads it) applies to the plain call's URL
    unless NO_PROXY exempts its host (ALL_PROXY used to be ignored)."""
    from llm.providers.plain_post import env_proxy

    for scheme in ("HTTPS", "HTTP", "ALL", "NO"):
        monkeypatch.delenv(f"{scheme}_PROXY", raising=False)
        monkeypatch.delenv(f"{scheme.lower()}_proxy", raising=False)
    assert env_proxy("https://api.groq.com/openai/v1/chat/completions") is None
    monkeypatch.setenv("ALL_PROXY", "http://all.example:8080")  # as httpx: the fallback
    assert env_proxy("https://api.groq.com/openai/v1/chat/completions") == (
        "http://all.example:8080"
    )
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.example:3128")
    assert env_proxy("https://api.groq.com/openai/v1/chat/completions") == (
        "http://proxy.example:3128"
    )
    monkeypatch.setenv("NO_PROXY", "api.groq.com")
    assert env_proxy("https://api.groq.com/openai/v1/chat/completions") is None
    assert env_proxy("https://api.deepseek.com/chat/completions") == "http://proxy.example:3128"
