"""What the replica claims cost: ``python bench/claims.py``.

On a SQLite file and on a local durable PostgreSQL server (``tests/support/pg.py``), both
migrated to head, one process, one request at a time, prints per operation:

* a digest run's bookkeeping as the runner does it — :meth:`RunStore.load` (create or
  claim), :meth:`RunStore.still_mine` (the check before delivery) and
  :meth:`RunStore.sent` — with a :class:`~scheduler.claims.Claimant` (replicas) and,
  as the baseline in the same run, without one (a process alone on its database);
* a summary cache miss (:meth:`SummaryCache.get_or_make` whose ``make`` returns at
  once: the database work only) with and without a claimant — with one, the pending
  row is inserted and dropped with the entry;
* a cache hit (one read; the same with or without).

Each figure is the median of ``N`` operations on fresh keys (with and without claims
alternating), milliseconds, with the ratio to its baseline. The LLM call a miss stands
for takes seconds, so the point is the size of the claims' share, not the database's
speed.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, date, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sqlalchemy import insert  # noqa: E402
from sqlalchemy.ext.asyncio import async_sessionmaker  # noqa: E402

from bot.storage.migrate import migrate  # noqa: E402
from budget.kernel.clock import SystemClock  # noqa: E402
from budget.kernel.db import create_engine  # noqa: E402
from budget.storage.tables import processes  # noqa: E402
from scheduler.cache import CacheKey, Made, SummaryCache  # noqa: E402
from scheduler.claims import Claimant  # noqa: E402
from scheduler.job import DigestConfig, Job  # noqa: E402
from scheduler.run_store import RunStore  # noqa: E402

#: Operations per figure.
N = 200


async def _medians_ms(
    with_claims: Callable[[int], Awaitable[object]],
    baseline: Callable[[int], Awaitable[object]],
    offset: int,
) -> tuple[float, float]:
    """Medians of ``N`` operations each, the two kinds alternating (so a change in the
    machine's load during the run weighs on both alike)."""
    times: tuple[list[float], list[float]] = ([], [])
    for i in range(N):
        for kind, op in enumerate((with_claims, baseline)):
            start = time.perf_counter()
            await op(offset + 2 * i + kind)
            times[kind].append((time.perf_counter() - start) * 1000)
    return statistics.median(times[0]), statistics.median(times[1])


async def measure(url: str) -> list[tuple[str, float, float]]:
    """``(what, with claims ms, baseline ms)`` on the database ``url``."""
    engine = create_engine(url)
    sessions = async_sessionmaker(engine, expire_on_commit=False)
    clock = SystemClock()
    claimant = Claimant("bench-process", 60.0)
    now = clock.now().timestamp()
    async with engine.begin() as conn:  # three live replicas: the claims' subquery reads them
        await conn.execute(
            insert(processes),
            [
                {"process_id": p, "started_at": now, "heartbeat_at": now + 3600}
                for p in ("bench-process", "other-1", "other-2")
            ],
        )
    stores = {
        True: RunStore(sessions, clock, DigestConfig(), claimant),
        False: RunStore(sessions, clock, DigestConfig()),
    }
    caches = {True: SummaryCache(sessions, clock, claimant), False: SummaryCache(sessions, clock)}
    day = date(2026, 3, 2)
    due = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)

    def course(claims: bool) -> Callable[[int], Awaitable[None]]:
        async def run(user_id: int) -> None:
            store = stores[claims]
            loaded = await store.load(Job(user_id, day, due))
            assert loaded.claimed
            await store.still_mine(loaded.run)
            await store.sent(loaded.run, clock.now(), late=False)

        return run

    def miss(claims: bool) -> Callable[[int], Awaitable[None]]:
        async def made() -> Made:
            return Made("a summary", "groq", "m")

        async def run(post_id: int) -> None:
            key = CacheKey("bench", post_id, "0" * 64, "en", "v1")
            served = await caches[claims].get_or_make(key, made)
            assert not served.hit and served.summary == "a summary"

        return run

    def hit(claims: bool) -> Callable[[int], Awaitable[None]]:
        async def never() -> Made:
            raise AssertionError("a hit makes nothing")

        async def run(post_id: int) -> None:
            key = CacheKey("bench", post_id, "0" * 64, "en", "v1")
            assert (await caches[claims].get_or_make(key, never)).hit

        return run

    rows = []
    try:
        for what, make in (
            ("digest run (load + check + sent)", course),
            ("summary cache miss", miss),
            ("summary cache hit", hit),
        ):
            await _medians_ms(make(True), make(False), 90_000)  # warm-up, other keys
            with_claims, baseline = await _medians_ms(make(True), make(False), 10_000)
            rows.append((what, with_claims, baseline))
    finally:
        await engine.dispose()
    return rows


def _print(title: str, rows: list[tuple[str, float, float]]) -> None:
    print(title)
    for what, with_claims, baseline in rows:
        print(
            f"  {what}: with claims {with_claims:.2f} ms | without (baseline) "
            f"{baseline:.2f} ms | ratio {with_claims / baseline:.2f}"
        )


def main() -> None:
    """Measure on SQLite, then on a local PostgreSQL server; print both."""
    from tests.support.pg import start_server

    t_start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite+aiosqlite:///{Path(tmp) / 'claims.db'}"
        migrate(url)
        _print(f"SQLite file, median of {N} each", asyncio.run(measure(url)))
    server = start_server(durable=True)
    try:
        url = server.create_database(prefix="bench")
        migrate(url)
        _print(f"PostgreSQL (durable local server), median of {N} each", asyncio.run(measure(url)))
    finally:
        server.stop()
    print(f"total run time {time.perf_counter() - t_start:.1f} s")


if __name__ == "__main__":
    main()
