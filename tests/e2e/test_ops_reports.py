"""Spend reports through the real bot, in-process, on an injected clock: at REPORT_TIME
local in BUDGET_TZ the admin gets the previous day's report (and on REPORT_WEEKLY's
weekday the week's), whose figures are those ``/budget`` gave at the end of that day for
the same books; a restart sends neither again; a report due while the bot was down goes
out when it starts; a day that ended before the bot's first start (kept across restarts)
gets none."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path

from bot.app.lifecycle import App
from tests.support.clocks import JumpClock
from tests.support.harness import bot_environment
from tests.support.inprocess import AppFactory
from tests.support.providers import FakeProviders
from tests.support.telegram import FakeTelegram

ADMIN = 1
MEMBER = 50
OTHER = 51
#: Tuesday 2026-03-03, 21:30 in Berlin (CET, UTC+1)
EVENING = datetime(2026, 3, 3, 20, 30, tzinfo=UTC)
#: Wednesday 2026-03-04, 09:00:30 in Berlin
NEXT_MORNING = datetime(2026, 3, 4, 8, 0, 30, tzinfo=UTC)

_BUDGET_KEY = re.compile(
    r"^• (\w+)(?: paid)?: (\d+) calls?, settled (\$[\d.]+), list (\S+), circuit"
)
_REPORT_KEY = re.compile(
    r"^• (\w+) \((?:free|paid)\): (\d+) calls?, settled (\$[\d.]+), list (\S+)$"
)


async def _ask(tg: FakeTelegram, clock: JumpClock, user: int, text: str) -> str:
    mark = tg.mark()
    tg.inject_message(user, text, date=int(clock.now().timestamp()))
    [reply] = await tg.wait_sent(user, since=mark, timeout=20)
    return reply.text


def _reports(tg: FakeTelegram, since: int) -> list[str]:
    return [m.text for m in tg.sent_events(ADMIN, since=since) if m.text.startswith("📊")]


def _keys(text: str, pattern: re.Pattern[str]) -> dict[str, tuple[str, ...]]:
    return {m[1]: m.groups()[1:] for line in text.splitlines() if (m := pattern.match(line))}


def _line(text: str, start: str) -> str:
    [line] = [line for line in text.splitlines() if line.startswith(start)]
    return line


async def _tick(app: App) -> int:
    assert app.ops_watch is not None
    return await app.ops_watch.tick()


async def test_the_daily_and_weekly_reports_give_budgets_figures_once(
    app_factory: AppFactory,
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
    tmp_path: Path,
) -> None:
    clock = JumpClock(EVENING)
    urls = fake_providers.base_urls
    env = bot_environment(
        telegram=fake_telegram,
        database_path=tmp_path / "kopek.db",
        provider_base_urls={"groq": urls["groq"], "deepseek": urls["deepseek"]},
        extra={
            "ADMIN_IDS": str(ADMIN),
            "BUDGET_TZ": "Europe/Berlin",
            "REPORT_TIME": "09:00",
            "REPORT_WEEKLY": "wed",
        },
    )
    mark = fake_telegram.mark()
    bot = app_factory(env=env, clock=clock)
    await bot.start()
    # first started at 21:30, after 09:00: yesterday ended before the bot existed, so
    # its report (an empty day, "uptime 0m") is not sent
    assert _reports(fake_telegram, mark) == []
    assert bot.app is not None
    assert await _tick(bot.app) == 0

    assert "in team core" in await _ask(fake_telegram, clock, ADMIN, "/team core add 50")
    await _ask(fake_telegram, clock, MEMBER, "hello, free tier")
    fake_providers.script("groq", {"status": 503}, {"status": 503})
    await _ask(fake_telegram, clock, MEMBER, "hello, paid anchor")
    fake_providers.script("groq", {"status": 503}, {"status": 503})
    await _ask(fake_telegram, clock, OTHER, "another paid one")
    await _ask(fake_telegram, clock, ADMIN, "/kill drill")
    await _ask(fake_telegram, clock, OTHER, "refused while killed")
    await _ask(fake_telegram, clock, ADMIN, "/unkill")
    budget = await _ask(fake_telegram, clock, ADMIN, "/budget")
    # the provider's bill for the day says $0.5: a reconciliation that differs
    mark = fake_telegram.mark()
    fake_telegram.inject_document(
        ADMIN,
        b"date,model,input_tokens,cached_input_tokens,output_tokens,cost_usd\n"
        b"2026-03-03,deepseek-chat,10,0,10,0.5\n",
        file_name="deepseek-bill.csv",
        caption="/reconcile deepseek 2026-03-03",
    )
    [reconciled] = await fake_telegram.wait_sent(ADMIN, since=mark, timeout=20.0)
    assert "Reconcile deepseek with deepseek-bill.csv" in reconciled.text
    assert "⚠️ differs" in reconciled.text
    assert bot.app is not None
    kpis = (await bot.app.dispatcher["operator_view"].state())["kpis"]
    assert kpis["users"] == 3 and kpis["channels"] == 0 and kpis["digests_sent"] == 0

    clock.set(NEXT_MORNING)
    mark = fake_telegram.mark()
    assert await _tick(bot.app) == 2
    daily, weekly = _reports(fake_telegram, mark)
    assert daily.startswith("📊 Daily spend report for 2026-03-03 (Europe/Berlin)")
    assert weekly.startswith("📊 Weekly spend report, 2026-02-25 to 2026-03-03 (Europe/Berlin)")
    expected = {k: v for k, v in _keys(budget, _BUDGET_KEY).items() if v[0] != "0"}
    assert set(expected) == {"groq", "deepseek"} and expected["deepseek"][0] == "2"
    for report in (daily, weekly):
        found = _keys(report, _REPORT_KEY)
        assert found.pop("groq2") == ("0", "$0.000000", "—")  # configured, never booked
        assert found == expected
        assert (
            _line(report, "Refusals: ")
            == "Refusals: "
            + _line(budget, "Ledger refusals today: ")[len("Ledger refusals today: ") :]
        )
        top = re.findall(r"^• (\d+): settled (\$[\d.]+), held \$0\.000000$", budget, re.M)
        assert _line(report, "Top users: ") == "Top users: " + ", ".join(f"{u} {m}" for u, m in top)
        spent = re.search(r"Spend by origin: chat (\$[\d.]+), digest \$0\.000000", budget)
        assert spent is not None and f"Money spent: {spent[1]}." in report
        free = expected["groq"]
        calls = "1 call" if free[0] == "1" else f"{free[0]} calls"
        assert f"Free tiers: {calls}, {free[2]} at list price (not spent)." in report
        assert "Top teams: core " in report
        assert (
            "Users: 3 (3 active); digests sent: 0 (0 on these days); channels followed: 0" in report
        )
        assert "• groq: never reconciled" in report.splitlines()
        [line] = [x for x in report.splitlines() if x.startswith("• deepseek: 2026-03-03 21:")]
        assert line.endswith(
            "Europe/Berlin, the period 2026-03-03 00:00 – 2026-03-04 00:00 UTC from "
            "deepseek-bill.csv: differences found (see /reconcile); ledger "
            f"{expected['deepseek'][1]}, export $0.500000"
        ), line
    assert await _tick(bot.app) == 0  # sent: never again

    # a restart the same morning: the start's tick finds both reports sent
    mark = fake_telegram.mark()
    await bot.restart()
    assert bot.app is not None
    assert await _tick(bot.app) == 0
    assert _reports(fake_telegram, mark) == []
    await bot.stop()


async def test_a_day_before_the_first_start_gets_no_report_and_a_restart_keeps_it(
    app_factory: AppFactory, fake_telegram: FakeTelegram, tmp_path: Path
) -> None:
    """A fresh install started on Tuesday evening sends no report for Monday; restarted
    on Wednesday at 09:00:30 (its first start not moved by the restart) it sends
    Tuesday's, once; restarted again, nothing more."""
    clock = JumpClock(EVENING)
    env = bot_environment(
        telegram=fake_telegram,
        database_path=tmp_path / "kopek.db",
        extra={"ADMIN_IDS": str(ADMIN), "BUDGET_TZ": "Europe/Berlin", "REPORT_TIME": "09:00"},
    )
    mark = fake_telegram.mark()
    bot = app_factory(env=env, clock=clock)
    await bot.start()
    assert _reports(fake_telegram, mark) == []
    await bot.stop()
    clock.set(NEXT_MORNING)
    await bot.start()
    [daily] = _reports(fake_telegram, mark)
    assert daily.startswith("📊 Daily spend report for 2026-03-03 (Europe/Berlin)"), daily
    await bot.restart()
    assert len(_reports(fake_telegram, mark)) == 1
    assert await bot.stop() == 0
