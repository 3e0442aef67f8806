"""Streamed completions: each provider's real chunk shapes (recorded streams and the
fake's), the first-token and idle timeouts, and the cascade's settlement of a
stopped or cut stream on the tokens received."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from decimal import Decimal
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from budget.pricing.tokens import TokenCounter
from budget.types import Origin
from llm.cascade.cascade import Cascade, CascadeConfig
from llm.cascade.factory import build_cascade
from llm.cascade.received import OutputWatch
from llm.errors import AllProvidersFailed, ProviderRateLimited
from llm.stream import StreamControl, StreamingProvider, pump
from llm.types import LLMRequest, Message
from tests.llm.llm_helpers import FIXTURES, KEYS, count_tokens, spec, tls
from tests.support.clocks import ManualClock
from tests.support.harness import wait_provider_requests
from tests.support.ledger import FakeLedger, FakePrices
from tests.support.providers import FakeProviders

STREAMS = FIXTURES / "streams"
PROMPT = (Message("user", "tell me a long story"),)
LONG_TEXT = "".join(f"word{i} " for i in range(200))


def recorded(name: str) -> str:
    """A recorded SSE body from ``tests/fixtures/llm/streams``."""
    return (STREAMS / f"{name}.sse").read_text(encoding="utf-8")


async def read_all(provider: Any, **timeouts: float) -> Any:
    """Open a stream and pump it to its end."""
    assert isinstance(provider, StreamingProvider)
    opened = await provider.stream(list(PROMPT), 500)
    loop = asyncio.get_running_loop()
    return await pump(
        opened,
        StreamControl(),
        first_token_s=timeouts.get("first", 5.0),
        idle_s=timeouts.get("idle", 5.0),
        deadline=loop.time() + 10,
    )


@pytest.mark.parametrize("name", ["groq", "mistral", "cerebras", "deepseek"])
async def test_each_provider_streams_text_and_usage(
    name: str, fake: FakeProviders, make_client: Any
) -> None:
    """Every client reads its provider's chunk shape: all the text, the usage wherever
    that provider puts it (x_groq.usage, the finish chunk, a choices-less last chunk)."""
    fake.script(KEYS[name][2], {"text": "Hello there, streaming world!", "prompt_tokens": 21})
    result = await read_all(make_client(name))
    assert result.ended == "complete"
    assert result.text == "Hello there, streaming world!"
    assert result.finish_reason == "stop"
    assert result.usage is not None and result.usage.input_tokens == 21
    assert result.usage.output_tokens == fake.streams[-1].chunks_sent  # 4-char pieces
    body = fake.requests[-1].body
    assert body["stream"] is True
    if name in ("cerebras", "deepseek"):
        assert body["stream_options"] == {"include_usage": True}


@pytest.mark.parametrize(
    ("name", "fixture", "text_start", "usage"),
    [
        ("groq", "groq_gpt-oss-120b_tool_call", "", (304, 49, 23)),
        ("mistral", "mistral_magistral_thinking_content_list", "", (10, 232, 0)),
        ("deepseek", "deepseek_reasoner_include_usage", "", (6, 212, 198)),
        ("cerebras", "openai_gpt-4o-mini_text_include_usage", "", (78, 9, 0)),
    ],
)
async def test_recorded_streams(
    name: str,
    fixture: str,
    text_start: str,
    usage: tuple[int, int, int],
    fake: FakeProviders,
    make_client: Any,
) -> None:
    """Recorded real streams: usage found where each provider put it; reasoning and
    thinking parts are not shown as text."""
    fake.script(KEYS[name][2], {"raw_sse": recorded(fixture)})
    result = await read_all(make_client(name))
    assert result.ended == "complete"
    assert result.usage is not None
    got = (result.usage.input_tokens, result.usage.output_tokens, result.usage.reasoning_tokens)
    assert got == usage
    assert "thinking" not in result.text
    if name == "mistral":
        assert result.text.strip()  # the answer's text parts, without the thinking blocks


async def test_groq_error_event_is_a_cut(fake: FakeProviders, make_client: Any) -> None:
    """Groq's ``event: error`` after the 200 (recorded): a cut, no usage."""
    fake.script(KEYS["groq"][2], {"raw_sse": recorded("groq_gpt-oss-120b_midstream_error_event")})
    result = await read_all(make_client("groq"))
    assert result.ended == "cut"
    assert result.error is not None and result.error.interrupted
    assert result.usage is None
    assert result.chunks > 90  # the reasoning chunks before the error


async def test_idle_gap_and_first_token_timeouts(fake: FakeProviders, make_client: Any) -> None:
    """No chunk within the idle gap → cut; no first chunk in time → cut, nothing received."""
    client = make_client("cerebras")
    fake.script("csk-key", {"text": LONG_TEXT, "gap_after": 3, "gap_s": 5})
    gap = await read_all(client, idle=0.2)
    assert gap.ended == "cut" and gap.error is not None and "no chunk" in gap.error.detail
    assert gap.text == LONG_TEXT[:12]
    fake.script("csk-key", {"text": LONG_TEXT, "first_token_s": 5})
    late = await read_all(client, first=0.2)
    assert late.ended == "cut" and late.chunks == 0
    assert late.error is not None and "first token" in late.error.detail
    await asyncio.sleep(0.05)
    assert all(s.closed_at is not None for s in fake.streams)  # both connections closed


async def test_a_refused_stream_is_translated(fake: FakeProviders, make_client: Any) -> None:
    """A 429 before the stream began is the same error as without streaming."""
    fake.script("mistral-key", {"status": 429, "retry_after": "7"})
    with pytest.raises(ProviderRateLimited):
        await read_all(make_client("mistral"))


# ------------------------------------------------------------------ the cascade


@pytest.fixture
async def cascades(
    fake: FakeProviders, prices: FakePrices, clock: ManualClock
) -> AsyncIterator[Any]:
    """``build(names, **config) -> (cascade, ledger)``."""
    made: list[Cascade] = []

    def build(names: tuple[str, ...], **config: Any) -> tuple[Cascade, FakeLedger]:
        ledger = FakeLedger(prices, clock)
        cascade = build_cascade(
            [spec(n, fake) for n in names],
            ledger=ledger,
            clock=clock,
            config=CascadeConfig(timeout_s=10.0, **config),
            token_counter=count_tokens,
            registry=CollectorRegistry(),
            tls=tls(),
        )
        made.append(cascade)
        return cascade, ledger

    yield build
    for c in made:
        await c.aclose()


async def complete(cascade: Cascade, ledger: FakeLedger, control: StreamControl) -> Any:
    """One streamed request in its own operation."""
    op = await ledger.begin_operation(1, Origin.CHAT)
    try:
        return await cascade.complete(op, LLMRequest(PROMPT, max_tokens=1000), stream=control)
    finally:
        await ledger.end_operation(op)


async def test_stop_after_the_fifth_chunk(cascades: Any, fake: FakeProviders) -> None:
    """Stop after 5 chunks: the connection is closed within 1 s, the partial text comes
    back marked stopped, settled on the tokens received (estimated), far below the
    ceiling; the next provider is not asked."""
    cascade, ledger = cascades(("deepseek",))
    fake.script("sk-deepseek", {"text": LONG_TEXT, "interval_s": 0.03, "no_usage": True})
    stopped_at: list[float] = []
    loop = asyncio.get_running_loop()
    seen: list[str] = []

    def on_text(text: str) -> None:
        seen.append(text)
        if len(seen) == 5 and control.stop("user"):
            stopped_at.append(loop.time())

    control = StreamControl(on_text)
    done = await complete(cascade, ledger, control)
    assert done.stopped == "user" and done.text == seen[4] == LONG_TEXT[:20]
    assert done.estimated
    await asyncio.sleep(0.05)
    log = fake.streams[-1]
    assert log.closed_at is not None and log.closed_at - stopped_at[0] < 1.0
    assert not log.finished
    hold = ledger.holds_for("deepseek")[0]
    assert hold.state == "settled" and hold.estimated
    assert hold.usage is not None
    received = count_tokens([Message("assistant", done.text)])
    assert hold.usage.output_tokens == received
    assert hold.usage.input_tokens == hold.input_tokens
    assert hold.actual_musd < hold.ticket.ceiling_musd // 4
    assert len(fake.requests) == 1


async def test_cut_after_text_shown_finishes_without_another_provider(
    cascades: Any, fake: FakeProviders
) -> None:
    """A cut after text was shown: that text, flagged, settled estimated at what was
    received; the next provider is never asked (no double charge)."""
    cascade, ledger = cascades(("groq", "deepseek"))
    fake.script("gsk-key-1", {"text": LONG_TEXT, "cut_after": 6})
    control = StreamControl()
    control.on_text = lambda _text: setattr(control, "shown", True)
    done = await complete(cascade, ledger, control)
    assert done.stream_cut and done.text == LONG_TEXT[:24] and done.provider == "groq"
    assert len(fake.requests) == 1
    hold = ledger.holds_for("groq")[0]
    assert hold.state == "settled" and hold.estimated


async def test_cut_before_text_falls_through(cascades: Any, fake: FakeProviders) -> None:
    """A cut before any text was shown: the next provider answers; the first attempt
    is released (nothing arrived)."""
    cascade, ledger = cascades(("groq", "deepseek"), first_token_timeout_s=0.2)
    fake.script("gsk-key-1", {"text": LONG_TEXT, "first_token_s": 5})
    done = await complete(cascade, ledger, StreamControl())
    assert done.provider == "deepseek" and not done.stream_cut
    assert [h.state for h in ledger.holds_for("groq")] == ["released"]
    assert ledger.holds_for("deepseek")[0].state == "settled"


async def test_all_cut_before_text_is_all_failed(cascades: Any, fake: FakeProviders) -> None:
    """Every provider cut before text: the usual AllProvidersFailed; what arrived is
    settled estimated."""
    cascade, ledger = cascades(("groq",))
    fake.script("gsk-key-1", {"text": LONG_TEXT, "cut_after": 2})
    with pytest.raises(AllProvidersFailed):
        await complete(cascade, ledger, StreamControl())
    hold = ledger.holds_for("groq")[0]
    assert hold.state == "settled" and hold.estimated


async def test_a_cancelled_stream_settles_what_it_received(
    cascades: Any, fake: FakeProviders
) -> None:
    """The caller cancelled mid-stream (the bot torn down without a stop): the hold is
    settled estimated at the input held + the output received as counted — as a stop
    would be — not at the ceiling; the connection is closed."""
    cascade, ledger = cascades(("deepseek",))
    fake.script("sk-deepseek", {"text": LONG_TEXT, "interval_s": 0.03, "no_usage": True})
    sixth = asyncio.Event()
    control = StreamControl(lambda _text: sixth.set() if control.chunks >= 6 else None)
    task = asyncio.ensure_future(complete(cascade, ledger, control))
    await sixth.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    text = control.text
    assert len(text) >= 16
    hold = ledger.holds_for("deepseek")[0]
    assert hold.state == "settled" and hold.estimated and hold.usage is not None
    assert hold.usage.output_tokens == count_tokens([Message("assistant", text)])
    assert hold.usage.input_tokens == hold.input_tokens
    assert hold.actual_musd < hold.ticket.ceiling_musd // 4
    await asyncio.sleep(0.05)
    assert fake.streams[-1].closed_at is not None and not fake.streams[-1].finished


async def test_a_cancelled_stream_before_its_200_settles_the_input(
    cascades: Any, fake: FakeProviders
) -> None:
    """Cancelled while the request waits for its 200: the provider may have read the
    prompt, so the input held is booked (estimated), no output."""
    cascade, ledger = cascades(("deepseek",))
    fake.script("sk-deepseek", {"text": LONG_TEXT, "delay_s": 5})
    task = asyncio.ensure_future(complete(cascade, ledger, StreamControl()))
    await wait_provider_requests(fake, 1)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    hold = ledger.holds_for("deepseek")[0]
    assert hold.state == "settled" and hold.estimated and hold.usage is not None
    assert (hold.usage.input_tokens, hold.usage.output_tokens) == (hold.input_tokens, 0)


async def test_the_output_watch_counts_rarely_and_trips_just_past_the_bound() -> None:
    """The stream's output watch (llm.cascade.received): with max_tokens 1,000 and
    TOKEN_SAFETY_FACTOR 1.25, a text fed in 4-character deltas is found past the bound
    once its o200k count passes 1,250 (within one 64-byte step), after a few dozen counts
    of ~8,000 deltas (a count is O(text): counting every delta would be O(n²)); a text
    short of it never trips."""
    counter = TokenCounter()
    counts = 0

    def count(messages: Sequence[Message]) -> int:
        nonlocal counts
        counts += 1
        return counter.messages(messages)

    text = "".join(f"word{i} " for i in range(5_000))
    watch = OutputWatch(1_000, count, Decimal("1.25"))
    seen = ""
    for i in range(0, len(text), 4):
        delta = text[i : i + 4]
        seen += delta
        if await watch.passed(delta, seen):
            break
    else:
        raise AssertionError("never tripped")
    raw = counter.raw_text(seen)
    assert 1_250 < raw <= 1_250 + 64 and counts < 40
    honest = OutputWatch(1_000, count, Decimal("1.25"))
    short = text[: len(seen) * 3 // 4]
    assert not any(
        [await honest.passed(short[i : i + 4], short[: i + 4]) for i in range(0, len(short), 4)]
    )
