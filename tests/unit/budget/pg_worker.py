"""One OS process of the cross-process PostgreSQL ledger tests.

``python -m tests.unit.budget.pg_worker URL CASE N START`` starts a ledger on the
PostgreSQL database ``URL`` (its own pool, process id and heartbeat), waits until
``START`` (epoch seconds) so that every process begins at once, runs ``N`` concurrent
holds of ``CASE`` and prints how many were granted:

* ``global``: N users, one hold of 3,000 µUSD each (a $1.00 global daily limit);
* ``user``: N first requests of user 7, 4,000 µUSD each ($0.010 user daily limit).
"""

from __future__ import annotations

import asyncio
import sys
import time
from dataclasses import replace

from budget.clock import SystemClock
from budget.errors import HoldRefused
from budget.ledger import Ledger
from budget.types import Origin
from tests.unit.budget.ledger_helpers import BASE_CONFIG, card


async def main(url: str, case: str, n: int, start: float) -> int:
    """Granted holds of this process."""
    cfg = replace(
        BASE_CONFIG,
        global_daily_musd=1_000_000 if case == "global" else None,
        user_daily_musd=10_000 if case == "user" else None,
    )
    ledger = Ledger.postgres(url, cfg, card(), SystemClock())
    await ledger.start(run_sweeper=False)
    ceiling = 3_000 if case == "global" else 4_000

    async def one(i: int) -> bool:
        user = 1_000 + i if case == "global" else 7
        try:
            op = await ledger.begin_operation(user, Origin.CHAT, max_musd=10**9)
            req = await ledger.begin_request(op, f"r{i}")
            await ledger.reserve(
                op, req, provider="test", model="m", input_tokens=1, max_tokens=ceiling - 1
            )
        except HoldRefused:
            return False
        return True

    await asyncio.sleep(max(0.0, start - time.time()))
    granted = sum(await asyncio.gather(*(one(i) for i in range(n))))
    await ledger.close()
    return granted


if __name__ == "__main__":
    url, case, n, start = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
    print(asyncio.run(main(url, case, n, start)))
