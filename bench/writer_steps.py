"""What one message's reply waits for: the SQLite writer's steps on a timeline.

A diagnosis, not a timing benchmark: the real bot (``create_app``, in process) with the
defaults (private chats stream, ``STREAM_MODE_PRIVATE=draft``) on a SQLite file, one
Groq key on the loopback fake answering at once. After warm-up messages, one user's
messages are sent one after the other, each when the previous reply arrived; for the
last one every writer step is printed with the time (ms from the update's injection)
it was queued and answered, what queued it (the body's qualified name) and whether it
was awaited or posted, beside the fake Bot API's ``sendMessage`` of the reply and the
edits and drafts of that chat. Steps answered before the reply are the ones it waited
for (``docs/decisions/314-the-settle-after-the-reply.md``).

Usage: ``python bench/writer_steps.py [--messages N]``.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from budget.kernel import sqlite_writer
from tests.support.harness import bot_environment
from tests.support.inprocess import InProcessBot
from tests.support.providers import FakeProviders
from tests.support.telegram import FakeTelegram

USER = 42


class Timeline:
    """Writer steps and Bot API events, on ``time.monotonic()``."""

    def __init__(self) -> None:
        self.steps: list[list[Any]] = []  # [queued, answered or None, how, name]
        self.sent: list[tuple[float, str]] = []

    def name(self, fn: Any) -> str:
        fn = getattr(fn, "func", fn)  # a partial: its function
        return f"{fn.__module__}.{fn.__qualname__}".replace(".<locals>", "")

    def step(self, how: str, fn: Any, future: asyncio.Future[Any]) -> None:
        row: list[Any] = [time.monotonic(), None, how, self.name(fn)]
        self.steps.append(row)
        future.add_done_callback(lambda _f: row.__setitem__(1, time.monotonic()))


def instrument(timeline: Timeline, telegram: FakeTelegram) -> None:
    """Wrap the writer's queue and the fake's events to record them."""
    original_put = sqlite_writer._Step.__init__

    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        original_put(self, *args, **kwargs)
        kind = {0: "txn", 1: "read", 2: "call"}[self.kind]
        if kind == "txn":
            kind += " durable" if self.durable else " grouped"
        timeline.step(kind, self.fn, self.future)

    sqlite_writer._Step.__init__ = init  # type: ignore[method-assign]
    notify = telegram._notify
    events = telegram._events

    seen = [len(events)]

    def notified() -> None:
        for event in events[seen[0] :]:
            timeline.sent.append((time.monotonic(), f"{event.method} {event.chat_id}"))
        seen[0] = len(events)
        notify()

    telegram._notify = notified  # type: ignore[method-assign]


async def main(messages: int) -> None:
    """Start the bot, send ``messages`` messages one after the other, print the last's."""
    timeline = Timeline()
    with tempfile.TemporaryDirectory() as tmp:
        async with FakeTelegram() as telegram, FakeProviders() as providers:
            env = bot_environment(
                telegram=telegram,
                database_path=Path(tmp) / "steps.db",
                provider_base_urls={"groq": providers.base_urls["groq"]},
                extra={"LOG_LEVEL": "WARNING", "STREAM_MODE_PRIVATE": "draft"},
            )
            bot = InProcessBot(env, telegram=telegram)
            await bot.start()
            instrument(timeline, telegram)
            try:
                start = 0.0
                for i in range(messages):
                    providers.script("groq", {"text": "Four.", "prompt_tokens": 30})
                    mark = telegram.mark()
                    await asyncio.sleep(0.2)  # the previous message's writes are done
                    del timeline.steps[:], timeline.sent[:]
                    start = time.monotonic()
                    telegram.inject_message(USER, f"What is 2+2? ({i})")
                    await telegram.wait_sent(USER, since=mark, timeout=30)
                await asyncio.sleep(0.3)
            finally:
                await bot.stop()
    reply = next((t for t, what in timeline.sent if what.startswith("sendMessage ")), start)
    print(f"update injected at 0.0 ms; the reply's sendMessage at {1000 * (reply - start):.1f} ms")
    print(f"{'queued':>8} {'answered':>9}  {'':6} kind                 step")
    for queued, answered, how, name in timeline.steps:
        if queued < start:
            continue
        done = f"{1000 * (answered - start):9.1f}" if answered is not None else "        -"
        side = "before" if answered is not None and answered <= reply else "after"
        print(f"{1000 * (queued - start):8.1f} {done}  {side:6} {how:<20} {name}")
    for at, what in timeline.sent:
        print(f"{1000 * (at - start):8.1f}            Bot API {what}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=5, help="sequential messages sent")
    asyncio.run(main(parser.parse_args().messages))
