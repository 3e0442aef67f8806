"""/drill through the real bot (in-process): every check passes with the paid anchor
configured and leaves no spend, no held money, no limit and the global kill switch as it
was; a non-admin gets the unknown-command reply; with free keys only the money checks
say they were skipped. Nothing reaches a provider."""

from __future__ import annotations

from tests.support.inprocess import AppFactory
from tests.support.providers import FakeProviders
from tests.support.telegram import FakeTelegram

ADMIN = 1


async def _ask(tg: FakeTelegram, user: int, text: str) -> str:
    mark = tg.mark()
    tg.inject_message(user, text)
    [reply] = await tg.wait_sent(user, since=mark, timeout=30)
    return reply.text


async def test_drill_passes_every_check_and_leaves_the_ledger_as_it_was(
    app_factory: AppFactory,
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
    bot_env: dict[str, str],
) -> None:
    bot = app_factory(env=dict(bot_env, ADMIN_IDS=str(ADMIN)))
    await bot.start()
    assert bot.app is not None
    before = await bot.app.ledger.status()
    unknown = await _ask(fake_telegram, 50, "/frobnicate")
    assert await _ask(fake_telegram, 50, "/drill") == unknown

    report = await _ask(fake_telegram, ADMIN, "/drill")
    lines = report.splitlines()
    assert lines[0] == "🧯 Drill passed: 7 of 7 checks ran", report
    names = [line.split(":")[0][2:] for line in lines[1:]]
    assert names == [
        "hold", "busy", "limit", "operation cap", "loop", "kill switch", "nothing left"
    ]  # fmt: skip
    assert all(line.startswith("✅") and line.endswith(" ms)") for line in lines[1:])
    assert "granted on deepseek" in lines[1] and "resets " in lines[3]
    after = await bot.app.ledger.status()
    assert after.exposure_musd == before.exposure_musd == 0
    assert after.spend_by_origin_musd == before.spend_by_origin_musd
    assert after.kill == before.kill and not after.scoped_kills
    assert [b.settled_musd for b in after.buckets] == [b.settled_musd for b in before.buckets]
    assert fake_providers.requests == []
    assert "Kill switch: off" in await _ask(fake_telegram, ADMIN, "/budget")
    # a second drill within the minute: three canary operations each fit its rate
    assert (await _ask(fake_telegram, ADMIN, "/drill")).startswith("🧯 Drill passed")

    free = {k: v for k, v in bot_env.items() if not k.startswith("DEEPSEEK")}
    await bot.stop()
    again = app_factory(env=dict(free, ADMIN_IDS=str(ADMIN)))
    await again.start()
    report = await _ask(fake_telegram, ADMIN, "/drill")
    assert report.startswith("🧯 Drill passed: 4 of 7 checks ran"), report
    assert report.count("➖") == 3 and "no paid key" in report
    await again.stop()
