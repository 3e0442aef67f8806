"""Wallet benchmark: run ``.venv/bin/python bench/wallet.py``; < 30 s, SQLite.

Prints, in one run, on one ledger file:
1. the baseline: hold+settle p50/p99 (ms) of holds the user's allowance pays (no limit);
2. the same of holds the wallet pays (the user's day limit $0: each grant is refused on
   the allowance, then granted on the wallet in the same writer step);
3. an exact count: 1,000 holds of $0.003 at once against a $1.00 wallet (333 expected),
   and the wallet left afterwards.

``docs/decisions/240-the-wallet-is-a-balance-level.md``: the wallet costs one more read
and one more check, on the refused path only.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from decimal import Decimal
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from budget.config import LedgerConfig
from budget.errors import HoldRefused
from budget.kernel.clock import SystemClock
from budget.ledger import Ledger
from budget.pricing.prices import ModelRates, PriceCard, ProviderModel
from budget.storage.sqlite.store import SqliteStore
from budget.storage.tables import create_schema
from budget.types import Origin, Usage

N = 400


def _card() -> PriceCard:
    one = ModelRates(Decimal(1), Decimal(1), Decimal("0.5"))
    return PriceCard(
        [ProviderModel("test", "m", "paid")], overrides={"test:m": one}, use_default_overrides=False
    )


async def _ledger(path: Path, cfg: LedgerConfig, pid: str) -> Ledger:
    ledger = Ledger(SqliteStore(path, cfg, process_id=pid), cfg, _card(), SystemClock())
    await ledger.start(run_sweeper=False)
    return ledger


async def _one(ledger: Ledger, user: int, ceiling: int, settle: bool = True) -> bool:
    op = await ledger.begin_operation(user, Origin.CHAT, max_musd=10**9)
    try:
        req = await ledger.begin_request(op, "p")
        hold = await ledger.reserve(
            op, req, provider="test", model="m", input_tokens=1, max_tokens=ceiling - 1
        )
        if settle:
            await ledger.settle(hold.hold_id, Usage(1, 0, ceiling - 1))
        return True
    except HoldRefused:
        return False
    finally:
        await ledger.end_operation(op)


async def _pairs(ledger: Ledger, user: int) -> tuple[float, float]:
    times = []
    for _ in range(N):
        t = time.perf_counter()
        assert await _one(ledger, user, 100)
        times.append((time.perf_counter() - t) * 1000)
    times.sort()
    return statistics.median(times), times[int(0.99 * len(times))]


async def main() -> None:
    base = LedgerConfig(
        tz="UTC", user_max_inflight=2000, user_max_per_minute=10**6, auto_kill_fraction=Decimal(0)
    )
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "wallet.db"
        create_schema(path)
        free = await _ledger(path, base, "p1")
        p50, p99 = await _pairs(free, 1)
        print(f"baseline (allowance pays)  hold+settle p50 {p50:.2f} ms  p99 {p99:.2f} ms")
        await free.close()
        walled = await _ledger(path, replace(base, user_daily_musd=0), "p2")
        await walled.credit_wallet("bench-1", 2, 10**6, 1)
        p50, p99 = await _pairs(walled, 2)
        print(f"wallet pays                hold+settle p50 {p50:.2f} ms  p99 {p99:.2f} ms")
        await walled.credit_wallet("bench-2", 3, 1_000_000, 1)  # $1.00
        results = await asyncio.gather(*(_one(walled, 3, 3_000, settle=False) for _ in range(1000)))
        left = (await walled.wallet(3)).left_musd
        print(
            f"exact count: {sum(results)} of 1000 holds of $0.003 on a $1.00 wallet"
            f" (expected 333), left {left} µUSD"
        )
        await walled.close()


if __name__ == "__main__":
    asyncio.run(main())
