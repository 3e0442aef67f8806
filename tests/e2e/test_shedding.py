"""SHED_ORDER through the real bot (in-process): as paid answers pass each fraction of a
global day limit, the next feature goes off — told to the admin each time — streaming
first (answers sent whole, /stop says why), then long answers (max_tokens a quarter,
the answer says it was kept short); the next day's window turns both back on."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta

from tests.support.inprocess import AppFactory
from tests.support.providers import FakeProviders
from tests.support.telegram import FakeTelegram

ADMIN = 1
USER = 40


class _ShiftedClock:
    """The system clock ``shift`` away: a day behind, then (the test moves it) on time,
    so messages Telegram dates now are never stale."""

    def __init__(self) -> None:
        self.shift = timedelta(days=-1)

    def now(self) -> datetime:
        return datetime.now(UTC) + self.shift

    def monotonic(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))


async def _answer(tg: FakeTelegram, text: str) -> str:
    mark = tg.mark()
    tg.inject_message(USER, text)
    reply = await tg.wait_for(
        lambda m: m.chat_id == USER and m.method == "sendMessage", since=mark, timeout=30
    )
    return reply.text


async def _notice(tg: FakeTelegram, mark: int) -> str:
    found = await tg.wait_for(lambda m: m.chat_id == ADMIN, since=mark, timeout=30)
    return found.text


async def test_features_go_off_in_order_and_come_back_when_the_day_resets(
    app_factory: AppFactory,
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
    bot_env: dict[str, str],
) -> None:
    env = {k: v for k, v in bot_env.items() if not k.startswith(("GROQ", "MISTRAL", "CEREBRAS"))}
    env.update(
        ADMIN_IDS=str(ADMIN),
        BUDGET_GLOBAL_DAILY_USD="0.002",
        CHAT_MAX_OUTPUT_TOKENS="2000",
        SHED_ORDER="streaming,long_answers",
        SHED_AT="0.3,0.6",
        SHED_CHECK_SECONDS="3600",  # the test reads when it wants (refresh)
        STREAM_MODE_PRIVATE="edit",
        AUTO_KILL_FRACTION="0",  # the burn-rate trigger would trip first at this pace
    )
    fake_providers.script(
        "deepseek",
        {"text": "first", "prompt_tokens": 20, "completion_tokens": 2000},
        {"text": "second", "prompt_tokens": 20, "completion_tokens": 2000},
        {"text": "third", "prompt_tokens": 20, "completion_tokens": 500, "finish_reason": "length"},
        {"text": "next day", "prompt_tokens": 20, "completion_tokens": 5},
    )
    clock = _ShiftedClock()
    bot = app_factory(env=env, clock=clock)
    await bot.start()
    assert bot.app is not None and bot.app.shedding is not None
    shedding = bot.app.shedding
    assert (await shedding.refresh()).off == ()

    assert await _answer(fake_telegram, "one") == "first"
    assert fake_providers.requests[-1].body.get("stream") is True
    mark = fake_telegram.mark()
    assert (await shedding.refresh()).off == ("streaming",)  # 42 % of the day's limit
    notice = await _notice(fake_telegram, mark)
    assert "switched off streaming (answers are sent whole)" in notice
    assert "Global day spend $0.000846 of $0.002000 (42 %" in notice

    assert await _answer(fake_telegram, "two") == "second"
    assert not fake_providers.requests[-1].body.get("stream")  # sent whole
    assert "sent in one piece for now" in await _answer(fake_telegram, "/stop")
    mark = fake_telegram.mark()
    assert (await shedding.refresh()).off == ("streaming", "long_answers")  # 85 %
    assert "switched off long answers" in await _notice(fake_telegram, mark)

    third = await _answer(fake_telegram, "three")
    assert fake_providers.requests[-1].body["max_tokens"] == 500  # a quarter of 2000
    assert third.startswith("third") and "Answers are kept short for now" in third

    clock.shift = timedelta(0)  # a day later: the day's window reset
    mark = fake_telegram.mark()
    assert (await shedding.refresh()).off == ()
    assert "back on streaming (answers are sent whole); long answers" in await _notice(
        fake_telegram, mark
    )
    assert await _answer(fake_telegram, "four") == "next day"
    request = fake_providers.requests[-1].body
    assert request.get("stream") is True and request["max_tokens"] == 2000
    await bot.stop()
