"""Kopek beside a bare aiogram echo bot, in one run: ``python bench/bot.py``.

Both bots run as real processes (``python -m bot`` and ``tests/support/echo_bot.py``, each
inside ``bench/probe.py``) against the same kind of loopback fake Bot API
(``tests/support/telegram.py``, one fresh instance per bot, in this process); Kopek's
providers are the loopback fakes (Groq × 2 keys → DeepSeek), answering at once.

Kopek runs twice: **as installed** (the defaults of ``.env.example``: private chats
stream, ``STREAM_MODE_PRIVATE=draft``) and with streaming off
(``STREAM_MODE_PRIVATE=off``), the figures side by side. For the streamed answers the
table also gives update → first visible text (the first ``sendMessageDraft`` or
``sendMessage`` of the chat) and update → final text (the answer's ``sendMessage``),
and the drafts sent per answer. Printed side by side:

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
``sendMessage`` for that chat (both on ``time.monotonic()``). The goals, judged on
Kopek as installed and printed MET or SHORT at the end (``docs/benchmarks.md``): CPU per
burst message ≤ 2× the echo bot's and the burst ≥ 50 % of the echo bot's rate with every
message answered; sequential overhead (Kopek − echo) p50 ≤ 3 ms (p99 ≤ 10 ms); loop lag
p99 ≤ 5 ms during the burst; refusal p50 ≤ echo + 5 ms with 0 provider requests. Takes
25–60 s on this 2-core machine (longer under load).

``python bench/bot.py --replicas 3 --backend postgres``: the burst on SQLite, on one
PostgreSQL replica and on several, in one run (``bench/bot_scaling.py``).
``python bench/bot.py --media``: one user's text messages while 5 documents and 5 voice
notes of other users are in flight, beside the same user alone (``bench/bot_media.py``).
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

from bench.lag import longest_gc, ms, pct, split
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
#: what makes text visible in a private chat: a streamed draft, or the message itself
VISIBLE = ("sendMessageDraft", "sendMessage")


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
    #: the ticker's samples in the phase (``bench/lag.py``), the idle loop's lags before it
    ticks: list[list[float]] = field(default_factory=list)
    idle: list[float] = field(default_factory=list)
    gc: str = "-"  # the collector's longest pass on the loop thread (``bench/lag.py``)
    #: update → the chat's first draft or message (streamed answers), seconds
    first_visible: list[float] = field(default_factory=list)
    drafts: int = 0
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
        self.gcs: list[list[float]] = []

    async def dump(self) -> tuple[tuple[int, int, float], list[list[float]]]:
        """Ask every process's probe for its counters: ((commits, fsync'd commits, CPU s)
        so far, summed, lag samples of all of them since the last dump)."""
        self._dumps += 1
        for proc in self.procs:
            assert proc.pid is not None
            os.kill(proc.pid, signal.SIGUSR1)
        totals = [0, 0, 0.0]
        lags: list[list[float]] = []
        for out in self.outs:
            counts, more = await self._read(out)
            totals = [totals[0] + counts[0], totals[1] + counts[1], totals[2] + counts[2]]
            lags += more
        return (int(totals[0]), int(totals[1]), float(totals[2])), lags

    async def _read(self, out: Path) -> tuple[tuple[int, int, float], list[list[float]]]:
        deadline = time.monotonic() + 10
        while True:
            try:
                body = json.loads(out.read_text())  # noqa: ASYNC240 - a small local file
                if body["seq"] >= self._dumps:
                    counts = int(body["commits"]), int(body["synced"]), float(body["cpu_s"])
                    self.gcs += body.get("gcs", [])
                    return counts, body["lags"]
            except (OSError, ValueError):
                pass
            if time.monotonic() > deadline:
                raise TimeoutError("the probe did not answer SIGUSR1")
            await asyncio.sleep(0.01)

    def _replies_since(
        self, since: int, chats: set[int], methods: tuple[str, ...] = ("sendMessage",)
    ) -> dict[int, float]:
        """First arrival (monotonic) per chat of a request of ``methods`` since ``since``."""
        first: dict[int, float] = {}
        for r in self.tg.requests()[since:]:
            if r.method in methods and isinstance(r.chat_id, int) and r.chat_id in chats:
                first.setdefault(r.chat_id, r.monotonic)
        return first

    def _visible(self, since: int, starts: dict[int, float]) -> tuple[list[float], int]:
        """Update → first visible text per chat (a draft or the message) since ``since``,
        and the drafts sent to those chats."""
        chats = set(starts)
        first = self._replies_since(since, chats, VISIBLE)
        drafts = sum(
            1
            for r in self.tg.requests()[since:]
            if r.method == "sendMessageDraft" and r.chat_id in chats
        )
        return [at - starts[chat] for chat, at in first.items()], drafts

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
        await self.dump()
        await asyncio.sleep(0.5)  # the idle loop's lag, in the same run
        commits0, idle = await self.dump()
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
        phase.ticks = [tick for tick in lags if t0 <= tick[0] <= end]
        phase.lags, phase.idle = [t[1] for t in phase.ticks], [t[1] for t in idle]
        phase.gc = longest_gc(self.gcs, t0, end)
        phase.first_visible, phase.drafts = self._visible(since, dict.fromkeys(users, t0))
        return phase

    async def sequential(self, user: int, n: int, text: str) -> Phase:
        """``n`` messages from ``user``, each after the previous reply."""
        commits0, _ = await self.dump()
        requests0 = len(self.providers.requests)
        phase = Phase(sent=n)
        t0 = time.monotonic()
        for i in range(n):
            since = len(self.tg.requests())
            start = time.monotonic()
            latency, reply = await self.say(user, f"{text} #{i}")
            phase.latencies.append(latency)
            visible, drafts = self._visible(since, {user: start})
            phase.first_visible += visible
            phase.drafts += drafts
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
    tg: FakeTelegram,
    providers: FakeProviders,
    tmp: Path,
    name: str,
    more_env: dict[str, str] | None = None,
) -> tuple[BotProcess, Path]:
    """Start one bot inside the probe (``kopek``: as installed, streaming in private
    chats; ``kopek-off``: streaming off; ``echo``), with ``more_env`` in its environment;
    returns it and the probe's output file."""
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
            **(more_env or {}),
        },
    )
    if name == "kopek":  # as installed: the streaming modes of .env.example (the defaults)
        env.pop("STREAM_MODE_PRIVATE")
        env.pop("STREAM_MODE_GROUP")
    target = ["-m", "bot"] if name.startswith("kopek") else [str(ECHO)]
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


def _p(values: Sequence[float]) -> str:
    """p50 / p99 in ms."""
    return f"{ms(pct(values, 0.5))} / {ms(pct(values, 0.99))}"


def report(echo: dict[str, Phase], kopek: dict[str, Phase], off: dict[str, Phase]) -> list[str]:
    """The side-by-side table: the echo bot, Kopek as installed, Kopek without streaming."""
    eb, kb, ob = echo["burst"], kopek["burst"], off["burst"]
    es, ks, os_ = echo["sequential"], kopek["sequential"], off["sequential"]
    w = 18

    def row(label: str, e: str, k: str, o: str, note: str = "") -> str:
        return f"{label:44}{e:>{w}}{k:>{w}}{o:>{w}}   {note}".rstrip()

    def vs(kopek_rate: float) -> str:
        return f"{kopek_rate / eb.rate * 100 if eb.rate else 0:.0f}%"

    def over(phase: Phase, q: float) -> float:
        return pct(phase.latencies, q) - pct(es.latencies, q)

    lines = [
        row("", "echo bot", "Kopek", "streaming off", "Kopek vs echo (target)"),
        row(
            "burst, 300 new users at once: msgs/s",
            f"{eb.rate:,.0f}",
            f"{kb.rate:,.0f}",
            f"{ob.rate:,.0f}",
            f"{vs(kb.rate)} / off {vs(ob.rate)} (>= 50%)",
        ),
        row("  answered", str(eb.answered), str(kb.answered), str(ob.answered), f"(all {BURST})"),
        row(
            "  update->final text p50 / p99 ms",
            _p(eb.latencies),
            _p(kb.latencies),
            _p(ob.latencies),
        ),
        row("  update->first visible text p50 / p99 ms", "-", _p(kb.first_visible), "-"),
        row("  drafts per answer", "-", f"{kb.drafts / max(1, kb.answered):.2f}", "-"),
        row(
            "  event-loop lag p99 in the bot, ms",
            ms(pct(eb.lags, 0.99)),
            ms(pct(kb.lags, 0.99)),
            ms(pct(ob.lags, 0.99)),
            "(<= 5 ms)",
        ),
        row("  lag p99 = own CPU/no core/GIL, ms", *(split(p.ticks) for p in (eb, kb, ob))),
        row(
            "  idle lag p99; longest GC pass, CPU ms",
            *(f"{ms(pct(p.idle, 0.99))}; {p.gc}" for p in (eb, kb, ob)),
        ),
        row(COMMITS, per(eb, BURST), per(kb, BURST), per(ob, BURST)),
        row(
            "  CPU ms per message in the bot",
            cpu(eb, BURST),
            cpu(kb, BURST),
            cpu(ob, BURST),
            f"{ratio(kb, eb):.1f}x / off {ratio(ob, eb):.1f}x echo (<= 2x)",
        ),
        row(
            "sequential, 30 from one user: p50 / p99 ms",
            _p(es.latencies),
            _p(ks.latencies),
            _p(os_.latencies),
            f"+{ms(over(ks, 0.5))} / +{ms(over(ks, 0.99))} ms; off +{ms(over(os_, 0.5))} / "
            f"+{ms(over(os_, 0.99))} ms (<= 3 / 10)",
        ),
        row("  update->first visible text p50 / p99 ms", "-", _p(ks.first_visible), "-"),
        row("  drafts per answer", "-", f"{ks.drafts / max(1, ks.answered):.2f}", "-"),
        row(COMMITS, per(es, SEQUENTIAL), per(ks, SEQUENTIAL), per(os_, SEQUENTIAL)),
        row(
            "  CPU ms per message in the bot",
            cpu(es, SEQUENTIAL),
            cpu(ks, SEQUENTIAL),
            cpu(os_, SEQUENTIAL),
        ),
    ]
    base = pct(es.latencies, 0.5)
    for name, phase in kopek.items():
        if not name.startswith("refusal"):
            continue
        p50, p99 = pct(phase.latencies, 0.5), pct(phase.latencies, 0.99)
        lines.append(
            row(
                name + ": p50 / p99 ms",
                "-",
                ms(p50) + " / " + ms(p99),
                "",
                f"+{ms(p50 - base)} ms over echo p50 (<= 5); "
                f"{phase.provider_requests} provider requests (0)",
            )
        )
        lines.append(row(COMMITS + "; reply", "", per(phase, phase.sent), "", repr(phase.sample)))
    return lines + goals(echo, kopek)


def ratio(phase: Phase, echo: Phase) -> float:
    """CPU per message of ``phase`` ÷ the echo bot's (same number of messages)."""
    return phase.cpu_s / echo.cpu_s if echo.cpu_s else 0.0


def goals(echo: dict[str, Phase], kopek: dict[str, Phase]) -> list[str]:
    """The goals' lines, judged on Kopek as installed (streaming on)."""
    eb, kb = echo["burst"], kopek["burst"]
    es, ks = echo["sequential"], kopek["sequential"]

    def line(goal: str, met: bool, figure: str) -> str:
        return f"goal {goal:58}{'MET' if met else 'SHORT'}   {figure}"

    rate = kb.rate / eb.rate if eb.rate else 0.0
    over = pct(ks.latencies, 0.5) - pct(es.latencies, 0.5)
    lag = pct(kb.lags, 0.99)
    return [
        line(
            "1: CPU per burst message <= 2x the echo bot's",
            ratio(kb, eb) <= 2.0,
            f"{ratio(kb, eb):.2f}x ({cpu(kb, BURST)} vs {cpu(eb, BURST)} ms)",
        ),
        line(
            "1: burst >= 50% of the echo bot's rate, all answered",
            rate >= 0.5 and kb.answered == BURST,
            f"{rate * 100:.0f}% ({kb.rate:,.0f} vs {eb.rate:,.0f} msgs/s), {kb.answered} answered",
        ),
        line("2: sequential overhead p50 <= 3 ms over echo", over <= 0.003, f"+{ms(over)} ms"),
        line("3: event-loop lag p99 <= 5 ms in the burst", lag <= 0.005, f"{ms(lag)} ms"),
    ]


async def main(argv: Sequence[str] | None = None) -> None:
    """Measure both bots and print the table (or, with ``--replicas``, the burst on
    SQLite, PostgreSQL and several PostgreSQL replicas)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--replicas", type=int, default=None, help="webhook replicas on PostgreSQL")
    parser.add_argument("--backend", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--media", action="store_true", help="text beside media in flight")
    args = parser.parse_args(argv)
    if args.media:
        from bench.bot_media import media_scenario

        await media_scenario()
        return
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
            off = await measure("kopek-off", providers, tmp)
    print(
        "bench/bot.py: Kopek (as installed: private chats stream; and with streaming off) "
        "and a bare aiogram echo bot against the same fake Bot API, provider fakes "
        "answering at once, one run"
    )
    for line in report(echo, kopek, off):
        print(line)
    print(f"total run time {time.monotonic() - t_start:.0f} s")


if __name__ == "__main__":
    asyncio.run(main())
