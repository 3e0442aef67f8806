"""A provider sending a body past its cap, through the real bot (in process, the Mistral
SDK's path — the only provider, answers not streamed): the call fails closed — the hold
is booked at its ceiling (the provider may have generated what it sent), the user gets a
template without exception text — and other users' replies are not held meanwhile
(``llm/providers/body_cap.py``)."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from llm.providers.body_cap import MAX_RESPONSE_BYTES
from tests.support.inprocess import AppFactory
from tests.support.providers import FakeProviders
from tests.support.telegram import FakeTelegram

ASKER = 700
HELPERS = range(701, 711)
#: the fake's pace: 64 KiB every 10 ms, so the cap is reached after about 1.3 s
EVERY_S = 0.01


async def test_a_body_over_the_cap_fails_closed_without_holding_other_users(
    app_factory: AppFactory,
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
    env_with: Callable[..., dict[str, str]],
    help_reply_s: Callable[[int], Coroutine[Any, Any, float]],
) -> None:
    """User 700's answer is a 40 MB body, sent at 6.5 MB/s; while it arrives, ten users
    send /help 0.1 s apart, each answered within 1 s. The read stops at 8 MiB: the
    call is an interrupted failure (booked at the ceiling, estimated), user 700 gets
    the providers-unavailable template, and nothing of the error reaches a reply.
    Before, the SDK read the whole body into memory, however long."""
    env = env_with("mistral", STREAM_MODE_PRIVATE="off")
    database = Path(env["DATABASE_URL"].split("///", 1)[1])
    bot = app_factory(env=env)
    await bot.start()
    fake_providers.script("mistral", {"huge_body": 40_000_000, "interval_s": EVERY_S})
    mark = fake_telegram.mark()
    fake_telegram.inject_message(ASKER, "tell me everything")
    async with asyncio.timeout(30):
        while not fake_providers.requests:  # noqa: ASYNC110 - the fake has no event for it
            await asyncio.sleep(0.01)
    waits = []
    for user_id in HELPERS:
        waits.append(asyncio.create_task(help_reply_s(user_id)))
        await asyncio.sleep(0.1)
    replies = await asyncio.gather(*waits)
    assert max(replies) < 1.0, [round(r, 2) for r in replies]
    answer = await fake_telegram.wait_for(
        lambda m: m.chat_id == ASKER and m.method == "sendMessage", since=mark, timeout=30
    )
    assert answer.text.startswith("⚠️ All model providers are unavailable right now.")
    for word in ("bytes", "Body", "Error", "Traceback", "mistral"):
        assert word not in answer.text
    assert f"response body over {MAX_RESPONSE_BYTES} bytes" in bot.logs()
    assert await bot.stop() == 0
    with contextlib.closing(sqlite3.connect(database)) as conn:
        rows = conn.execute(
            "SELECT state, estimated, usage_output, max_tokens, actual_musd, ceiling_musd"
            " FROM budget_holds"
        ).fetchall()
    [(state, estimated, output, max_tokens, actual, ceiling)] = rows
    assert (state, estimated, output) == ("settled", 1, max_tokens)
    assert actual == ceiling
    assert len(fake_providers.requests) == 1  # not asked again behind the user's back
