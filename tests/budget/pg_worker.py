"""One OS process of the cross-process PostgreSQL ledger tests.

``python -m tests.budget.pg_worker URL CASE N START INDEX [FLAG]`` starts a ledger
on the PostgreSQL database ``URL`` (its own pool, process id and heartbeat) as process
number ``INDEX``, waits until ``START`` (epoch seconds) so that every process begins at
once, and prints its result:

* ``global``: N users, one hold of 3,000 µUSD each (a $1.00 global daily limit) —
  prints how many were granted;
* ``user``: N first requests of user 7, 4,000 µUSD each ($0.010 user daily limit) —
  prints how many were granted;
* ``team``: N members of team ``t`` (users :func:`team_user` (INDEX, 0…N−1), added by
  the test; $0.010 team daily limit), one hold of 3,000 µUSD each — prints the grants
  and the level of each refusal (``2 team team``);
* ``kill`` (3 processes): one admission and hold that succeed, each then creates
  ``FLAG/ready-INDEX``; process 0 waits for the two others', trips the kill switch and
  creates ``FLAG/killed``, while the others wait for that file and try one more
  admission — prints ``killed`` (process 0), or the refusal reason.
"""

from __future__ import annotations

import asyncio
import sys
import time
from dataclasses import replace
from pathlib import Path

from budget.config import LedgerConfig
from budget.errors import HoldRefused
from budget.kernel.clock import SystemClock
from budget.ledger import Ledger
from budget.types import Origin, Usage
from tests.budget.ledger_helpers import BASE_CONFIG, card


def team_user(index: int, i: int) -> int:
    """The ``i``-th team member of process ``index`` (case ``team``)."""
    return 1_000 + 100 * index + i


def _config(case: str) -> LedgerConfig:
    return replace(
        BASE_CONFIG,
        global_daily_musd=1_000_000 if case == "global" else None,
        user_daily_musd=10_000 if case == "user" else None,
        team_daily_musd=10_000 if case == "team" else None,
    )


async def _holds(ledger: Ledger, case: str, n: int, index: int) -> str:
    """``n`` concurrent holds (cases global, user, team)."""
    ceiling = 4_000 if case == "user" else 3_000
    refused: list[str] = []

    async def one(i: int) -> bool:
        user = {"global": 1_000 + i, "user": 7}.get(case, team_user(index, i))
        try:
            op = await ledger.begin_operation(user, Origin.CHAT, max_musd=10**9)
            req = await ledger.begin_request(op, f"r{i}")
            await ledger.reserve(
                op, req, provider="test", model="m", input_tokens=1, max_tokens=ceiling - 1
            )
        except HoldRefused as exc:
            level = exc.refusal.level
            refused.append("none" if level is None else level.value)
            return False
        return True

    granted = sum(await asyncio.gather(*(one(i) for i in range(n))))
    return " ".join([str(granted), *refused])


async def _wait_for(path: Path) -> None:
    # the signal comes from another OS process: a file, polled
    while not await asyncio.to_thread(path.exists):  # noqa: ASYNC110 - no Event across processes
        await asyncio.sleep(0.02)


async def _kill(ledger: Ledger, index: int, flags: Path) -> str:
    """Every process is admitted and holds once; then process 0 (once the others
    said so in ``flags``) trips the switch, and the others try once more."""
    op = await ledger.begin_operation(500 + index, Origin.CHAT, max_musd=10**9)
    req = await ledger.begin_request(op, "before")
    hold = await ledger.reserve(op, req, provider="test", model="m", input_tokens=1, max_tokens=9)
    await ledger.settle(hold.hold_id, Usage(1, 0, 1))
    await ledger.end_operation(op)
    await asyncio.to_thread((flags / f"ready-{index}").touch)
    if index == 0:
        await _wait_for(flags / "ready-1")
        await _wait_for(flags / "ready-2")
        await ledger.kill("test", by=9)
        await asyncio.to_thread((flags / "killed").touch)
        return "killed"
    await _wait_for(flags / "killed")
    try:
        await ledger.begin_operation(600 + index, Origin.CHAT, max_musd=10**9)
    except HoldRefused as exc:
        return exc.refusal.reason.value
    return "admitted"


async def main(url: str, case: str, n: int, start: float, index: int, flag: Path) -> str:
    """This process's result line (module docstring)."""
    cfg = _config(case)
    ledger = Ledger.open(url, cfg, card(), SystemClock())
    await ledger.start(run_sweeper=False)
    await asyncio.sleep(max(0.0, start - time.time()))
    try:
        if case == "kill":
            return await _kill(ledger, index, flag)
        return await _holds(ledger, case, n, index)
    finally:
        await ledger.close()


if __name__ == "__main__":
    url_, case_, n_, start_ = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
    index_ = int(sys.argv[5])
    flag_ = Path(sys.argv[6]) if len(sys.argv) > 6 else Path("/nonexistent")
    print(asyncio.run(main(url_, case_, n_, start_, index_, flag_)))
