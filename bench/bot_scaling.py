"""``python bench/bot.py --replicas N --backend postgres``: the burst of
``bench/bot.py`` (300 first messages from 300 new users at once, provider fakes answering
at once) on four deployments, in one run:

1. one polling process on SQLite (the default deployment; the baseline);
2. one process on SQLite in webhook mode (the webhook path's own cost);
3. one webhook replica on PostgreSQL;
4. ``N`` webhook replicas sharing that PostgreSQL database, the fake Bot API POSTing the
   updates round-robin (as the operator's proxy would).

PostgreSQL is a durable local server (``tests/support/pg.py``, fsync on), a fresh database per
deployment. Per row: answers/s (first update injected → last reply), its ratio to the
baseline, update→reply p50/p99, CPU ms per message in the bot processes (summed over the
replicas, ``bench/probe.py``) + in the database server's processes (``/proc``, Linux),
messages per core-second (1,000 / those two summed: what one core of CPU time answers,
the figure the machine's load moves least), and the bots' event-loop lag p99 during
the burst (the probe's lag ticker at 10 ms here: :data:`PROBE_ENV`). Every deployment
runs on the same machine: the replicas, the database server
and the driver share its cores, so ``N`` replicas on a 2-core machine cannot add
cores — the table says so, and its last lines compare the per-core figures.
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path

from bench.bot import (
    ADMIN,
    BURST,
    PROBE,
    Driver,
    Phase,
    cpu,
    start,
)
from bench.lag import ms, pct
from tests.support.harness import BotProcess, bot_environment, free_port
from tests.support.providers import FakeProviders
from tests.support.telegram import FakeTelegram

__all__ = ["scaling", "tree_cpu_s"]

#: The probe's loop-lag ticker pauses 10 ms here, not 1 ms (``bench/probe.py``): at 1 ms
#: it cost each process ~45 ms of CPU per second on this machine (an idle replica: 66 ms/s
#: with it, 21 ms/s at 10 ms; load ~9), charged to the messages of a burst by the second
#: and by the process — the slower deployments' and three replicas' most.
PROBE_ENV = {"KOPEK_PROBE_TICK_S": "0.01"}


def tree_cpu_s(root: int) -> float:
    """CPU seconds (user + system) of process ``root`` and its descendants, with what
    ``root`` reaped from exited children (Linux ``/proc``)."""
    tick = os.sysconf("SC_CLK_TCK")
    parents: dict[int, int] = {}
    times: dict[int, tuple[int, int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        pid = int(entry.name)
        parents[pid] = int(fields[1])
        times[pid] = (int(fields[11]) + int(fields[12]), int(fields[13]) + int(fields[14]))
    tree, grew = {root}, True
    while grew:
        more = {pid for pid, ppid in parents.items() if ppid in tree} - tree
        tree |= more
        grew = bool(more)
    own = sum(times[pid][0] for pid in tree if pid in times)
    reaped = times.get(root, (0, 0))[1]
    return (own + reaped) / tick


async def start_group(
    tg: FakeTelegram,
    providers: FakeProviders,
    tmp: Path,
    name: str,
    database_url: str | None,
    count: int,
) -> tuple[list[BotProcess], list[Path]]:
    """Start ``count`` Kopek processes inside the probe, at once: the polling process on
    a SQLite file (``database_url`` ``None``) or webhook replicas on ``database_url``,
    routed round-robin by ``tg``."""
    if database_url is None:
        proc, out = await start(tg, providers, tmp, "kopek", PROBE_ENV)
        return [proc], [out]
    procs, outs, urls = [], [], []
    for i in range(count):
        port = free_port()
        out = tmp / f"{name}-{i}.probe.json"
        env = bot_environment(
            telegram=tg,
            database_path=tmp / "unused.db",
            provider_base_urls={
                k: v for k, v in providers.base_urls.items() if k in ("groq", "deepseek")
            },
            extra={
                "DATABASE_URL": database_url,
                "ADMIN_IDS": str(ADMIN),
                "LOG_LEVEL": "INFO",
                "USER_MAX_PER_MINUTE": "100000",
                "USER_MAX_UPDATES_PER_MINUTE": "100000",
                "WEBHOOK_URL": "https://bench.example.org/hook",
                "WEBHOOK_SECRET": "bench-secret-0123456789abcdef",
                "WEBHOOK_LISTEN_PORT": str(port),
                "WEBHOOK_PATH": "/hook",
                **PROBE_ENV,
            },
        )
        procs.append(
            BotProcess(
                env,
                telegram=tg,
                log_dir=tmp / f"{name}-{i}-logs",
                argv=[sys.executable, str(PROBE), str(out), "-m", "bot"],
                ready_url=f"http://127.0.0.1:{port}/readyz",
            )
        )
        outs.append(out)
        urls.append(f"http://127.0.0.1:{port}/hook")
    await asyncio.gather(*(p.start() for p in procs))
    tg.route_webhook(urls)
    return procs, outs


async def burst_of(
    name: str,
    providers: FakeProviders,
    tmp: Path,
    database_url: str | None,
    count: int,
    server_pid: int | None = None,
) -> Phase:
    """The burst against one deployment (after a warm-up of 5 messages per process);
    with ``server_pid``, the database server's CPU during the burst too."""
    async with FakeTelegram() as tg:
        procs, outs = await start_group(tg, providers, tmp, name, database_url, count)
        d = Driver(tg, providers, procs, outs)
        try:
            for i in range(5 * count):  # warm-up: first imports, the tokenizer's load
                await d.say(10 + i, "warm up")
            before = tree_cpu_s(server_pid) if server_pid else 0.0
            phase = await d.burst(100_001)
            phase.server_cpu_s = tree_cpu_s(server_pid) - before if server_pid else 0.0
            return phase
        finally:
            await asyncio.gather(*(p.stop() for p in procs))


async def scaling(replicas: int) -> None:
    """Run the four deployments (see the module docstring) and print the table."""
    from tests.support.pg import start_server

    t_start = time.monotonic()
    server = await asyncio.to_thread(start_server, durable=True)
    rows: list[tuple[str, Phase]] = []
    try:
        with tempfile.TemporaryDirectory(prefix="kopek-bench-") as d:
            tmp = Path(d)
            pid = server.process.pid
            runs: list[tuple[str, str, str | None, int, int | None]] = [
                ("1 process, SQLite (polling)", "sqlite", None, 1, None),
                ("1 process, SQLite (webhook)", "hook", f"sqlite+aiosqlite:///{tmp}/w.db", 1, None),
                ("1 replica, PostgreSQL (webhook)", "pg1", "pg", 1, pid),
                (f"{replicas} replicas, PostgreSQL (webhook)", "pgN", "pg", replicas, pid),
            ]
            async with FakeProviders() as providers:
                for label, name, where, count, server_pid in runs:
                    if where == "pg":
                        where = await asyncio.to_thread(server.create_database, None, "bench")
                    phase = await burst_of(name, providers, tmp, where, count, server_pid)
                    rows.append((label, phase))
    finally:
        await asyncio.to_thread(server.stop)
    base = rows[0][1].rate
    print(
        f"bench/bot.py --replicas {replicas} --backend postgres: burst of {BURST} new users at"
        f" once, provider fakes answering at once, one run, {os.cpu_count()} CPUs"
    )
    print(
        f"{'':38}{'msgs/s':>8}{'vs SQLite':>11}{'answered':>10}{'p50 / p99 ms':>20}"
        f"{'CPU ms/msg bot + db':>21}{'msgs/core-s':>13}{'loop lag p99 ms':>17}"
    )
    for label, phase in rows:
        lat = f"{ms(pct(phase.latencies, 0.5))} / {ms(pct(phase.latencies, 0.99))}"
        db = f"{phase.server_cpu_s / BURST * 1000:.1f}" if phase.server_cpu_s else "-"
        costs = f"{cpu(phase, BURST)} + {db}"
        print(
            f"{label:38}{phase.rate:>8,.0f}{phase.rate / base * 100 if base else 0:>10.0f}%"
            f"{phase.answered:>10}{lat:>20}{costs:>21}{per_core(phase):>13,.0f}"
            f"{ms(pct(phase.lags, 0.99)):>17}"
        )
    for line in shares(rows, replicas):
        print(line)
    print(f"total run time {time.monotonic() - t_start:.0f} s")


def per_core(phase: Phase) -> float:
    """Messages answered per second of CPU time (bot processes + database server)."""
    spent = phase.cpu_s + phase.server_cpu_s
    return BURST / spent if spent else 0.0


def shares(rows: list[tuple[str, Phase]], replicas: int) -> list[str]:
    """The lines under the table: what the replicas share, the per-core comparison and
    goal 4's two lines (MET or SHORT)."""
    cores = os.cpu_count() or 1
    base, one, many = rows[0][1], rows[2][1], rows[3][1]
    core_one, core_many = per_core(one), per_core(many)
    kept = core_many / core_one * 100 if core_one else 0.0
    cpu_x = one.cpu_s / base.cpu_s if base.cpu_s else 0.0
    share = one.rate / base.rate * 100 if base.rate else 0.0

    def met(ok: bool) -> str:
        return "MET" if ok else "SHORT"

    return [
        f"all four deployments ran on the same {cores} cores: the {replicas} replicas, the"
        " database server and the driver shared them (more replicas add no core here)",
        f"per core: 1 replica {core_one:,.0f} msgs/core-s, {replicas} replicas"
        f" {core_many:,.0f} ({kept:.0f}% of one); 1 replica's bot CPU per message is"
        f" {cpu_x:.2f}x the SQLite process's",
        f"goal: 1 replica >= 50% of SQLite's msgs/s: {met(share >= 50)} ({share:.0f}%)",
        f"goal: {replicas} replicas no slower in total than one: {met(many.rate >= one.rate)}"
        f" ({many.rate:,.0f} vs {one.rate:,.0f} msgs/s; per core {kept:.0f}%)",
    ]
