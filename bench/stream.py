"""Streaming benchmark: how soon a user sees text, and how often drafts are sent.

The real bot (``create_app``, in process) against the loopback fake Bot API and a fake
provider whose first token comes 300 ms after the request and then 30 chunks a second
(60 chunks, 2 s of text). Four private chats send five messages each (one after the
other per chat, the chats at once). Printed, from the same run:

* update → provider's first token p50 (request arrival at the fake + 300 ms) and
  update → first visible text p50 (the first ``sendMessageDraft`` accepted), with the
  target: first visible p50 ≤ 300 ms + 150 ms;
* drafts: the shortest gap between two drafts of one chat (within an answer, and
  across answers), against ``STREAM_DRAFT_INTERVAL_MS``;
* the non-streaming path as a baseline in the same run (``STREAM_MODE_PRIVATE=off``, a
  provider answering at once): update → reply p50/p99, and the same provider paced as
  above (the whole answer before anything is shown).

Usage: ``python bench/stream.py [--messages 5] [--chats 4]``.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
from collections.abc import Iterable
from itertools import pairwise
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support.harness import bot_environment
from tests.support.inprocess import InProcessBot
from tests.support.providers import FakeProviders
from tests.support.telegram import FakeTelegram

FIRST_TOKEN_S = 0.3
CHUNKS_PER_S = 30
TEXT = " ".join(f"w{i:02d}" for i in range(60))  # 60 four-character chunks
DRAFT_INTERVAL_MS = 600


def pct(values: Iterable[float], q: float) -> float:
    """The q-quantile (0..1) of ``values`` in ms."""
    data = sorted(values)
    return 1000 * data[min(len(data) - 1, round(q * (len(data) - 1)))]


def reply_latency(telegram: FakeTelegram, sent: list[tuple[int, float, int]]) -> list[float]:
    """Update → the first ``sendMessage`` to that chat after it, seconds (the fake records
    requests on the loop's monotonic clock)."""
    sends = telegram.requests("sendMessage")
    return [
        next(r.monotonic for r in sends if r.chat_id == user and r.monotonic >= at) - at
        for user, at, _ in sent
    ]


async def run_chats(
    telegram: FakeTelegram, chats: int, messages: int, first_user: int
) -> list[tuple[int, float, int]]:
    """Each chat sends ``messages`` messages, one after the other; returns
    (chat, loop time the update was queued, events mark) per message."""
    loop = asyncio.get_running_loop()
    sent: list[tuple[int, float, int]] = []

    async def chat(user: int) -> None:
        for i in range(messages):
            mark = telegram.mark()
            at = loop.time()
            telegram.inject_message(user, f"question {i}")
            sent.append((user, at, mark))
            await telegram.wait_sent(user, since=mark, timeout=60)

    await asyncio.gather(*(chat(first_user + n) for n in range(chats)))
    return sent


async def one_bot(
    telegram: FakeTelegram, providers: FakeProviders, db: Path, mode: str
) -> InProcessBot:
    """A started bot with one Groq key on the fake."""
    env = bot_environment(
        telegram=telegram,
        database_path=db,
        provider_base_urls={"groq": providers.base_urls["groq"]},
        extra={
            "STREAM_MODE_PRIVATE": mode,
            "STREAM_DRAFT_INTERVAL_MS": str(DRAFT_INTERVAL_MS),
            "USER_MAX_PER_MINUTE": "1000",
            "USER_MAX_UPDATES_PER_MINUTE": "1000",
            "LOG_LEVEL": "WARNING",
        },
    )
    bot = InProcessBot(env, telegram=telegram)
    await bot.start()
    return bot


async def main(chats: int, messages: int) -> None:
    """Run the three configurations and print the figures."""
    paced = {"text": TEXT, "first_token_s": FIRST_TOKEN_S, "interval_s": 1 / CHUNKS_PER_S}
    with tempfile.TemporaryDirectory() as tmp:
        async with FakeTelegram() as telegram, FakeProviders() as providers:
            # streaming, paced provider
            providers.default("groq", paced)
            bot = await one_bot(telegram, providers, Path(tmp) / "a.db", "draft")
            sent = await run_chats(telegram, chats, messages, 1000)
            await bot.stop()
            requests = sorted(r.at for r in providers.requests)
            first_visible: list[float] = []
            first_token: list[float] = []
            within: list[float] = []
            across: list[float] = []
            for user in {u for u, _, _ in sent}:
                times = sorted(at for u, at, _ in sent if u == user)
                drafts = telegram.drafts(user)
                for at in times:
                    first = next(d for d in drafts if d.at >= at)
                    first_visible.append(first.at - at)
                    request = next(r for r in requests if r >= at)
                    first_token.append(request + FIRST_TOKEN_S - at)
                for a, b in pairwise(drafts):
                    (within if a.draft_id == b.draft_id else across).append(b.at - a.at)
            providers.reset()

            # non-streaming baseline: a provider answering at once, then the paced one
            providers.default("groq", {"text": TEXT})
            bot = await one_bot(telegram, providers, Path(tmp) / "b.db", "off")
            base = await run_chats(telegram, chats, messages, 2000)
            await bot.stop()
            providers.default("groq", {"text": TEXT, "delay_s": FIRST_TOKEN_S + 60 / CHUNKS_PER_S})
            bot = await one_bot(telegram, providers, Path(tmp) / "c.db", "off")
            slow = await run_chats(telegram, chats, messages, 3000)
            await bot.stop()
    print(f"{chats} chats x {messages} messages; provider: first token after "
          f"{FIRST_TOKEN_S * 1000:.0f} ms, then {CHUNKS_PER_S} chunks/s, 60 chunks")  # fmt: skip
    print(f"streaming (drafts every >= {DRAFT_INTERVAL_MS} ms):")
    print(f"  update -> provider's first token  p50 {pct(first_token, 0.5):7.1f} ms")
    visible = pct(first_visible, 0.5)
    target = pct(first_token, 0.5) + 150
    verdict = "MET" if visible <= target else "MISSED"
    print(f"  update -> first visible text      p50 {visible:7.1f} ms  p99 "
          f"{pct(first_visible, 0.99):7.1f} ms  (target <= first token + 150 ms "
          f"= {target:.1f} ms: {verdict})")  # fmt: skip
    print(f"  drafts per answer: {len(within) / len(sent) + 1:.1f}; shortest gap between two "
          f"drafts of one chat: {pct(within, 0):.1f} ms within an answer, "
          f"{pct(across, 0) if across else float('nan'):.1f} ms across answers "
          f"(configured {DRAFT_INTERVAL_MS} ms)")  # fmt: skip
    final = reply_latency(telegram, sent)
    print(f"  update -> final message            p50 {pct(final, 0.5):7.1f} ms")
    print("non-streaming path (STREAM_MODE_PRIVATE=off), same run:")
    instant = reply_latency(telegram, base)
    print(f"  provider answering at once: update -> reply p50 {pct(instant, 0.5):7.1f} ms, "
          f"p99 {pct(instant, 0.99):7.1f} ms")  # fmt: skip
    whole = reply_latency(telegram, slow)
    print(f"  same paced answer in one piece: update -> first visible text p50 "
          f"{pct(whole, 0.5):7.1f} ms")  # fmt: skip
    if statistics.median(first_visible) > statistics.median(first_token) + 0.15:
        sys.exit(1)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chats", type=int, default=4)
    parser.add_argument("--messages", type=int, default=5)
    args = parser.parse_args()
    asyncio.run(main(args.chats, args.messages))
