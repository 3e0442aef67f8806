"""The LedgerPort contract, run over the real SQLite ledger and the in-memory fake that
the ``llm/`` tests rely on (``tests/support/ledger.py``): a rule the fake gets wrong would
let those tests pass against behaviour the real ledger does not have.

Both price ``test:m`` at 1 µUSD per token in and out (a ceiling is input + max_tokens)
and ``free`` as free tier; both have one global daily limit of 1,000 µUSD.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace
from decimal import Decimal
from pathlib import Path

import pytest

from budget.errors import BudgetConfigError, HoldRefused, UnknownHold
from budget.ledger import Ledger
from budget.protocol import LedgerPort
from budget.storage.sqlite.store import SqliteStore
from budget.storage.tables import create_schema
from budget.types import Level, Origin, RefusalReason, Usage
from tests.budget.ledger_helpers import BASE_CONFIG, card
from tests.support.clocks import ManualClock
from tests.support.ledger import FakeLedger, FakePrices, Rates

LIMIT_MUSD = 1_000


@pytest.fixture(params=["sqlite", "fake"])
async def port(
    request: pytest.FixtureRequest, tmp_path: Path, clock: ManualClock
) -> AsyncIterator[LedgerPort]:
    """The real ledger on a fresh SQLite file, or the fake, with the same limit and prices."""
    if request.param == "fake":
        prices = FakePrices({("test", "m"): Rates(Decimal(1), Decimal(1))}, free={"free"})
        yield FakeLedger(prices, clock, global_limit_musd=LIMIT_MUSD)
        return
    path = tmp_path / "port.db"
    create_schema(path)
    cfg = replace(BASE_CONFIG, global_daily_musd=LIMIT_MUSD)
    ledger = Ledger(SqliteStore(path, cfg, process_id="p0"), cfg, card(), clock)
    await ledger.start(run_sweeper=False)
    yield ledger
    await ledger.close()


async def _hold(port: LedgerPort, user: int, fingerprint: str, tokens: tuple[int, int]) -> str:
    op = await port.begin_operation(user, Origin.CHAT)
    req = await port.begin_request(op, fingerprint)
    ticket = await port.reserve(
        op, req, provider="test", model="m", input_tokens=tokens[0], max_tokens=tokens[1]
    )
    assert ticket.ceiling_musd == sum(tokens)
    return ticket.hold_id


async def test_holds_are_all_or_nothing_busy_then_exhausted(port: LedgerPort) -> None:
    """600 held leaves 400: a 500 hold is refused as busy (holds block it, not spend);
    once 600 settles at 600 the same hold is refused as the limit, not busy."""
    first = await _hold(port, 1, "a", (100, 500))
    op = await port.begin_operation(2, Origin.CHAT)
    assert await port.remaining_musd(op, "test") == 400
    req = await port.begin_request(op, "b")
    with pytest.raises(HoldRefused) as busy:
        await port.reserve(op, req, provider="test", model="m", input_tokens=100, max_tokens=400)
    assert busy.value.refusal.reason is RefusalReason.BUSY and busy.value.refusal.busy
    assert busy.value.refusal.level is Level.GLOBAL
    assert await port.settle(first, Usage(input_tokens=100, output_tokens=500)) == 600
    req = await port.begin_request(op, "c")
    with pytest.raises(HoldRefused) as limit:
        await port.reserve(op, req, provider="test", model="m", input_tokens=100, max_tokens=400)
    assert limit.value.refusal.reason is RefusalReason.LIMIT and not limit.value.refusal.busy
    assert await port.remaining_musd(op, "test") == 400


async def test_settle_and_release_are_idempotent_and_unknown_holds_raise(
    port: LedgerPort,
) -> None:
    """A second settle returns the first amount; release after settle changes nothing;
    an unknown hold id raises UnknownHold on both."""
    hold = await _hold(port, 1, "a", (10, 90))
    assert await port.settle(hold, Usage(input_tokens=10, output_tokens=20)) == 30
    assert await port.settle(hold, Usage(input_tokens=10, output_tokens=90)) == 30
    await port.release(hold)
    released = await _hold(port, 2, "b", (10, 90))
    await port.release(released)
    await port.release(released)
    op = await port.begin_operation(3, Origin.CHAT)
    assert await port.remaining_musd(op, "test") == LIMIT_MUSD - 30
    with pytest.raises(UnknownHold):
        await port.settle("no-such-hold", Usage(input_tokens=1, output_tokens=1))
    with pytest.raises(UnknownHold):
        await port.release("no-such-hold")


async def test_same_prompt_twice_in_one_operation_is_a_loop(port: LedgerPort) -> None:
    """The second request with the same fingerprint in one operation is refused (loop)."""
    op = await port.begin_operation(1, Origin.CHAT)
    await port.begin_request(op, "same")
    with pytest.raises(HoldRefused) as loop:
        await port.begin_request(op, "same")
    assert loop.value.refusal.reason is RefusalReason.LOOP


async def test_free_tier_holds_nothing_and_unknown_paid_model_is_loud(port: LedgerPort) -> None:
    """A free-tier hold has a ceiling of 0 µUSD; a paid model without a price raises
    BudgetConfigError instead of holding $0."""
    op = await port.begin_operation(1, Origin.CHAT)
    req = await port.begin_request(op, "free")
    free = await port.reserve(op, req, provider="free", model="f", input_tokens=5, max_tokens=5)
    assert free.ceiling_musd == 0
    req = await port.begin_request(op, "unknown")
    with pytest.raises(BudgetConfigError):
        await port.reserve(
            op, req, provider="test", model="no-such-model", input_tokens=5, max_tokens=5
        )
