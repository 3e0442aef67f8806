"""What sharing state between replicas costs one provider attempt.

On a local durable PostgreSQL server (fsync on; ``tests/support/pg.py``), per attempt at
concurrency 1, median and p99 of:

* the key's circuit and paced window: :class:`llm.keys.admission.KeyAdmission` read at the request
  (``refresh``), locked before the call (``begin``) and written after it
  (``succeeded`` with rate-limit headers) — in memory (SQLite deployments) and shared
  through ``provider_keys`` (:mod:`llm.keys.postgres`);
* the call slot: :class:`llm.keys.slots.PrioritySlots` alone and with a deployment lease
  (:class:`llm.keys.slots.DeploymentSlots` over :mod:`llm.keys.claims`);
* a user's place in the queue across replicas (:class:`bot.chat.lanes.PgLanes`, one read);

beside a baseline measured in the same run: one single-row ``UPDATE`` per transaction
on the same server through the same pool.

Run: ``python bench/shared_state.py`` (needs the test extras: the server's binaries).
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bot.chat.lanes import PgLanes
from bot.storage.migrate import migrate
from budget.config import LedgerConfig
from budget.kernel.clock import SystemClock
from budget.storage.postgres.store import PgStore
from llm.keys.admission import KeyAdmission
from llm.keys.breaker import CircuitBreaker
from llm.keys.claims import CallClaims
from llm.keys.pacing import Pacer
from llm.keys.postgres import PgKeyStates
from llm.keys.slots import DeploymentSlots, PrioritySlots
from llm.types import RateLimitInfo

N = 300
NAMES = ["groq", "groq2", "mistral", "cerebras", "deepseek"]
HEADERS = RateLimitInfo(
    remaining_tokens=10**9,
    reset_tokens_s=60.0,
    remaining_requests=10**6,
    reset_requests_s=60.0,
    raw={"x-ratelimit-remaining-tokens": "1000000000"},
)


async def _times(step: Callable[[], Awaitable[object]]) -> tuple[float, float]:
    """(p50, p99) of ``step`` in ms over N runs, after 20 warm-up runs."""
    for _ in range(20):
        await step()
    samples = []
    for _ in range(N):
        t0 = time.perf_counter()
        await step()
        samples.append((time.perf_counter() - t0) * 1000)
    samples.sort()
    return statistics.median(samples), samples[int(len(samples) * 0.99) - 1]


async def measure(url: str) -> list[tuple[str, float, float]]:
    """Every figure: (what, p50 ms, p99 ms); the baseline first."""
    clock = SystemClock()
    store = PgStore(url, LedgerConfig(), "bench", clock, run_heartbeat=False)
    await store.open()
    rows: list[tuple[str, float, float]] = []
    try:

        async def baseline() -> None:
            async def body(conn: Any) -> None:
                await conn.execute(
                    "UPDATE budget_processes SET heartbeat_at = heartbeat_at WHERE process_id = $1",
                    "bench",
                )

            await store.tx(clock.now(), body)

        rows.append(("baseline: one single-row UPDATE transaction", *await _times(baseline)))

        def gate(shared: bool) -> Callable[[], Awaitable[None]]:
            keys = PgKeyStates(store, clock) if shared else None
            g = KeyAdmission(CircuitBreaker(clock), Pacer(clock), clock, keys)

            async def attempt() -> None:
                await g.refresh(NAMES)
                assert await g.begin("groq", 2000) == ""
                await g.succeeded("groq", HEADERS)

            return attempt

        rows.append(("key gate in memory (refresh, begin, succeeded)", *await _times(gate(False))))
        rows.append(("key gate shared (refresh, begin, succeeded)", *await _times(gate(True))))

        local = PrioritySlots(8)
        leases = CallClaims(store, "bench", clock, ttl_s=300.0, dead_after_s=60.0)
        deployment = DeploymentSlots(PrioritySlots(8), leases, clock)

        def slot(slots: PrioritySlots | DeploymentSlots) -> Callable[[], Awaitable[None]]:
            async def take() -> None:
                async with slots.slot(0):
                    pass

            return take

        rows.append(("call slot in this process", *await _times(slot(local))))
        rows.append(("call slot + deployment lease", *await _times(slot(deployment))))
        lanes = PgLanes(store, "bench", clock, 60.0)

        async def place() -> None:
            await lanes.ahead(7, 7, 1000)

        rows.append(("a message's place among other replicas' (one read)", *await _times(place)))
    finally:
        await store.close()
    return rows


def main() -> None:
    """Start a durable local server, migrate a database, measure, print."""
    from tests.support.pg import start_server

    t_start = time.perf_counter()
    server = start_server(durable=True)
    try:
        url = server.create_database(prefix="bench")
        migrate(url)
        rows = asyncio.run(measure(url))
    finally:
        server.stop()
    base = rows[0][1]
    print(f"bench/shared_state.py: PostgreSQL (durable local server), concurrency 1, {N} runs")
    for what, p50, p99 in rows:
        ratio = p50 / base
        print(f"  {what:<52} p50 {p50:7.3f} ms  p99 {p99:7.3f} ms  p50 = {ratio:5.2f}x baseline")
    print(f"total run time {time.perf_counter() - t_start:.1f} s")


if __name__ == "__main__":
    main()
