"""The anomaly alerts through the real bot, in-process, on an injected clock: the fake
Groq's daily request headers, dropping 410 in 40 minutes, forecast its run-out at the
tick where it falls within QUOTA_ALERT_MINUTES (not before), naming the key chat goes to
next; then a burst of digest calls with no message from anyone is a loop suspicion.
Each is told once. An admin mutes a type with /alerts (kept across a restart), and a
muted type is not told."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

from bot.app.lifecycle import App
from budget.types import Origin, Usage
from tests.support.clocks import JumpClock
from tests.support.harness import bot_environment
from tests.support.inprocess import AppFactory
from tests.support.providers import FakeProviders
from tests.support.telegram import FakeTelegram

ADMIN = 1
USER = 50
START = datetime(2026, 3, 2, 14, 0, tzinfo=UTC)


async def _tick(app: App, tg: FakeTelegram) -> list[str]:
    assert app.ops_watch is not None
    mark = tg.mark()
    await app.ops_watch.tick()
    return [m.text for m in tg.sent_events(ADMIN, since=mark)]


async def _ask(tg: FakeTelegram, clock: JumpClock, user: int, text: str) -> str:
    mark = tg.mark()
    tg.inject_message(user, text, date=int(clock.now().timestamp()))
    [reply] = await tg.wait_sent(user, since=mark, timeout=20)
    return reply.text


async def test_the_quota_forecast_and_the_loop_suspicion_are_told_once_each(
    app_factory: AppFactory,
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
    tmp_path: Path,
) -> None:
    clock = JumpClock(START - timedelta(minutes=1))
    env = bot_environment(
        telegram=fake_telegram,
        database_path=tmp_path / "kopek.db",
        provider_base_urls={
            "groq": fake_providers.base_urls["groq"],
            "deepseek": fake_providers.base_urls["deepseek"],
        },
        extra={"ADMIN_IDS": str(ADMIN), "QUOTA_ALERT_MINUTES": "60", "LOOP_ALERT_CALLS": "6"},
    )
    bot = app_factory(env=env, clock=clock)
    await bot.start()
    app = bot.app
    assert app is not None
    told = []
    for minutes, left in ((0, 1000), (20, 800), (30, 700), (40, 590)):
        clock.set(START + timedelta(minutes=minutes))
        fake_providers.script(
            "gsk_fake_groq_key_1",
            {
                "headers": {
                    "x-ratelimit-limit-requests": "14400",
                    "x-ratelimit-remaining-requests": str(left),
                    "x-ratelimit-reset-requests": "23h0m0s",
                }
            },
        )
        await _ask(fake_telegram, clock, USER, f"question at {minutes}")
        told.append([t for t in await _tick(app, fake_telegram) if t.startswith("⏳")])
    # 800 left at 14:20 run out in 80 minutes, 700 at 14:30 in 70: beyond the lead
    assert told[:3] == [[], [], []]
    # 410 in 40 minutes: 590 left at 14:40 run out in 57.6 minutes. The clock is real
    # time between its jumps, so the 40 minutes are 40 plus the real moments between
    # the samples: 615 an hour, give or take one on a loaded machine
    [[forecast]] = told[3:]
    parts = re.fullmatch(r"(.*rate \()(\d+)( an hour, .*)", forecast, re.S)
    assert parts is not None, forecast
    head, rate, tail = parts.groups()
    assert head == "⏳ groq free requests run out at about 15:37 UTC at the current rate ("
    assert 613 <= int(rate) <= 616, forecast
    assert tail == " an hour, 590 left).\nAfter that chat goes to groq2 (free)."
    assert not [t for t in await _tick(app, fake_telegram) if t.startswith("⏳")]

    # an hour later nobody writes, and digests make call after call
    clock.set(START + timedelta(minutes=100))
    await _digest_burst(app, 6)
    [loop] = [t for t in await _tick(app, fake_telegram) if t.startswith("🔁")]
    assert loop.startswith("🔁 Loop suspected: 6 calls in the last 10 minutes and no message")
    assert "Digest calls: 6; retries and follow-up calls of chat answers: 0." in loop
    assert "The last message was taken in at 2026-03-02 14:40 UTC." in loop
    assert not [t for t in await _tick(app, fake_telegram) if t.startswith("🔁")]
    await bot.stop()


async def _digest_burst(app: App, calls: int) -> None:
    """``calls`` digest calls booked through the bot's ledger, as a digest run books them."""
    for _ in range(calls):
        op = await app.ledger.begin_operation(USER, Origin.DIGEST)
        req = await app.ledger.begin_request(op, f"fp{app.clock.monotonic()}")
        hold = await app.ledger.reserve(
            op, req, provider="deepseek", model="deepseek-chat", input_tokens=500, max_tokens=50
        )
        await app.ledger.settle(hold.hold_id, Usage(500, 0, 40))
        await app.ledger.end_operation(op)


async def test_an_admin_mutes_an_alert_type_for_good_and_unmutes_it(
    app_factory: AppFactory,
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
    tmp_path: Path,
) -> None:
    clock = JumpClock(START)
    env = bot_environment(
        telegram=fake_telegram,
        database_path=tmp_path / "kopek.db",
        provider_base_urls={"deepseek": fake_providers.base_urls["deepseek"]},
        extra={"ADMIN_IDS": str(ADMIN), "LOOP_ALERT_CALLS": "4"},
    )
    bot = app_factory(env=env, clock=clock)
    await bot.start()
    # ADMIN_IDS first: anyone else's /alerts is an unknown command and changes nothing
    stranger = await _ask(fake_telegram, clock, USER, "/alerts mute loop")
    assert "muted" not in stranger
    listing = await _ask(fake_telegram, clock, ADMIN, "/alerts")
    assert "• loop: on — calls of digests and retries while no message arrives" in listing
    assert "• quota: off (QUOTA_ALERT_MINUTES=0)" in listing
    assert "• limits: off (ALERT_AT empty)" in listing
    assert await _ask(fake_telegram, clock, ADMIN, "/alerts mute loop") == (
        "🔕 loop alerts muted for every replica until /alerts unmute loop."
    )
    assert await _ask(fake_telegram, clock, ADMIN, "/alerts MUTE Loop") == (
        "loop alerts were already muted."
    )
    assert (await _ask(fake_telegram, clock, ADMIN, "/alerts mute sirens")).startswith(
        "Usage: /alerts [mute TYPE | unmute TYPE]; types: limits, loop, quota, cost, forecast."
    )
    await bot.restart()  # the mute is kept in the database
    app = bot.app
    assert app is not None
    assert "• loop: muted —" in await _ask(fake_telegram, clock, ADMIN, "/alerts")
    clock.jump(11 * 60)  # ten minutes with no message, then a burst: muted, not told
    await _digest_burst(app, 4)
    assert not [t for t in await _tick(app, fake_telegram) if t.startswith("🔁")]
    assert await _ask(fake_telegram, clock, ADMIN, "/alerts unmute loop") == (
        "🔔 loop alerts unmuted."
    )
    clock.jump(11 * 60)
    await _digest_burst(app, 4)
    [loop] = [t for t in await _tick(app, fake_telegram) if t.startswith("🔁")]
    assert loop.startswith("🔁 Loop suspected: 4 calls in the last 10 minutes")
    await bot.stop()
