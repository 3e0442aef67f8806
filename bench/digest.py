"""Digest benchmark: N users over 240 channels, free-tier limits, virtual time.

Run: ``.venv/bin/python bench/digest.py [--users 100] [--concurrency 4]``

What is real and what is simulated:

* real: :class:`scheduler.runner.DigestRunner` (due users, pacing, single-flight cache in
  SQLite, ledger operations, delivery bookkeeping), :class:`scheduler.sources.tme.TmeClient` and
  the page parser — the 240 channels are pages generated from the saved markup
  ``tests/fixtures/telegram_html/any2feed_full.html`` (channel name, post ids and texts
  varied deterministically), served through ``httpx.MockTransport``;
* simulated in-process (behind the ``SummaryBackend`` protocol, not the HTTP fakes — the
  fakes run on wall-clock time): the provider ladder with token buckets on the virtual
  clock — Groq 12,000 tokens/min per key × 2 keys, Mistral 20,000, Cerebras 60,000
  (free), DeepSeek paid and unlimited — choosing providers like ``llm.cascade.cascade`` (first
  free provider whose remaining tokens cover input + max_tokens; the paid anchor only
  when ``allow_paid``), with per-provider latencies;
* time: :class:`tests.support.clocks.VirtualClock` — sleeps advance virtual time, so the
  run takes seconds.

Two runs on the same input: *paced* (the runner's pacing, stagger 0: pacing decides
when to send) and *baseline* (fixed 10 s stagger, no pacing: every request may spill
onto the paid anchor, as a chat request would). Lower bound on makespan = total tokens
consumed ÷ total free tokens per minute (104,000).
"""

from __future__ import annotations

import argparse
import asyncio
import math
import random
import re
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import event
from sqlalchemy.ext.asyncio import async_sessionmaker

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from budget.kernel.db import create_engine  # noqa: E402
from budget.protocol import OperationTicket  # noqa: E402
from budget.types import Origin, Usage  # noqa: E402
from llm.errors import AllProvidersFailed  # noqa: E402
from llm.types import Capacity, Completion, LLMRequest  # noqa: E402
from scheduler.profiles import ProfileRepository  # noqa: E402
from scheduler.runner import DigestConfig, DigestRunner  # noqa: E402
from scheduler.service import DigestService  # noqa: E402
from scheduler.sources.feeds import AddressGuard, FeedClient  # noqa: E402
from scheduler.sources.fetch import Fetchers  # noqa: E402
from scheduler.sources.tme import TmeClient  # noqa: E402
from scheduler.tables import metadata  # noqa: E402
from scheduler.types import DigestSection, Notice  # noqa: E402
from tests.support.clocks import VirtualClock  # noqa: E402

FIXTURE = ROOT / "tests" / "fixtures" / "telegram_html" / "any2feed_full.html"
START = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
CHANNELS = 240
SUBS_PER_USER = 8


@dataclass
class Provider:
    name: str
    tpm: int | None  # None = unlimited (paid)
    latency_s: float
    remaining: float = 0.0
    at: float = 0.0
    calls: int = 0
    tokens: int = 0

    def refill(self, now: float) -> None:
        if self.tpm is not None:
            self.remaining = min(self.tpm, self.remaining + (now - self.at) * self.tpm / 60)
        self.at = now


class SimCascade:
    """The provider ladder on token buckets (virtual clock); implements SummaryBackend."""

    def __init__(self, clock: VirtualClock, *, pacing: bool) -> None:
        self.clock = clock
        self.pacing = pacing
        self.providers = [
            Provider("groq", 12_000, 0.35),
            Provider("groq2", 12_000, 0.35),
            Provider("mistral", 20_000, 1.2),
            Provider("cerebras", 60_000, 0.2),
            Provider("deepseek", None, 2.0),
        ]
        now = clock.monotonic()
        for p in self.providers:
            p.remaining = float(p.tpm or 0)
            p.at = now
        self.rejected = 0

    @staticmethod
    def tokens_in(request: LLMRequest) -> int:
        return sum(len(m.content) // 3 + 4 for m in request.messages)

    async def complete(self, op: OperationTicket, request: LLMRequest) -> Completion:
        now = self.clock.monotonic()
        need_in = self.tokens_in(request)
        out = min(request.max_tokens, 40 + need_in // 4)
        chosen: Provider | None = None
        for p in self.providers:
            p.refill(now)
            if p.tpm is None:
                if request.allow_paid:
                    chosen = p
                break
            if p.remaining >= need_in + request.max_tokens:
                chosen = p
                break
        if chosen is None:
            self.rejected += 1
            raise AllProvidersFailed([], [(p.name, "paced") for p in self.providers])
        if chosen.tpm is not None:
            chosen.remaining -= need_in + out
        chosen.calls += 1
        chosen.tokens += need_in + out
        await self.clock.sleep(chosen.latency_s)
        return Completion(
            text="summary",
            finish_reason="stop",
            provider=chosen.name,
            model="sim",
            usage=Usage(input_tokens=need_in, output_tokens=out),
            paid=chosen.tpm is None,
        )

    def capacity(self) -> list[Capacity]:
        now = self.clock.monotonic()
        out: list[Capacity] = []
        for p in self.providers:
            if p.tpm is None:
                out.append(Capacity(p.name, True, None, None, True))
                continue
            if not self.pacing:
                continue  # baseline: the runner gets no pacing data
            p.refill(now)
            full_in = (p.tpm - p.remaining) * 60 / p.tpm
            reset = now + full_in if p.remaining < p.tpm else None
            out.append(Capacity(p.name, True, int(p.remaining), reset, False))
        return out


class Ledger:
    """Admits every digest operation (budget limits are not what this measures)."""

    prices: object = None

    async def begin_operation(
        self,
        user_id: int,
        origin: Origin,
        *,
        max_musd: int | None = None,
        max_requests: int | None = None,
    ) -> OperationTicket:
        return OperationTicket(f"op-{user_id}", user_id, origin, None)

    async def end_operation(self, op: OperationTicket) -> None:
        return None


class Deliverer:
    def __init__(self, clock: VirtualClock) -> None:
        self.clock = clock
        self.sent = 0
        self.last: datetime | None = None

    async def send_digest(
        self,
        user_id: int,
        chat_id: int,
        language: str,
        parts: Sequence[DigestSection],
        *,
        skip_messages: int = 0,
    ) -> None:
        self.sent += 1
        self.last = self.clock.now()

    async def notify(self, user_id: int, chat_id: int, language: str, notice: Notice) -> None:
        return None


def _no_fsync(dbapi_conn: Any, _record: Any) -> None:
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA synchronous=OFF")
    cur.close()


def channel_pages() -> dict[str, str]:
    """240 channel pages from the saved markup: names, ids and texts varied."""
    html = FIXTURE.read_text(encoding="utf-8")
    pages: dict[str, str] = {}
    for c in range(CHANNELS):
        name = f"bench_channel_{c:03d}"
        offset = 1000 * (c + 1)

        def shift(match: re.Match[str], offset: int = offset) -> str:
            return str(int(match.group(0)) + offset)

        page = re.sub(
            r"(?<=topwar_official/)\d+|(?<=before=)\d+|(?<=data-before=\")\d+", shift, html
        )
        page = page.replace("topwar_official", name)
        page = page.replace('dir="auto">', f'dir="auto">[{name}] ', 40)
        page = page.replace(
            "2023-02-28T", "2026-03-02T"
        )  # recent enough for a new subscription's first digest
        pages[name] = page
    return pages


async def run(users: int, *, pacing: bool, concurrency: int, stagger_s: float) -> dict[str, float]:
    clock = VirtualClock(START.replace(hour=8), quiet_s=0.002)
    pages = channel_pages()

    def handler(request: httpx.Request) -> httpx.Response:
        name = request.url.path.rsplit("/", 1)[-1]
        return httpx.Response(200, text=pages[name])

    http = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    tme = TmeClient(http, base_url="https://t.me", max_pages=1)
    fetchers = Fetchers(tme, FeedClient(http, AddressGuard()), clock, memo_s=3600)
    with tempfile.TemporaryDirectory() as tmp:
        engine = create_engine(f"sqlite+aiosqlite:///{tmp}/bench.db")
        # a benchmark database need not survive a power cut: no fsync per commit
        event.listen(engine.sync_engine, "connect", _no_fsync)
        async with engine.begin() as conn:
            await conn.run_sync(metadata.create_all)
        sessions = async_sessionmaker(engine, expire_on_commit=False)
        profiles = ProfileRepository(sessions, clock)
        service = DigestService(sessions, clock, fetchers, profiles, max_subscriptions=100)
        rng = random.Random(6)
        names = sorted(pages)
        for uid in range(1, users + 1):
            await profiles.get_or_create(uid, uid, "en")
            await profiles.set_digest_time(uid, "09:00")
            for name in rng.sample(names, SUBS_PER_USER):
                await service.subscribe(uid, f"@{name}")
        clock.advance((START - clock.now()).total_seconds())
        cascade = SimCascade(clock, pacing=pacing)
        deliverer = Deliverer(clock)
        runner = DigestRunner(
            clock=clock,
            session_factory=sessions,
            ledger=Ledger(),
            backend=cascade,
            deliverer=deliverer,
            fetcher=fetchers,
            config=DigestConfig(
                stagger_s=stagger_s,
                llm_concurrency=concurrency,
                max_parallel_digests=users,
            ),
            count_tokens=lambda text: len(text) // 3 + 1,
        )
        wall = time.perf_counter()
        await runner.tick()
        await clock.run(lambda: not runner.busy, limit_s=6 * 3600, max_idle_rounds=5000)
        wall = time.perf_counter() - wall
        await engine.dispose()
    await http.aclose()
    assert deliverer.last is not None
    makespan = (deliverer.last - START).total_seconds()
    total_tokens = sum(p.tokens for p in cascade.providers)
    free_tpm = sum(p.tpm or 0 for p in cascade.providers)
    lower = total_tokens / free_tpm * 60
    # the buckets start full (one minute of tokens at t=0), so the tight bound is lower still
    lower_full_start = max(0, total_tokens - free_tpm) / free_tpm * 60
    return {
        "digests": deliverer.sent,
        "llm_calls": runner.stats.llm_calls,
        "cache_hits": runner.stats.cache_hits,
        "paid_calls": runner.stats.paid_calls,
        "rejected": cascade.rejected,
        "tokens": total_tokens,
        "makespan_s": makespan,
        "lower_bound_s": lower,
        "ratio": makespan / lower if lower else math.inf,
        "lower_full_start_s": lower_full_start,
        "wall_s": wall,
        **{f"calls_{p.name}": p.calls for p in cascade.providers},
    }


def show(title: str, r: dict[str, float]) -> None:
    print(f"== {title}")
    print(
        f"  digests {r['digests']:.0f}  LLM calls {r['llm_calls']:.0f}  cache hits "
        f"{r['cache_hits']:.0f}  paid-anchor calls {r['paid_calls']:.0f}"
    )
    per = "  ".join(f"{k[6:]}={v:.0f}" for k, v in r.items() if k.startswith("calls_"))
    print(f"  calls by provider: {per}")
    print(
        f"  tokens {r['tokens']:.0f}  makespan {r['makespan_s']:.0f} s  lower bound "
        f"{r['lower_bound_s']:.0f} s  ratio {r['ratio']:.2f}  (wall {r['wall_s']:.1f} s)"
    )
    print(f"  (bound counting the full buckets at start: {r['lower_full_start_s']:.0f} s)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--users", type=int, default=100)
    parser.add_argument("--concurrency", type=int, default=4, help="DIGEST_LLM_CONCURRENCY")
    args = parser.parse_args()
    print(
        f"users={args.users} channels={CHANNELS} subs/user={SUBS_PER_USER} max_posts=30 "
        f"summary_max_tokens=300 share=0.8 concurrency={args.concurrency}; providers "
        "simulated in-process on token buckets (virtual clock)"
    )
    paced = asyncio.run(run(args.users, pacing=True, concurrency=args.concurrency, stagger_s=0))
    show("paced (stagger 0, pacing on)", paced)
    base = asyncio.run(run(args.users, pacing=False, concurrency=args.concurrency, stagger_s=10))
    show("baseline (fixed 10 s stagger, no pacing)", base)
    ok = paced["paid_calls"] == 0 and paced["ratio"] <= 1.2
    print(f"targets (0 paid calls, makespan <= 1.2x lower bound): {'MET' if ok else 'NOT MET'}")


if __name__ == "__main__":
    main()
