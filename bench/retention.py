"""Retention benchmark: ``.venv/bin/python bench/retention.py [--rows N] [--batch N]
[--concurrency N] [--seconds S] [--idle-ms MS] [--floor-ms MS] [--checkpoint]
[--finish-batch N]``.

A SQLite ledger file with ``--rows`` (default 1,000,000) settled attempts 100 to 200
days old (written straight into ``budget_holds``, with their operations, requests and
one event in ten) is pruned at ``RETENTION_DAYS=90`` by the real round
(:class:`budget.retention.LedgerRetention`: each step waits for an idle writer or the
floor, runs alone in its transaction; ``--checkpoint``: then a passive checkpoint
when still idle), while
``--concurrency`` tasks hold and settle through the real :class:`budget.ledger.Ledger`
on the same file. Beside it, in the same run, the baseline: the load runs ``--seconds``
(default 60) in 1-second windows, pruning on and off in turn (held after its step),
so both see the same machine, file and load (time held off does not count toward
the floor); then the round finishes at full speed,
nobody holding, ``--finish-batch`` rows a step (default 1,000: the batch only matters
while holds wait behind it; the finish is there for the size after).

Prints: hold+settle p50/p99 without and with pruning (goal: p99 no more than 10 % worse),
the prune's total time and rows/s, each pruning step's time on the writer thread
(p50/p99/max: how long a hold queued behind it can wait), the rows pruned during the
load, the database's size before and after (pages in use; SQLite keeps freed pages for
reuse until a VACUUM), and the goal's line, ``MET`` or ``SHORT``.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sqlite3
import statistics
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from functools import partial
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.ledger import pct, prices
from budget.config import LedgerConfig
from budget.kernel.clock import SystemClock
from budget.ledger import Ledger
from budget.retention import DEFAULT_BATCH, FLOOR_S, IDLE_S, LedgerRetention
from budget.storage.sql import retention
from budget.storage.sqlite.store import SqliteStore
from budget.storage.tables import create_schema
from budget.types import Origin, Usage

DAYS = 90
#: Seconds of each window with pruning on, then off (the baseline), in turn.
WINDOW_S = 1.0
#: The bodies of a round's steps (what is timed on the writer thread).
PRUNE_STEPS = (retention.prune_holds, retention.prune_events, retention.prune_plain)


def parse_args(argv: list[str]) -> argparse.Namespace:
    """The command line (``--help`` prints it; an unknown argument exits 2)."""
    parser = argparse.ArgumentParser(prog="bench/retention.py", description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000, help="old attempts to prune")
    parser.add_argument("--batch", type=int, default=DEFAULT_BATCH, help="RETENTION_BATCH_ROWS")
    parser.add_argument("--concurrency", type=int, default=4, help="hold+settle tasks")
    parser.add_argument("--seconds", type=float, default=60.0, help="seconds of load")
    parser.add_argument(
        "--idle-ms", type=float, default=IDLE_S * 1000, help="writer idle before a step, ms"
    )
    parser.add_argument(
        "--floor-ms", type=float, default=FLOOR_S * 1000, help="a step at least this often, ms"
    )
    parser.add_argument(
        "--checkpoint",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="a passive WAL checkpoint after a step when the writer is idle",
    )
    parser.add_argument(
        "--finish-batch", type=int, default=1000, help="rows a step once the load is over"
    )
    return parser.parse_args(argv)


def fill(path: Path, rows: int) -> None:
    """``rows`` settled attempts 100–200 days old, their operations and requests, and an
    event for one in ten (straight SQL: the ledger would take an hour to book them)."""
    rng = random.Random(7)
    now = datetime.now(UTC)
    conn = sqlite3.connect(path)
    chunk = 20_000
    for start in range(0, rows, chunk):
        holds, ops, reqs, events = [], [], [], []
        for i in range(start, min(rows, start + chunk)):
            at = now - timedelta(days=100 + rng.random() * 100)
            day, hour = at.strftime("%Y-%m-%d"), at.strftime("%Y-%m-%dT%H:00Z")
            hid, oid, rid = f"h{i:09d}", f"o{i:09d}", f"r{i:09d}"
            ts = at.timestamp()
            scopes = f'[["user", "{i % 500}"], ["global", ""]]'
            holds.append(
                (hid, oid, rid, i % 500, "chat", "test", "m", 900, 200, 1100, "settled", ts,
                 ts + 300, "UTC", hour, day, scopes, "old", ts + 2, 640, 640, 500, 0, 140, 0)
            )  # fmt: skip
            ops.append((oid, i % 500, "chat", ts, ts + 300, ts + 2, 10**6, 8, 1, 640, day, "old"))
            reqs.append((rid, oid, "fp", ts, day))
            if i % 10 == 0:
                events.append((ts, day, "refusal", "user_limit", "user", "day", str(i % 500)))
        conn.executemany(
            "INSERT INTO budget_holds (hold_id, operation_id, request_id, user_id, origin,"
            " provider, model, input_tokens, max_tokens, ceiling_musd, state, granted_at,"
            " expires_at, tz, hour_key, day_key, scopes, process_id, ended_at, actual_musd,"
            " list_actual_musd, usage_input, usage_cached_input, usage_output,"
            " usage_reasoning) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            holds,
        )
        conn.executemany(
            "INSERT INTO budget_operations (operation_id, user_id, origin, started_at,"
            " expires_at, ended_at, max_musd, max_requests, requests, committed_musd, day_key,"
            " process_id) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
            ops,
        )
        conn.executemany(
            "INSERT INTO budget_requests (request_id, operation_id, fingerprint, created_at,"
            " day_key) VALUES (?,?,?,?,?)",
            reqs,
        )
        conn.executemany(
            "INSERT INTO budget_events (at, day_key, kind, reason, level, win, scope)"
            " VALUES (?,?,?,?,?,?,?)",
            events,
        )
        conn.commit()
    conn.close()


def pages_in_use(path: Path) -> int:
    """Bytes of the file's pages holding data (page count less the free list)."""
    conn = sqlite3.connect(path)
    try:
        count, free, size = (
            conn.execute(f"PRAGMA {p}").fetchone()[0]
            for p in ("page_count", "freelist_count", "page_size")
        )
        return int((count - free) * size)
    finally:
        conn.close()


async def hold_settle(ledger: Ledger, user: int) -> float:
    """One hold+settle's time (seconds), as a chat attempt pays it."""
    op = await ledger.begin_operation(user, Origin.CHAT, max_musd=10**9, max_requests=10**6)
    req = await ledger.begin_request(op, uuid.uuid4().hex)
    t0 = time.perf_counter()
    h = await ledger.reserve(op, req, provider="test", model="m", input_tokens=1, max_tokens=9)
    await ledger.settle(h.hold_id, Usage(1, 0, 3))
    dt = time.perf_counter() - t0
    await ledger.end_operation(op)
    return dt


class GatedRetention(LedgerRetention):
    """The real round, held after a step while ``gate`` is closed (the baseline's
    windows; the time held does not count toward the floor)."""

    def __init__(self, ledger: Ledger, args: argparse.Namespace, gate: asyncio.Event) -> None:
        super().__init__(
            ledger.store,
            "UTC",
            SystemClock(),
            days=DAYS,
            batch=args.batch,
            idle_s=args.idle_ms / 1000,
            floor_s=args.floor_ms / 1000,
            checkpoint=args.checkpoint,
        )
        self.gate = gate

    async def pause(self) -> None:
        await super().pause()
        if not self.gate.is_set():
            await self.gate.wait()
            self._last = time.monotonic()


def timing_steps(ledger: Ledger, steps: list[float], rows: list[int]) -> None:
    """Time each pruning step's body on the writer thread into ``steps`` (seconds), its
    rows into ``rows``."""
    writer = ledger.store.writer
    assert writer is not None
    txn = writer.txn

    def timed(body: Any, cur: sqlite3.Cursor) -> Any:
        t0 = time.perf_counter()
        try:
            result = body(cur)
        finally:
            steps.append(time.perf_counter() - t0)
        rows.append(result.rows)
        return result

    async def timed_txn(body: Any, **how: Any) -> Any:
        if getattr(body, "func", None) in PRUNE_STEPS:
            body = partial(timed, body)
        return await txn(body, **how)

    writer.txn = timed_txn  # type: ignore[method-assign]


async def measure(
    ledger: Ledger, gate: asyncio.Event, tasks: int, seconds: float
) -> tuple[list[float], list[float]]:
    """``tasks`` loops of hold+settle for ``seconds`` while ``gate`` opens and closes
    every :data:`WINDOW_S`: the times of pairs begun with pruning on, and with it off."""
    on: list[float] = []
    off: list[float] = []
    end = time.perf_counter() + seconds

    async def worker(user: int) -> None:
        while time.perf_counter() < end:
            pruning = gate.is_set()
            (on if pruning else off).append(await hold_settle(ledger, 10_000 + user))

    async def toggle() -> None:
        while time.perf_counter() < end:
            gate.clear() if gate.is_set() else gate.set()
            await asyncio.sleep(WINDOW_S)

    await asyncio.gather(toggle(), *(worker(u) for u in range(tasks)))
    return on, off


def ms(values: list[float], q: float) -> str:
    return f"{pct(values, q) * 1000:.2f} ms"


async def run(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(dir=Path.cwd()) as d:
        path = Path(d) / "ledger.db"
        create_schema(path)
        t0 = time.perf_counter()
        fill(path, args.rows)
        print(f"filled {args.rows:,} old attempts in {time.perf_counter() - t0:.1f} s")
        size_before = pages_in_use(path)
        ledger = await open_ledger(path)
        for _ in range(500):  # warm-up
            await hold_settle(ledger, 1)
        steps: list[float] = []
        step_rows: list[int] = []
        timing_steps(ledger, steps, step_rows)
        gate = asyncio.Event()
        job = GatedRetention(ledger, args, gate)
        t0 = time.perf_counter()
        pruning = asyncio.create_task(job.run_round(claim=False))
        on, off = await measure(ledger, gate, args.concurrency, args.seconds)
        measured = list(steps)
        under_load = sum(step_rows)
        job.idle_s = 0.0  # the rest at full speed, nobody holding
        job.batch = max(job.batch, args.finish_batch)
        gate.set()
        rows = (await pruning).rows
        prune_s = time.perf_counter() - t0
        await ledger.close()
        size_after = pages_in_use(path)
    report(args, on, off, measured, under_load, rows, prune_s, (size_before, size_after))


def report(
    args: argparse.Namespace,
    on: list[float],
    off: list[float],
    steps: list[float],
    under_load: int,
    rows: dict[str, int],
    prune_s: float,
    sizes: tuple[int, int],
) -> None:
    """Print the figures (module docstring)."""
    total = sum(rows.values())
    worse = (pct(on, 0.99) / pct(off, 0.99) - 1) * 100
    print(
        f"concurrency {args.concurrency}, batch {args.batch} rows, idle {args.idle_ms:g} ms,"
        f" floor {args.floor_ms:g} ms, checkpoint when idle {'on' if args.checkpoint else 'off'},"
        f" RETENTION_DAYS={DAYS}, {args.seconds:.0f} s of load in {WINDOW_S:.0f} s windows"
    )
    print(
        f"baseline (no pruning): {len(off):,} hold+settle, p50 {ms(off, 0.5)}, p99 {ms(off, 0.99)}"
    )
    print(
        f"while pruning:         {len(on):,} hold+settle, p50 {ms(on, 0.5)}, p99 {ms(on, 0.99)}"
        f" ({worse:+.1f} % p99; goal ≤ +10 %)"
    )
    print(
        f"writer held per step under load ({len(steps):,} steps): p50 {ms(steps, 0.5)},"
        f" p99 {ms(steps, 0.99)}, max {max(steps) * 1000:.2f} ms"
        f" (mean {statistics.fmean(steps) * 1000:.2f} ms)"
    )
    floor = args.batch * 86_400_000 / args.floor_ms
    print(
        f"pruned during the load: {under_load:,} rows in {len(steps):,} steps"
        f" ({under_load / max(args.seconds / 2, 1):,.0f} rows/s of pruning windows;"
        f" the floor alone: {floor:,.0f} rows/day)"
    )
    print(
        f"pruned {total:,} rows in {prune_s:.1f} s (the load's windows, then at full speed,"
        f" {max(args.batch, args.finish_batch):,} rows a step):"
        f" {', '.join(f'{t} {n:,}' for t, n in rows.items())}"
    )
    print(
        f"database pages in use: {sizes[0] / 2**20:,.1f} MiB before,"
        f" {sizes[1] / 2**20:,.1f} MiB after (freed pages are reused; VACUUM returns them)"
    )
    verdict = "MET" if worse <= 10 else "SHORT"
    print(
        f"goal: hold+settle p99 while pruning <= +10 % over the baseline"
        f"   {verdict}   {worse:+.1f} %"
    )


async def open_ledger(path: Path) -> Ledger:
    """A started ledger on ``path`` (schema created when absent), auto-kill off, loose
    user limits, as ``bench/ledger.py`` runs it."""
    create_schema(path)
    cfg = LedgerConfig(
        user_max_inflight=10**6, user_max_per_minute=10**6, auto_kill_fraction=Decimal(0)
    )
    ledger = Ledger(SqliteStore(path, cfg, uuid.uuid4().hex), cfg, prices(), SystemClock())
    await ledger.start(run_sweeper=False)
    return ledger


def main(argv: list[str] | None = None) -> None:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
