"""The event loop belongs to everyone: a provider's huge streamed chunk must not hold
another user's reply (the real bot in process, streaming drafts, the Mistral fake as
the only provider; see ``llm/providers/sse.py``)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

from tests.support.inprocess import AppFactory
from tests.support.providers import FakeProviders
from tests.support.telegram import FakeTelegram

#: Users who ask /help while the huge chunk arrives, and the gap between two of them.
HELPERS = range(601, 616)
EVERY_S = 0.1


async def test_a_6_mb_stream_chunk_does_not_hold_another_users_reply(
    app_factory: AppFactory,
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
    env_with: Callable[..., dict[str, str]],
    help_reply_s: Callable[[int], Coroutine[Any, Any, float]],
) -> None:
    """User 600's streamed answer carries one 6 MB chunk, 0.3 s after its first; from
    the first chunk on, 15 other users send /help 0.1 s apart. Each is answered within
    1 s, and the huge chunk ends that stream as a cut (the bound on one event). Before,
    the Mistral SDK's decoder scanned its buffer byte by byte on the loop: a 3 MB chunk
    held it 1.1 s, this one over 2 s, and the /help sent then waited as long."""
    env = env_with("mistral", STREAM_MODE_PRIVATE="draft", STREAM_DRAFT_INTERVAL_MS="200")
    bot = app_factory(env=env)
    await bot.start()
    fake_providers.script("mistral", {"chunks": ["Hello ", "x" * 6_000_000], "interval_s": 0.3})
    mark = fake_telegram.mark()
    fake_telegram.inject_message(600, "tell me everything")
    async with asyncio.timeout(30):
        while not any(s.chunks_sent for s in fake_providers.streams):  # noqa: ASYNC110 - the fake has no event for it
            await asyncio.sleep(0.01)
    waits = []
    for user_id in HELPERS:
        waits.append(asyncio.create_task(help_reply_s(user_id)))
        await asyncio.sleep(EVERY_S)
    replies = await asyncio.gather(*waits)
    print(f"\n/help replies while the 6 MB chunk arrived: max {max(replies):.2f} s")
    assert max(replies) < 1.0, [round(r, 2) for r in replies]
    # user 600 is answered too (what was received, or another provider's answer)
    await fake_telegram.wait_for(
        lambda m: m.chat_id == 600 and m.method == "sendMessage", since=mark, timeout=30
    )
    assert "a stream event over 1048576 bytes" in bot.logs()
    assert await bot.stop() == 0
