"""Alerts before the caps through the real bot, in-process, on an injected clock: every
ALERT_AT fraction of a global, a team and a provider-account limit is told to the admin
once per window (a tick that finds nothing new sends nothing), again in the next window,
with the counted money, the burn rate, the projection and the top spenders; an admin who
chose Russian reads it in Russian."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from pathlib import Path

from bot.app.lifecycle import App
from budget.policy.money import usd
from budget.types import Level, Window
from tests.support.clocks import JumpClock
from tests.support.harness import bot_environment
from tests.support.inprocess import AppFactory
from tests.support.providers import FakeProviders
from tests.support.telegram import FakeTelegram

ADMIN = 1
RU_ADMIN = 2
MEMBER = 50


async def _ask(tg: FakeTelegram, clock: JumpClock, user: int, text: str) -> str:
    mark = tg.mark()
    tg.inject_message(user, text, date=int(clock.now().timestamp()))
    [reply] = await tg.wait_sent(user, since=mark, timeout=20)
    return reply.text


async def _tick(app: App, tg: FakeTelegram, chat: int = ADMIN) -> list[str]:
    """One tick of the watch; the alerts it sent to ``chat``."""
    assert app.ops_watch is not None
    mark = tg.mark()
    await app.ops_watch.tick()
    return [m.text for m in tg.sent_events(chat, since=mark) if "⚠️" in m.text]


def _limit_for(used: int, fraction: float) -> int:
    """The smallest limit (µUSD) at which ``used`` is at least ``fraction`` of it."""
    return math.floor(used / fraction)


async def test_each_threshold_of_each_limit_is_told_once_per_window(
    app_factory: AppFactory,
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
    tmp_path: Path,
) -> None:
    clock = JumpClock(datetime(2026, 3, 2, 20, 10, tzinfo=UTC))
    env = bot_environment(
        telegram=fake_telegram,
        database_path=tmp_path / "kopek.db",
        provider_base_urls={"deepseek": fake_providers.base_urls["deepseek"]},
        # the paid key's account cap counts from the start (a provider bucket is booked
        # only while the key has a cap)
        extra={
            "ADMIN_IDS": f"{ADMIN},{RU_ADMIN}",
            "ALERT_AT": "0.5,0.8,1.0",
            "DEEPSEEK_DAILY_CAP_USD": "1",
        },
    )
    bot = app_factory(env=env, clock=clock)
    await bot.start()
    app = bot.app
    assert app is not None
    assert "in team core" in await _ask(fake_telegram, clock, ADMIN, "/team core add 50")
    await _ask(fake_telegram, clock, RU_ADMIN, "/lang ru")
    await _ask(fake_telegram, clock, MEMBER, "hello there, what is new")
    await _ask(fake_telegram, clock, MEMBER, "and again")
    used = (await app.ledger.status()).buckets[0].settled_musd
    assert used > 0
    assert await _tick(app, fake_telegram) == []  # no limit yet: nothing to tell

    # a global hour limit at ~60 %, a team day limit at ~90 %, the paid key's account
    # cap at 100 %: one message each, naming the highest threshold reached
    hour = _limit_for(used, 0.6)
    await _ask(fake_telegram, clock, ADMIN, f"/limit global hour {usd(hour)[1:]}")
    await _ask(
        fake_telegram, clock, ADMIN, f"/limit team core day {usd(_limit_for(used, 0.9))[1:]}"
    )
    await app.ledger.set_limit(Level.PROVIDER, "deepseek", Window.DAY, used, by=ADMIN)
    mark = fake_telegram.mark()
    alerts = await _tick(app, fake_telegram)
    assert len(alerts) == 3, alerts
    by_limit = {a.splitlines()[0]: a for a in alerts}
    glob = by_limit["⚠️ Spend alert: the global hourly limit is at 50%."]
    assert f"Counted: {usd(used)} of {usd(hour)} (settled {usd(used)}, held $0.000000)." in glob
    assert "average since 20:00 UTC" in glob
    assert "At this rate the limit is reached at about 20:" in glob
    assert "before the window resets at 21:00 UTC." in glob
    assert f"Top spenders this hour (settled): {MEMBER} {usd(used)}" in glob
    team = by_limit["⚠️ Spend alert: the team core daily limit is at 80%."]
    assert f"Top spenders today (settled): {MEMBER} {usd(used)}" in team
    paid = by_limit["⚠️ Spend alert: the provider account deepseek daily limit is at 100%."]
    assert (
        "The limit is reached: new paid calls it counts are refused until the window "
        "resets at 00:00 UTC; free tiers go on." in paid
    )
    ru = [m.text for m in fake_telegram.sent_events(RU_ADMIN, since=mark)]
    assert len(ru) == 3 and all("Предупреждение о расходах" in t for t in ru), ru
    assert await _tick(app, fake_telegram) == []  # told: never again in these windows

    # the global hour limit lowered past 80 %, then to 100 %: each told once
    await _ask(fake_telegram, clock, ADMIN, f"/limit global hour {usd(_limit_for(used, 0.85))[1:]}")
    [eighty] = await _tick(app, fake_telegram)
    assert eighty.startswith("⚠️ Spend alert: the global hourly limit is at 80%.")
    await _ask(fake_telegram, clock, ADMIN, f"/limit global hour {usd(used)[1:]}")
    [full] = await _tick(app, fake_telegram)
    assert full.startswith("⚠️ Spend alert: the global hourly limit is at 100%.")
    assert await _tick(app, fake_telegram) == []

    # the next hour: the same threshold of the new window is told again; the day
    # windows' thresholds, told already today, are not
    for command in ("/limit global hour off", "/limit team core day off"):
        await _ask(fake_telegram, clock, ADMIN, command)
    await app.ledger.set_limit(Level.PROVIDER, "deepseek", Window.DAY, 10**6, by=ADMIN)
    clock.set(datetime(2026, 3, 2, 21, 5, tzinfo=UTC))
    await _ask(fake_telegram, clock, MEMBER, "one more in the next hour")
    status = await app.ledger.status()
    hour_used = next(b for b in status.buckets if b.window is Window.HOUR).settled_musd
    await _ask(
        fake_telegram, clock, ADMIN, f"/limit global hour {usd(_limit_for(hour_used, 0.6))[1:]}"
    )
    [again] = await _tick(app, fake_telegram)
    assert again.startswith("⚠️ Spend alert: the global hourly limit is at 50%.")
    assert "average since 21:00 UTC" in again
    assert await _tick(app, fake_telegram) == []
    assert clock.now() - datetime(2026, 3, 2, 21, 5, tzinfo=UTC) < timedelta(minutes=5)
    await bot.stop()
