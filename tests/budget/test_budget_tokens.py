"""Offline token counting for ceilings."""

from __future__ import annotations

import asyncio
import socket
import threading
from dataclasses import dataclass
from decimal import Decimal

import pytest

from budget.pricing import tokens
from budget.pricing.tokens import TokenCounter, load_encoding


@dataclass(frozen=True)
class Msg:
    """A chat message shaped like llm.types.Message."""

    role: str
    content: str


def test_counts_offline_without_network(monkeypatch: pytest.MonkeyPatch) -> None:
    """The rank files ship in the package: loading both encodings from scratch and
    counting opens no socket (tiktoken.get_encoding would download them)."""

    def no_network(*_a: object, **_k: object) -> None:
        raise AssertionError("network used")

    monkeypatch.setattr(socket, "create_connection", no_network)
    monkeypatch.setattr(socket.socket, "connect", no_network)
    monkeypatch.setattr(socket.socket, "connect_ex", no_network)
    monkeypatch.setattr(tokens, "_encodings", {})  # load again, with the network blocked
    counter = TokenCounter("cl100k_base", Decimal(1))
    assert counter.raw_text("hello world") == 2  # tiktoken cl100k: [15339, 1917]
    assert TokenCounter("o200k_base", Decimal(1)).raw_text("hello world") == 2


def test_encodings_are_openais() -> None:
    """The shipped files give OpenAI's token ids (values from tiktoken's own files)."""
    assert load_encoding("cl100k_base").encode_ordinary("hello world") == [15339, 1917]
    assert load_encoding("o200k_base").encode_ordinary("hello world") == [24912, 2375]
    assert load_encoding("o200k_base").n_vocab == 200019


def test_safety_factor_rounds_up() -> None:
    """The factor is applied once and rounded up: 2 tokens × 1.25 → 3."""
    counter = TokenCounter("cl100k_base")
    assert counter.text("hello world") == 3
    assert counter.scale(8) == 10


def test_messages_include_overhead() -> None:
    """Chat counting adds 3 per message and 3 for reply priming."""
    counter = TokenCounter("o200k_base", Decimal(1))
    msgs = [Msg("user", "hello world")]
    assert counter.raw_messages(msgs) == 3 + 3 + counter.raw_text("user") + counter.raw_text(
        "hello world"
    )
    assert TokenCounter().messages(msgs) >= counter.raw_messages(msgs)


def test_bad_arguments() -> None:
    """Unknown encodings and factors below 1 are rejected."""
    with pytest.raises(ValueError):
        TokenCounter("p50k_base")
    with pytest.raises(ValueError):
        TokenCounter(safety_factor=Decimal("0.9"))


async def test_short_texts_are_counted_on_the_loop_long_ones_in_the_counting_thread() -> None:
    """``count_off_loop``: a text the caller says is short (≤ INLINE_COUNT_CHARS) is
    counted at once in the caller's thread; a longer one, or one of unknown size, in the
    counting thread — the same count either way."""

    counter = TokenCounter(safety_factor=Decimal(1))
    where: list[str] = []

    def count(messages: list[Msg]) -> int:
        where.append(threading.current_thread().name)
        return counter.raw_messages(messages)

    short = [Msg("user", "x" * tokens.INLINE_COUNT_CHARS)]
    long = [Msg("user", "x" * (tokens.INLINE_COUNT_CHARS + 1))]
    here = threading.current_thread().name
    assert await tokens.count_off_loop(count, short, chars=len(short[0].content)) == (
        counter.raw_messages(short)
    )
    assert await tokens.count_off_loop(count, long, chars=len(long[0].content)) == (
        counter.raw_messages(long)
    )
    assert await tokens.count_off_loop(count, short) == counter.raw_messages(short)
    assert where[0] == here
    assert where[1] != here and where[1].startswith("kopek-tokens")
    assert where[2] != here


async def test_a_short_text_before_any_encoding_is_loaded_is_counted_off_the_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The first count loads its encoding (~0.3 s): even a short text goes to the
    counting thread then, and ``preload`` loads it there before anyone counts."""
    monkeypatch.setattr(tokens, "_encodings", {})
    counter = TokenCounter(safety_factor=Decimal(1))
    where: list[str] = []

    def count(messages: list[Msg]) -> int:
        where.append(threading.current_thread().name)
        return counter.raw_messages(messages)

    short = [Msg("user", "hello")]
    assert await tokens.count_off_loop(count, short, chars=5) == counter.raw_messages(short)
    assert where[0].startswith("kopek-tokens")
    fresh = TokenCounter()
    monkeypatch.setattr(tokens, "_encodings", {})
    fresh.preload()
    loaded = await asyncio.get_running_loop().run_in_executor(
        tokens._counting_pool(), dict, tokens._encodings
    )
    assert "o200k_base" in loaded  # the pool's one thread loaded it before this ran
    assert await tokens.count_off_loop(count, short, chars=5) == counter.raw_messages(short)
    assert where[1] == threading.current_thread().name
