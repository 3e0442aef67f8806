"""The providers' ``httpx`` paths (the Mistral SDK's one-piece answer, every stream, every
error body the SDKs read) read at most their cap (``llm/providers/body_cap.py``): a
longer body, or one in a content coding not offered, fails the call as an interrupted
transport failure that names the cap, and the client still works afterwards; the streams
over aiohttp (Groq, Cerebras, DeepSeek) keep the same caps and refuse a coded body too."""

from __future__ import annotations

from typing import Any

import pytest

from llm.errors import ProviderUnavailable
from llm.providers import body_cap
from llm.stream import ChunkStream
from llm.types import Message
from tests.support.providers import FakeProviders

PROMPT = [Message("user", "hello")]
OVER = body_cap.MAX_RESPONSE_BYTES + 3_000_000


async def _drain(stream: ChunkStream) -> str:
    try:
        return "".join([text async for text in stream])
    finally:
        await stream.aclose()


@pytest.mark.parametrize("status", [200, 503])
async def test_a_mistral_answer_or_error_body_over_the_cap_fails_interrupted(
    fake: FakeProviders, make_client: Any, status: int
) -> None:
    client = make_client("mistral")
    fake.script("mistral", {"status": status, "huge_body": OVER}, {"text": "fine"})
    with pytest.raises(ProviderUnavailable) as caught:
        await client.complete(PROMPT, 50)
    assert caught.value.interrupted  # the provider may have billed: the ceiling is booked
    assert caught.value.detail == f"response body over {body_cap.MAX_RESPONSE_BYTES} bytes"
    assert (await client.complete(PROMPT, 50)).text == "fine"


@pytest.mark.parametrize("name", ["mistral", "groq", "cerebras"])
async def test_a_streamed_requests_error_body_over_the_cap_fails_interrupted(
    fake: FakeProviders, make_client: Any, name: str
) -> None:
    client = make_client(name)
    target = "cerebras" if name == "cerebras" else name
    fake.script(target, {"status": 429, "huge_body": OVER}, {"text": "fine"})
    with pytest.raises(ProviderUnavailable) as caught:
        await client.stream(PROMPT, 50)
    assert caught.value.interrupted
    assert "over 8388608 bytes" in caught.value.detail
    assert await _drain(await client.stream(PROMPT, 50)) == "fine"


@pytest.mark.parametrize("name", ["mistral", "groq", "cerebras"])
async def test_a_stream_over_its_total_cap_is_a_cut(
    fake: FakeProviders, make_client: Any, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each event is small (under the bound on one event); together they pass the
    stream's cap (lowered here to 4 KiB)."""
    monkeypatch.setattr(body_cap, "MAX_STREAM_BYTES", 4096)
    client = make_client(name)
    fake.script(name, {"chunks": ["word "] * 200})
    stream = await client.stream(PROMPT, 500)
    with pytest.raises(ProviderUnavailable) as caught:
        await _drain(stream)
    assert caught.value.interrupted
    assert caught.value.detail == "response body over 4096 bytes"


async def test_a_content_coded_body_is_refused(fake: FakeProviders, make_client: Any) -> None:
    """The clients offer identity only: httpx would inflate a whole compressed chunk
    before any count."""
    client = make_client("mistral")
    fake.script("mistral", {"gzip": True}, {"text": "fine"})
    with pytest.raises(ProviderUnavailable) as caught:
        await client.complete(PROMPT, 50)
    assert caught.value.interrupted
    assert caught.value.detail == "content coding 'gzip' not offered"
    assert (await client.complete(PROMPT, 50)).text == "fine"


@pytest.mark.parametrize("name", ["groq", "cerebras"])
async def test_a_content_coded_stream_is_refused(
    fake: FakeProviders, make_client: Any, name: str
) -> None:
    """The streams over aiohttp ask for identity too: aiohttp would inflate a whole
    compressed piece before the stream's count."""
    client = make_client(name)
    fake.script(name, {"gzip": True}, {"text": "fine"})
    with pytest.raises(ProviderUnavailable) as caught:
        await client.stream(PROMPT, 50)
    assert caught.value.interrupted
    assert caught.value.detail == "content coding 'gzip' not offered"
    assert await _drain(await client.stream(PROMPT, 50)) == "fine"
    assert fake.requests[0].body.get("stream") is True
