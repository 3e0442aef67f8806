"""Fixtures for ``llm/`` tests: the loopback fake providers, clients built on them,
a manual clock and the in-memory ledger."""

from __future__ import annotations

from collections.abc import AsyncIterator
from decimal import Decimal
from typing import Any

import pytest

from llm.cascade.factory import build_provider
from llm.providers.base import Provider
from tests.llm.llm_helpers import spec, tls
from tests.support.clocks import ManualClock
from tests.support.ledger import FakeLedger, FakePrices, Rates
from tests.support.providers import FakeProviders


@pytest.fixture
async def fake() -> AsyncIterator[FakeProviders]:
    """The fake providers on a random loopback port."""
    async with FakeProviders() as server:
        yield server


@pytest.fixture
def clock() -> ManualClock:
    """The test clock."""
    return ManualClock()


@pytest.fixture
def prices() -> FakePrices:
    """DeepSeek-like rates for the paid anchor; the rest free."""
    return FakePrices(
        {
            ("deepseek", "deepseek-chat"): Rates(
                Decimal("0.28"), Decimal("0.42"), Decimal("0.028")
            ),
            ("deepseek", "deepseek-chat-lite"): Rates(Decimal("0.07"), Decimal("0.11")),
        },
        free={"groq", "groq2", "mistral", "cerebras"},
    )


@pytest.fixture
def ledger(prices: FakePrices, clock: ManualClock) -> FakeLedger:
    """The in-memory ledger (no limits)."""
    return FakeLedger(prices, clock)


@pytest.fixture
async def make_client(fake: FakeProviders) -> AsyncIterator[Any]:
    """Factory ``make_client(name, timeout_s=5.0) -> Provider``; closes them afterwards."""
    made: list[Provider] = []

    def make(name: str, timeout_s: float = 5.0) -> Provider:
        client = build_provider(spec(name, fake), timeout_s=timeout_s, tls=tls())
        made.append(client)
        return client

    yield make
    for client in made:
        await client.aclose()
