"""Kopek beside a bare aiogram echo bot, in one run: ``python bench/bot.py``.

Both bots run as real processes (``python -m bot`` and ``tests/support/echo_bot.py``, each
inside ``bench/probe.py``) against the same kind of loopback fake Bot API
(``tests/support/telegram.py``, one fresh instance per bot, in this process); Kopek's
providers are the loopback fakes (Groq × 2 keys → DeepSeek), answering at once.
Printed side by side:

* **burst**: 300 first messages from 300 new users injected at once: messages/s (first
  update injected → last reply arrived) and update→reply p50/p99;
* **sequential**: 30 messages from one user, each sent when the previous reply came;
* **refusals** (Kopek only; compared with the echo bot's sequential p50): under /kill,
  past a user limit ($0), and ``busy`` (a user limit that one in-flight hold
  fills), 30 each, with the provider requests they caused (must be 0);
* **event-loop lag** p99 inside each bot process during the burst (a 1 ms ticker);
* **commits per message** (SQLite ``COMMIT`` statements in the bot process ÷ messages),
  and in brackets the fsync'd ones (commits under ``synchronous=FULL``);
* **CPU ms per message**: the bot process's CPU time (all threads) ÷ messages — the
  figure that other processes loading the shared machine do not inflate.

Update→reply = from the driver injecting the update to the fake Bot API receiving the
``sendMessage`` for that chat (both on ``time.monotonic()``). Targets:
overhead (Kopek − echo sequential) p50 ≤ 3 ms and p99 ≤ 10 ms; burst ≥ 25 % of the echo
rate with every message answered; refusal p50 ≤ echo + 5 ms with 0 provider requests;
loop lag p99 ≤ 5 ms during the burst. Takes about a minute.

``python bench/bot.py --replicas 3 --backend postgres``: the burst on SQLite,
on one PostgreSQL replica and on several, in one run (``bench/bot_scaling.py``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support.harness import REPO_ROOT, BotProcess, bot_environment, wait_provider_requests
from tests.support.providers import FakeProviders
from tests.support.telegram import FakeTelegram

PROBE = REPO_ROOT / "bench" / "probe.py"
ECHO = REPO_ROOT / "tests" / "support" / "echo_bot.py"
ADMIN = 1
BURST = 300
SEQUENTIAL = 30
REFUSALS = 30
COMMITS = "  commits (fsync'd) per message"


def pct(values: Sequence[float], q: float) -> float:
    """The q-quantile (0..1) of ``values`` (nearest rank; 0.0 for none)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def ms(seconds: float) -> str:
    """Seconds as milliseconds, one decimal."""
    return f"{seconds * 1000:.1f}"


@dataclass
class Phase:
    """What one phase measured."""

    latencies: list[float] = field(default_factory=list)
    elapsed_s: float = 0.0
    answered: int = 0
    sent: int = 0
    commits: int = 0
    synced: int = 0
    cpu_s: float = 0.0
    lags: list[float] = field(default_factory=list)
    provider_requests: int = 0
    sample: str = ""
    server_cpu_s: float = 0.0

    @property
    def rate(self) -> float:
        """Messages answered per second."""
        return self.answered / self.elapsed_s if self.elapsed_s else 0.0


class Driver:
    """One bot process under measurement and the fakes it talks to."""

    def __init__(
        self,
        tg: FakeTelegram,
        providers: FakeProviders,
        proc: BotProcess | Sequence[BotProcess],
        out: Path | Sequence[Path],
    ) -> None:
        self.tg = tg
        self.providers = providers
        self.procs = [proc] if isinstance(proc, BotProcess) else list(proc)
        self.outs = [out] if isinstance(out, Path) else list(out)
        self._dumps = 0
        self._cursor = 0

    async def dump(self) -> tuple[tuple[int, int, float], list[tuple[float, float]]]:
        """Ask every process's probe for its counters: ((commits, fsync'd commits, CPU s)
        so far, summed, lag samples of all of them since the last dump)."""
        self._dumps += 1
        for proc in self.procs:
            assert proc.pid is not None
            os.kill(proc.pid, signal.SIGUSR1)
        totals = [0, 0, 0.0]
        lags: list[tuple[float, float]] = []
        for out in self.outs:
            counts, more = await self._read(out)
            totals = [totals[0] + counts[0], totals[1] + counts[1], totals[2] + counts[2]]
            lags += more
        return (int(totals[0]), int(totals[1]), float(totals[2])), lags

    async def _read(self, out: Path) -> tuple[tuple[int, int, float], list[tuple[float, float]]]:
        deadline = time.monotonic() + 10
        while True:
            try:
                body = json.loads(out.read_text())  # noqa: ASYNC240 - a small local file
                if body["seq"] >= self._dumps:
                    counts = int(body["commits"]), int(body["synced"]), float(body["cpu_s"])
                    return counts, [(t, v) for t, v in body["lags"]]
            except (OSError, ValueError):
                pass
            if time.monotonic() > deadline:
                raise TimeoutError("the probe did not answer SIGUSR1")
            await asyncio.sleep(0.01)

    def _replies_since(self, since: int, chats: set[int]) -> dict[int, float]:
        """First sendMessage arrival (monotonic) per chat among requests since ``since``."""
        first: dict[int, float] = {}
        for r in self.tg.requests()[since:]:
            if r.method == "sendMessage" and isinstance(r.chat_id, int) and r.chat_id in chats:
                first.setdefault(r.chat_id, r.monotonic)
        return first

    async def say(self, user: int, text: str, timeout: float = 60.0) -> tuple[float, str]:  # noqa: ASYNC109 - bench deadline
        """Send one message and wait for the first reply in that chat: (latency s, text)."""
        since = len(self.tg.requests())
        mark = self.tg.mark()
        t0 = time.monotonic()
        self.tg.inject_message(user, text)

        def probe() -> float | None:
            got = self._replies_since(since, {user})
            return got.get(user)

        at = await self.tg.wait_until(probe, timeout=timeout)
        sent = self.tg.sent_events(user, since=mark)
        return at - t0, sent[0].text if sent else ""

    async def burst(self, first_user: int) -> Phase:
        """``BURST`` new users at once."""
        users = list(range(first_user, first_user + BURST))
        chats = set(users)
        commits0, _ = await self.dump()
        since = len(self.tg.requests())
        t0 = time.monotonic()
        for u in users:
            self.tg.inject_message(u, f"hello, I am user {u}; what is two plus two?")
        phase = Phase(sent=BURST)

        def probe() -> dict[int, float] | None:
            got = self._replies_since(since, chats)
            return got if len(got) == len(chats) else None

        try:
            got = await self.tg.wait_until(probe, timeout=180)
        except TimeoutError:
            got = self._replies_since(since, chats)
        commits1, lags = await self.dump()
        end = max(got.values(), default=t0)
        phase.latencies = [at - t0 for at in got.values()]
        phase.answered = len(got)
        phase.elapsed_s = end - t0
        phase.commits = commits1[0] - commits0[0]
        phase.synced = commits1[1] - commits0[1]
        phase.cpu_s = commits1[2] - commits0[2]
        phase.lags = [v for t, v in lags if t0 <= t <= end]
        return phase

    async def sequential(self, user: int, n: int, text: str) -> Phase:
        """``n`` messages from ``user``, each after the previous reply."""
        commits0, _ = await self.dump()
        requests0 = len(self.providers.requests)
        phase = Phase(sent=n)
        t0 = time.monotonic()
        for i in range(n):
            latency, reply = await self.say(user, f"{text} #{i}")
            phase.latencies.append(latency)
            phase.answered += 1
            if i == 0:
                phase.sample = " ".join(reply.split())[:70]
        phase.elapsed_s = time.monotonic() - t0
        commits1, _ = await self.dump()
        phase.commits = commits1[0] - commits0[0]
        phase.synced = commits1[1] - commits0[1]
        phase.cpu_s = commits1[2] - commits0[2]
        phase.provider_requests = len(self.providers.requests) - requests0
        return phase


async def start(
    tg: FakeTelegram, providers: FakeProviders, tmp: Path, name: str
) -> tuple[BotProcess, Path]:
    """Start one bot inside the probe; returns it and the probe's output file."""
    out = tmp / f"{name}.probe.json"
    env = bot_environment(
        telegram=tg,
        database_path=tmp / f"{name}.db",
        provider_base_urls={
            k: v for k, v in providers.base_urls.items() if k in ("groq", "deepseek")
        },
        extra={
            "ADMIN_IDS": str(ADMIN),
            "LOG_LEVEL": "INFO",
            # one user sends 30 messages in a few seconds: the per-user rates are not measured
            "USER_MAX_PER_MINUTE": "100000",
            "USER_MAX_UPDATES_PER_MINUTE": "100000",
        },
    )
    target = ["-m", "bot"] if name == "kopek" else [str(ECHO)]
    proc = BotProcess(
        env,
        telegram=tg,
        log_dir=tmp / f"{name}-logs",
        argv=[sys.executable, str(PROBE), str(out), *target],
    )
    await proc.start()
    return proc, out


async def measure(name: str, providers: FakeProviders, tmp: Path) -> dict[str, Phase]:
    """Every phase against one bot; refusals only for Kopek."""
    results: dict[str, Phase] = {}
    async with FakeTelegram() as tg:
        proc, out = await start(tg, providers, tmp, name)
        d = Driver(tg, providers, proc, out)
        try:
            for i in range(5):  # warm-up: first imports, the tokenizer's load
                await d.say(10 + i, "warm up")
            results["burst"] = await d.burst(100_001)
            results["sequential"] = await d.sequential(200_001, SEQUENTIAL, "how are you?")
            if name == "kopek":
                await refusals(d, results)
        finally:
            await proc.stop()
    return results


async def refusals(d: Driver, results: dict[str, Phase]) -> None:
    """Kill, user limit, busy: each ``REFUSALS`` messages from one user."""
    await d.say(ADMIN, "/kill bench")
    results["refusal: kill"] = await d.sequential(300_001, REFUSALS, "refuse me")
    await d.say(ADMIN, "/unkill")
    # Open both free keys' breakers (one 429 each, an hour's Retry-After): later
    # messages go straight to the paid anchor, where money limits apply.
    d.providers.script("groq", {"status": 429, "retry_after": "3600"})
    d.providers.script("groq", {"status": 429, "retry_after": "3600"})
    await d.say(300_002, "open the free keys' breakers")
    await d.say(ADMIN, "/limit user 300003 day 0")
    results["refusal: user limit"] = await d.sequential(300_003, REFUSALS, "over my limit")
    # busy: one slow answer holds most of a $0.00055 user limit meanwhile
    await d.say(ADMIN, "/limit user 300004 day 0.00055")
    d.providers.script("deepseek", {"delay_s": 10})
    before = len(d.providers.requests)
    slow_since = len(d.tg.requests())
    d.tg.inject_message(300_004, "a slow question")
    await wait_provider_requests(d.providers, before + 1)
    results["refusal: busy"] = await d.sequential(300_004, REFUSALS, "while one is in flight")

    def slow_done() -> bool:
        return 300_004 in d._replies_since(slow_since, {300_004})

    await d.tg.wait_until(slow_done, timeout=30)


def per(phase: Phase, n: int) -> str:
    """Commits per message, the fsync'd ones in brackets."""
    return f"{phase.commits / n:.2f} ({phase.synced / n:.2f})"


def cpu(phase: Phase, n: int) -> str:
    """The bot's CPU time per message, ms."""
    return f"{phase.cpu_s / n * 1000:.1f}"


def report(echo: dict[str, Phase], kopek: dict[str, Phase]) -> list[str]:
    """The side-by-side table."""
    eb, kb = echo["burst"], kopek["burst"]
    es, ks = echo["sequential"], kopek["sequential"]
    lines = [
        f"{'':44}{'echo bot':>18}{'Kopek':>18}   Kopek vs echo (target)",
        f"{'burst, 300 new users at once: msgs/s':44}{eb.rate:>18,.0f}{kb.rate:>18,.0f}   "
        f"{kb.rate / eb.rate * 100 if eb.rate else 0:.0f}% (>= 25%)",
        f"{'  answered':44}{eb.answered:>18}{kb.answered:>18}   (all {BURST})",
        f"{'  update->reply p50 / p99 ms':44}"
        f"{ms(pct(eb.latencies, 0.5)) + ' / ' + ms(pct(eb.latencies, 0.99)):>18}"
        f"{ms(pct(kb.latencies, 0.5)) + ' / ' + ms(pct(kb.latencies, 0.99)):>18}",
        f"{'  event-loop lag p99 in the bot, ms':44}{ms(pct(eb.lags, 0.99)):>18}"
        f"{ms(pct(kb.lags, 0.99)):>18}   (<= 5 ms)",
        f"{COMMITS:44}{per(eb, BURST):>18}{per(kb, BURST):>18}",
        f"{'  CPU ms per message in the bot':44}{cpu(eb, BURST):>18}{cpu(kb, BURST):>18}",
        f"{'sequential, 30 from one user: p50 / p99 ms':44}"
        f"{ms(pct(es.latencies, 0.5)) + ' / ' + ms(pct(es.latencies, 0.99)):>18}"
        f"{ms(pct(ks.latencies, 0.5)) + ' / ' + ms(pct(ks.latencies, 0.99)):>18}   "
        f"+{ms(pct(ks.latencies, 0.5) - pct(es.latencies, 0.5))} / "
        f"+{ms(pct(ks.latencies, 0.99) - pct(es.latencies, 0.99))} ms (<= 3 / 10)",
        f"{COMMITS:44}{per(es, SEQUENTIAL):>18}{per(ks, SEQUENTIAL):>18}",
    ]
    base = pct(es.latencies, 0.5)
    for name, phase in kopek.items():
        if not name.startswith("refusal"):
            continue
        p50, p99 = pct(phase.latencies, 0.5), pct(phase.latencies, 0.99)
        lines.append(
            f"{name + ': p50 / p99 ms':44}{'-':>18}{ms(p50) + ' / ' + ms(p99):>18}   "
            f"+{ms(p50 - base)} ms over echo p50 (<= 5); "
            f"{phase.provider_requests} provider requests (0)"
        )
        lines.append(
            f"{COMMITS + '; reply':44}{'':>18}{per(phase, phase.sent):>18}   {phase.sample!r}"
        )
    return lines


async def main(argv: Sequence[str] | None = None) -> None:
    """Measure both bots and print the table (or, with ``--replicas``, the burst on
    SQLite, PostgreSQL and several PostgreSQL replicas)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--replicas", type=int, default=None, help="webhook replicas on PostgreSQL")
    parser.add_argument("--backend", choices=("sqlite", "postgres"), default="sqlite")
    args = parser.parse_args(argv)
    if args.replicas is not None or args.backend == "postgres":
        if args.backend != "postgres" or (args.replicas or 0) < 1:
            parser.error("--replicas N (N >= 1) goes with --backend postgres")
        from bench.bot_scaling import scaling

        await scaling(args.replicas)
        return
    t_start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="kopek-bench-") as d:
        tmp = Path(d)
        async with FakeProviders() as providers:
            echo = await measure("echo", providers, tmp)
            kopek = await measure("kopek", providers, tmp)
    print(
        "bench/bot.py: Kopek and a bare aiogram echo bot against the same fake Bot API, "
        "provider fakes answering at once, one run"
    )
    for line in report(echo, kopek):
        print(line)
    print(f"total run time {time.monotonic() - t_start:.0f} s")


if __name__ == "__main__":
    asyncio.run(main())
