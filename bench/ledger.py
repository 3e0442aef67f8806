"""Ledger benchmark: run ``.venv/bin/python bench/ledger.py``; < 60 s.
``bench/ledger.py --backend postgres`` runs the PostgreSQL figures instead
(``bench/ledger_pg.py``); ``bench/ledger.py NORMAL`` runs SQLite at
``synchronous=NORMAL``; ``--help`` prints the usage, and an unknown argument is a
usage error (exit 2) — never a benchmark run.

Prints, in one run:
1. a stdlib-sqlite3 per-operation baseline (hold+settle over 3 levels, WAL,
   BEGIN IMMEDIATE, conditional UPDATEs + an INSERT per hold, on the event loop's thread);
2. the ledger's hold+settle p50/p99 at concurrency 1 and pairs/s at 100 tasks,
   with the event-loop stall p99 measured by a ticker task (lateness of a 1 ms sleep);
3. the synchronous mode used;
4. three exact counts under concurrency: (a) 1,000 holds of $0.003 against a $1.00
   global limit, (b) 8 first requests of $0.004 against a new user's $0.010, (c) a $0.50
   ceiling against user $0.80 / team $0.30 / global $5.00 free.

Targets: p50 ≤ 2 ms, ≥ 500 pairs/s at 100 tasks, stall p99 ≤ 2 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import sqlite3
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
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

SYNC = "FULL"


def pct(values: list[float], q: float) -> float:
    """The q-quantile (0..1) of ``values``."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def baseline(path: Path, n: int = 2000) -> tuple[float, float]:
    """stdlib sqlite3, one connection, hold+settle over 3 levels; returns (pairs/s, p50 ms)."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute(f"PRAGMA synchronous={SYNC}")
    conn.execute("CREATE TABLE b (k TEXT PRIMARY KEY, lim INT, held INT, settled INT)")
    conn.execute("CREATE TABLE h (id TEXT PRIMARY KEY, c INT, a INT)")
    for k in ("user", "team", "global"):
        conn.execute("INSERT INTO b VALUES (?, ?, 0, 0)", (k, 10**15))
    times = []
    start = time.perf_counter()
    for _ in range(n):
        t0 = time.perf_counter()
        hid = uuid.uuid4().hex
        conn.execute("BEGIN IMMEDIATE")
        for k in ("user", "team", "global"):
            conn.execute(
                "UPDATE b SET held = held + 10 WHERE k = ? AND settled + held + 10 <= lim", (k,)
            )
        conn.execute("INSERT INTO h VALUES (?, 10, NULL)", (hid,))
        conn.execute("COMMIT")
        conn.execute("BEGIN IMMEDIATE")
        for k in ("user", "team", "global"):
            conn.execute("UPDATE b SET held = held - 10, settled = settled + 7 WHERE k = ?", (k,))
        conn.execute("UPDATE h SET a = 7 WHERE id = ?", (hid,))
        conn.execute("COMMIT")
        times.append(time.perf_counter() - t0)
    elapsed = time.perf_counter() - start
    conn.close()
    return n / elapsed, statistics.median(times) * 1000


def prices() -> PriceCard:
    """``test:m`` at 1 µUSD per token in and out."""
    return PriceCard(
        [ProviderModel("test", "m", "paid")],
        overrides={"test:m": ModelRates(Decimal(1), Decimal(1))},
        use_default_overrides=False,
    )


async def make(path: Path, **limits: int) -> Ledger:
    """A started ledger on a fresh schema with auto-kill off and loose user limits."""
    create_schema(path)
    cfg = LedgerConfig(
        user_max_inflight=10**6,
        user_max_per_minute=10**6,
        auto_kill_fraction=Decimal(0),
        synchronous=SYNC,  # type: ignore[arg-type]
        **limits,  # type: ignore[arg-type]
    )
    ledger = Ledger(SqliteStore(path, cfg, uuid.uuid4().hex), cfg, prices(), SystemClock())
    await ledger.start(run_sweeper=False)
    return ledger


async def pair(ledger: Ledger, user: int, ceiling: int = 10) -> None:
    """One operation: request, hold, settle, end."""
    op = await ledger.begin_operation(user, Origin.CHAT, max_musd=10**9, max_requests=10**6)
    req = await ledger.begin_request(op, "p")
    h = await ledger.reserve(
        op, req, provider="test", model="m", input_tokens=1, max_tokens=ceiling - 1
    )
    await ledger.settle(h.hold_id, Usage(1, 0, 3))
    await ledger.end_operation(op)


async def hold_settle(ledger: Ledger, op_user: int) -> float:
    """Time of one hold+settle (the per-attempt cost a call pays), in seconds."""
    op = await ledger.begin_operation(op_user, Origin.CHAT, max_musd=10**9, max_requests=10**6)
    req = await ledger.begin_request(op, "p")
    t0 = time.perf_counter()
    h = await ledger.reserve(op, req, provider="test", model="m", input_tokens=1, max_tokens=9)
    await ledger.settle(h.hold_id, Usage(1, 0, 3))
    dt = time.perf_counter() - t0
    await ledger.end_operation(op)
    return dt


async def with_ticker(work: Callable[[], Awaitable[None]]) -> list[float]:
    """Run ``work`` while a ticker sleeps 1 ms in a loop; returns lateness samples (s)."""
    late: list[float] = []
    done = asyncio.Event()

    async def ticker() -> None:
        while not done.is_set():
            t0 = time.perf_counter()
            await asyncio.sleep(0.001)
            late.append(time.perf_counter() - t0 - 0.001)

    task = asyncio.create_task(ticker())
    await work()
    done.set()
    await task
    return late


async def exact_counts(tmp: Path) -> tuple[int, int, str]:
    """(a) 1,000 × $0.003 against $1.00; (b) 8 × $0.004 against a new user's $0.010;
    (c) ceiling $0.50 with user $0.80 / team $0.30 / global $5.00 free."""

    async def attempt(ledger: Ledger, user: int, ceiling: int) -> bool | HoldRefused:
        try:
            op = await ledger.begin_operation(user, Origin.CHAT, max_musd=10**9)
            req = await ledger.begin_request(op, "p")
            await ledger.reserve(
                op, req, provider="test", model="m", input_tokens=1, max_tokens=ceiling - 1
            )
            return True
        except HoldRefused as exc:
            return exc

    a = await make(tmp / "a.db", global_daily_musd=1_000_000)
    ra = await asyncio.gather(*(attempt(a, u, 3_000) for u in range(1000)))
    await a.close()
    b = await make(tmp / "b.db", user_daily_musd=10_000)
    rb = await asyncio.gather(*(attempt(b, 7, 4_000) for _ in range(8)))
    await b.close()
    c = await make(
        tmp / "c.db", user_daily_musd=800_000, team_daily_musd=300_000, global_daily_musd=5_000_000
    )
    await c.team_add("t", 1)
    (rc,) = await asyncio.gather(attempt(c, 1, 500_000))
    st = await c.status()
    us = await c.user_status(1)
    await c.close()
    held = st.exposure_musd + sum(x.held_musd for x in us.buckets)
    verdict = (
        f"refused by {rc.refusal.level}, held anywhere = {held}"
        if isinstance(rc, HoldRefused) and rc.refusal.level is not None
        else "GRANTED (wrong)"
    )
    return sum(r is True for r in ra), sum(r is True for r in rb), verdict


async def main() -> None:
    """Run every measurement and print the report."""
    t_start = time.perf_counter()
    with tempfile.TemporaryDirectory(dir=Path.cwd()) as d:
        tmp = Path(d)
        base_rate, base_p50 = baseline(tmp / "baseline.db")
        print(
            f"synchronous mode: {SYNC} (WAL; the ledger fsyncs each group holding a hold, "
            "settles ride grouped commits; the baseline fsyncs every commit)"
        )
        print(
            f"baseline stdlib sqlite3 on the loop thread: {base_rate:,.0f} pairs/s, "
            f"p50 {base_p50:.3f} ms"
        )

        ledger = await make(tmp / "ledger.db")
        for _ in range(50):
            await hold_settle(ledger, 1)
        samples: list[float] = []

        async def serial() -> None:
            for i in range(1000):
                samples.append(await hold_settle(ledger, i))

        late1 = await with_ticker(serial)
        print(
            f"ledger hold+settle, concurrency 1: p50 {pct(samples, 0.5) * 1000:.3f} ms, "
            f"p99 {pct(samples, 0.99) * 1000:.3f} ms (target p50 <= 2 ms); "
            f"loop stall p99 {pct(late1, 0.99) * 1000:.3f} ms"
        )

        n_pairs = 3000
        per_task = n_pairs // 100
        elapsed = 0.0

        async def burst() -> None:
            nonlocal elapsed

            async def worker(w: int) -> None:
                op = await ledger.begin_operation(w, Origin.CHAT, max_musd=10**9)
                req = await ledger.begin_request(op, "p")
                for _ in range(per_task):
                    h = await ledger.reserve(
                        op, req, provider="test", model="m", input_tokens=1, max_tokens=9
                    )
                    await ledger.settle(h.hold_id, Usage(1, 0, 3))
                await ledger.end_operation(op)

            t0 = time.perf_counter()
            await asyncio.gather(*(worker(w) for w in range(100)))
            elapsed = time.perf_counter() - t0

        late100 = await with_ticker(burst)
        ops0 = time.perf_counter()
        await asyncio.gather(*(pair(ledger, 10_000 + i) for i in range(500)))
        ops_rate = 500 / (time.perf_counter() - ops0)
        await ledger.close()
        print(
            f"ledger at 100 concurrent tasks: {n_pairs / elapsed:,.0f} hold+settle pairs/s "
            f"(target >= 500); "
            f"loop stall p99 {pct(late100, 0.99) * 1000:.3f} ms (target <= 2 ms)"
        )
        print(
            f"full operations (begin_operation + begin_request + hold + settle + end), "
            f"500 concurrent: {ops_rate:,.0f} operations/s"
        )
        a, b, c = await exact_counts(tmp)
        print(f"(a) global $1.00, 1,000 x $0.003 concurrent: {a} granted (expected 333)")
        print(
            f"(b) new user $0.010, 8 x $0.004 simultaneous first requests: {b} granted (expected 2)"
        )
        print(
            f"(c) user $0.80 / team $0.30 / global $5.00 free, ceiling $0.50: {c} "
            "(expected team, 0)"
        )
    print(f"total run time {time.perf_counter() - t_start:.1f} s")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line: ``[--backend sqlite|postgres] [FULL|NORMAL]``.

    Raises:
        SystemExit: 0 after ``--help``; 2 (with a usage line on stderr) for an unknown
            argument, backend or mode, or a mode given with ``--backend postgres``.
    """
    parser = argparse.ArgumentParser(
        prog="bench/ledger.py",
        description="Ledger hold+settle benchmark beside a baseline measured in the same run.",
    )
    parser.add_argument(
        "--backend",
        choices=("sqlite", "postgres"),
        default="sqlite",
        help="sqlite (default, < 60 s) or postgres (bench/ledger_pg.py, a few minutes)",
    )
    parser.add_argument(
        "sync",
        nargs="?",
        type=str.upper,
        choices=("FULL", "NORMAL"),
        default=None,
        help="SQLite synchronous mode of the ledger and the baseline (default FULL)",
    )
    args = parser.parse_args(argv)
    if args.backend == "postgres" and args.sync is not None:
        parser.error("FULL/NORMAL is a SQLite mode; --backend postgres takes none")
    return args


if __name__ == "__main__":
    ARGS = parse_args()
    if ARGS.backend == "postgres":
        from bench import ledger_pg  # the repository root is on sys.path (above)

        ledger_pg.main()
        raise SystemExit(0)
    SYNC = ARGS.sync or SYNC
    asyncio.run(main())
