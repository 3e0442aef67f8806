"""SIGKILL after a paid answer's reply was sent, before its settle: the hold stays held,
and the next start's sweep books its ceiling.

An answer's settle (with the end of its operation) is written only once its reply is
sent (docs/decisions/314-the-settle-after-the-reply.md): the reply waits for the hold,
the one durable write before the provider call, not for the settle. Here the fake Bot
API records the reply's ``sendMessage`` and does not answer it, so the real bot process
is still waiting for it, its settle not queued, when it is killed. The hold must then be
on disk, held, and the restarted bot must book it at its ceiling (estimated): more than
the provider billed, never less.
"""

from __future__ import annotations

import asyncio
import sqlite3
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from budget.pricing.prices import PriceCard, ProviderModel
from budget.types import Usage
from tests.support.harness import BotFactory, paid_only_environment
from tests.support.providers import FakeProviders
from tests.support.telegram import FakeTelegram, RecordedRequest

USER = 7_401
QUESTION = "a paid question answered just before the crash"
#: what the fake bills the call: 100 input + 50 output tokens
BILL = {"prompt_tokens": 100, "completion_tokens": 50}


def _holds(db: Path) -> list[tuple[str, int, int | None, int]]:
    """(state, ceiling µUSD, actual µUSD, estimated) of every DeepSeek hold."""
    conn = sqlite3.connect(db)
    try:
        return conn.execute(
            "SELECT state, ceiling_musd, actual_musd, estimated FROM budget_holds"
            " WHERE provider = 'deepseek'"
        ).fetchall()
    finally:
        conn.close()


async def test_a_kill_after_the_reply_before_the_settle_books_the_ceiling(
    bot_factory: BotFactory,
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The reply reached Telegram and the bot died before it heard back: the hold is on
    disk and held; after the restart it is booked at its ceiling, estimated, which
    covers what the provider billed."""
    db = tmp_path / "kopek.db"
    bot = bot_factory(env=paid_only_environment(fake_telegram, fake_providers, db, BILL))
    send = fake_telegram._m_sendMessage
    replied, release = asyncio.Event(), asyncio.Event()

    async def stalled(params: dict[str, Any], files: Any, record: RecordedRequest) -> Any:
        result = await send(params, files, record)
        if QUESTION in str(params.get("text", "")):  # the answer (the fake echoes the question)
            replied.set()
            await release.wait()  # the bot never hears back before it is killed
        return result

    monkeypatch.setattr(fake_telegram, "_m_sendMessage", stalled)
    await bot.start()
    fake_telegram.inject_message(USER, QUESTION)
    try:
        async with asyncio.timeout(30):
            await replied.wait()
        await asyncio.sleep(0.3)  # time a settle queued before the reply would have had
        await bot.kill()
    finally:
        release.set()
    [answer] = [m for m in fake_telegram.sent_events(USER) if QUESTION in m.text]
    assert answer.method == "sendMessage"
    [(state, ceiling, _actual, _estimated)] = _holds(db)
    assert state == "held", "the settle was written before the reply was answered"
    assert ceiling > 0

    monkeypatch.setattr(fake_telegram, "_m_sendMessage", send)
    await bot.start()  # the start's sweep expires the dead process's holds
    assert await bot.stop() == 0
    [(state, ceiling, actual, estimated)] = _holds(db)
    card = PriceCard([ProviderModel("deepseek", "deepseek-chat", "paid")])
    billed = card.actual_musd(
        "deepseek",
        "deepseek-chat",
        Usage(input_tokens=BILL["prompt_tokens"], output_tokens=BILL["completion_tokens"]),
        datetime.now(UTC),
    )
    assert state == "expired"
    assert estimated == 1
    assert actual is not None and actual >= ceiling >= billed > 0
    assert len([r for r in fake_providers.requests if r.provider == "deepseek"]) == 1
