"""Concurrency on a real SQLite file: exact counts under simultaneous requests.

Auto-kill off, in-flight and rate limits high (conftest's BASE_CONFIG). Prices:
``test:m`` = 1 µUSD per token, so ``input_tokens=1, max_tokens=n-1`` holds n µUSD.
"""

from __future__ import annotations

import asyncio

from budget.errors import HoldRefused
from budget.ledger import Ledger
from budget.protocol import HoldTicket
from budget.types import Level, Origin, RefusalReason, Window
from tests.budget.ledger_helpers import LedgerFactory


async def attempt(ledger: Ledger, user: int, ceiling: int) -> HoldTicket | HoldRefused:
    """One operation + request + hold of ``ceiling`` µUSD; the refusal is returned."""
    try:
        op = await ledger.begin_operation(user, Origin.CHAT, max_musd=10**9)
        req = await ledger.begin_request(op, "prompt")
        return await ledger.reserve(
            op, req, provider="test", model="m", input_tokens=1, max_tokens=ceiling - 1
        )
    except HoldRefused as exc:
        return exc


async def test_a_global_daily_limit_exact_count(make_ledger: LedgerFactory) -> None:
    """(a) global daily $1.00, 1,000 concurrent $0.003 holds → exactly 333 granted."""
    ledger = await make_ledger(global_daily_musd=1_000_000)
    results = await asyncio.gather(*(attempt(ledger, u, 3_000) for u in range(1000)))
    granted = [r for r in results if isinstance(r, HoldTicket)]
    assert len(granted) == 333
    st = await ledger.status()
    assert st.exposure_musd == 999_000
    assert all(r.refusal.level is Level.GLOBAL for r in results if isinstance(r, HoldRefused))


async def test_b_new_user_burst_exact_count(make_ledger: LedgerFactory) -> None:
    """(b) a new user with $0.010 daily and 8 simultaneous first requests of $0.004 → 2."""
    ledger = await make_ledger(user_daily_musd=10_000)
    results = await asyncio.gather(*(attempt(ledger, 77, 4_000) for _ in range(8)))
    assert sum(isinstance(r, HoldTicket) for r in results) == 2
    refusals = [r.refusal for r in results if isinstance(r, HoldRefused)]
    assert {(r.level, r.window, r.reason) for r in refusals} == {
        (Level.USER, Window.DAY, RefusalReason.BUSY)
    }


async def test_c_team_refuses_nothing_held_anywhere(make_ledger: LedgerFactory) -> None:
    """(c) user $0.80 free, team $0.30 free, global $5.00 free, ceiling $0.50 →
    refused by the team level; nothing held on any level, even with 20 at once."""
    ledger = await make_ledger(
        user_daily_musd=800_000, team_daily_musd=300_000, global_daily_musd=5_000_000
    )
    await ledger.team_add("t", 5)
    results = await asyncio.gather(*(attempt(ledger, 5, 500_000) for _ in range(20)))
    assert all(isinstance(r, HoldRefused) for r in results)
    assert {r.refusal.level for r in results if isinstance(r, HoldRefused)} == {Level.TEAM}
    us = await ledger.user_status(5)
    assert [b.held_musd for b in us.buckets] == [0] * len(us.buckets)
    assert (await ledger.status()).exposure_musd == 0


async def test_two_processes_on_one_file_never_overspend(make_ledger: LedgerFactory) -> None:
    """Two ledgers (two writer connections, as two processes would have) racing on one
    file still grant exactly floor(limit / ceiling) holds: BEGIN IMMEDIATE serialises."""
    one = await make_ledger(global_daily_musd=100_000)
    two = await make_ledger(global_daily_musd=100_000)
    results = await asyncio.gather(*(attempt(one if i % 2 else two, i, 3_000) for i in range(200)))
    assert sum(isinstance(r, HoldTicket) for r in results) == 33
