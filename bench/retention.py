"""Retention benchmark: ``.venv/bin/python bench/retention.py [--rows N] [--batch N]``.

A SQLite ledger file with ``--rows`` (default 1,000,000) settled attempts 100 to 200
days old (written straight into ``budget_holds``, with their operations, requests and
one event in ten) is pruned at ``RETENTION_DAYS=90`` by the ledger's own steps
(:func:`budget.storage.sql.retention.prune_holds` and friends, each one grouped step of
the writer, as :class:`budget.retention.LedgerRetention` runs them), while
``--concurrency`` tasks hold and settle through the real :class:`budget.ledger.Ledger`
on the same file. Beside it, in the same run, the baseline: the same hold+settle load
on the same file for the same number of pairs, with no pruning.

Prints: hold+settle p50/p99 without and with pruning (goal: p99 no more than 10 % worse),
the prune's total time and rows/s, each pruning step's time on the writer thread
(p50/p99/max: how long a hold queued behind it can wait), and the database's size
before and after (pages in use; SQLite keeps freed pages for reuse until a VACUUM).
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
from budget.retention import DEFAULT_BATCH, PAUSE_S, LedgerRetention
from budget.storage.sql import retention
from budget.storage.sqlite.store import SqliteStore
from budget.storage.tables import create_schema
from budget.types import Origin, Usage

DAYS = 90
#: The bodies of a round's steps (what is timed on the writer thread).
PRUNE_STEPS = (retention.prune_holds, retention.prune_events, retention.prune_plain)


def parse_args(argv: list[str]) -> argparse.Namespace:
    """The command line (``--help`` prints it; an unknown argument exits 2)."""
    parser = argparse.ArgumentParser(prog="bench/retention.py", description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000, help="old attempts to prune")
    parser.add_argument("--batch", type=int, default=DEFAULT_BATCH, help="RETENTION_BATCH_ROWS")
    parser.add_argument("--concurrency", type=int, default=4, help="hold+settle tasks")
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


async def load(ledger: Ledger, tasks: int, until: asyncio.Event | None, pairs: int) -> list[float]:
    """``tasks`` loops of hold+settle: until ``until`` is set, or ``pairs`` in all."""
    times: list[float] = []

    async def worker(user: int) -> None:
        while (until is not None and not until.is_set()) or (until is None and len(times) < pairs):
            times.append(await hold_settle(ledger, 10_000 + user))

    await asyncio.gather(*(worker(u) for u in range(tasks)))
    return times


async def prune(ledger: Ledger, batch: int, steps: list[float]) -> dict[str, int]:
    """A round of :class:`budget.retention.LedgerRetention` at RETENTION_DAYS=90, each
    of its steps timed on the writer thread."""
    writer = ledger.store.writer
    assert writer is not None
    txn = writer.txn

    def timed(body: Any, cur: sqlite3.Cursor) -> Any:
        t0 = time.perf_counter()
        try:
            return body(cur)
        finally:
            steps.append(time.perf_counter() - t0)

    async def timed_txn(body: Any, **how: Any) -> Any:
        if getattr(body, "func", None) in PRUNE_STEPS:
            body = partial(timed, body)
        return await txn(body, **how)

    writer.txn = timed_txn  # type: ignore[method-assign]
    try:
        job = LedgerRetention(ledger.store, "UTC", SystemClock(), days=DAYS, batch=batch)
        return (await job.run_round(claim=False)).rows
    finally:
        writer.txn = txn  # type: ignore[method-assign]


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
        await load(ledger, args.concurrency, None, 500)  # warm-up
        done = asyncio.Event()
        steps: list[float] = []
        t0 = time.perf_counter()
        pruning = asyncio.create_task(prune(ledger, args.batch, steps))
        loaded = asyncio.create_task(load(ledger, args.concurrency, done, 0))
        rows = await pruning
        prune_s = time.perf_counter() - t0
        done.set()
        with_prune = await loaded
        baseline = await load(ledger, args.concurrency, None, len(with_prune))
        await ledger.close()
        size_after = pages_in_use(path)
    total = sum(rows.values())
    base99, prune99 = pct(baseline, 0.99), pct(with_prune, 0.99)
    print(
        f"concurrency {args.concurrency}, batch {args.batch} rows, pause {PAUSE_S * 1000:.0f} ms,"
        f" RETENTION_DAYS={DAYS}"
    )
    print(
        f"baseline (no pruning):  {len(baseline):,} hold+settle, p50 {ms(baseline, 0.5)},"
        f" p99 {ms(baseline, 0.99)}"
    )
    print(
        f"while pruning:          {len(with_prune):,} hold+settle, p50 {ms(with_prune, 0.5)},"
        f" p99 {ms(with_prune, 0.99)} ({(prune99 / base99 - 1) * 100:+.1f} % p99; goal ≤ +10 %)"
    )
    print(
        f"pruned {total:,} rows in {prune_s:.1f} s ({total / prune_s:,.0f} rows/s):"
        f" {', '.join(f'{t} {n:,}' for t, n in rows.items())}"
    )
    print(
        f"writer held per step ({len(steps):,} steps): p50 {ms(steps, 0.5)},"
        f" p99 {ms(steps, 0.99)}, max {max(steps) * 1000:.2f} ms"
        f" (mean {statistics.fmean(steps) * 1000:.2f} ms)"
    )
    print(
        f"database pages in use: {size_before / 2**20:,.1f} MiB before,"
        f" {size_after / 2**20:,.1f} MiB after (freed pages are reused; VACUUM returns them)"
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
