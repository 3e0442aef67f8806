"""A team's guarantee larger than the team's own limit, through the real bot
(``docs/decisions/285-a-guarantee-keeps-no-more-than-the-team-may-spend.md``): the
admin is warned, only what the team may spend is kept from everyone else, and a refusal
names the limit that stopped it — the share a guarantee keeps, the team's own limit —
never "the global daily limit is reached" while it is not."""

from __future__ import annotations

import re
from decimal import Decimal

from budget.policy.money import usd
from tests.support.inprocess import AppFactory
from tests.support.providers import FakeProviders
from tests.support.telegram import FakeTelegram

ADMIN = 1
MEMBER = 50
OUTSIDER = 60
DEEPSEEK_KEY = "fake_deepseek_key"
QUESTION = "Tell me something"


async def _ask(tg: FakeTelegram, user: int, text: str) -> str:
    mark = tg.mark()
    tg.inject_message(user, text)
    [reply] = await tg.wait_sent(user, since=mark, timeout=20)
    return reply.text


def _usd(musd: int) -> str:
    """What /limit takes: USD."""
    return str(Decimal(musd) / 1_000_000)


async def test_a_guarantee_over_the_team_limit_warns_and_keeps_only_what_the_team_may_spend(
    app_factory: AppFactory,
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
    bot_env: dict[str, str],
) -> None:
    """The answer's worst case ``c`` (from a refusal under a global day of $0.000001);
    team core limited to 10c a day and guaranteed 20c: the admin is told that only 10c
    is kept. Under a global day of 10c + $0.000001 an outsider is refused because of
    the kept share, and told so, while the member is answered; under 12c the outsider
    is answered (20c kept would have refused it)."""
    env = {k: v for k, v in bot_env.items() if not k.startswith(("GROQ_", "MISTRAL_", "CEREBRAS_"))}
    env.update(
        DEEPSEEK_API_KEY=DEEPSEEK_KEY,
        DEEPSEEK_BASE_URL=fake_providers.base_urls["deepseek"],
        ADMIN_IDS=str(ADMIN),
    )
    bot = app_factory(env=env)
    await bot.start()
    assert "Limit set" in await _ask(fake_telegram, ADMIN, "/limit global day 0.000001")
    probe = await _ask(fake_telegram, OUTSIDER, QUESTION)
    found = re.search(r"may cost up to \$(\d+\.\d{6})", probe)
    assert found, probe
    ceiling = int(Decimal(found.group(1)) * 1_000_000)

    assert "is in team core" in await _ask(fake_telegram, ADMIN, f"/team core add {MEMBER}")
    limit = 10 * ceiling
    set_limit = await _ask(fake_telegram, ADMIN, f"/limit team core day {_usd(limit)}")
    assert "Limit set" in set_limit, set_limit
    asked = await _ask(fake_telegram, ADMIN, f"/team core guarantee day {_usd(2 * limit)}")
    assert asked.startswith(
        f"Team core: {usd(limit)} of the global day limit is kept for it while it has not used it."
    ), asked
    assert (
        f"team core's guarantee of {usd(2 * limit)} per day is more than its own day limit"
        f" {usd(limit)}: the team cannot spend more than its limit, so only"
        f" {usd(limit)} of the global day is kept for it" in asked
    ), asked

    set_global = f"/limit global day {_usd(limit + 1)}"
    assert "Limit set" in await _ask(fake_telegram, ADMIN, set_global)
    kept = await _ask(fake_telegram, OUTSIDER, QUESTION)
    assert kept.startswith(
        "🚫 Not enough of the bot's global daily limit is free: the rest is kept for a team's"
        " guaranteed share."
    ), kept
    assert "is reached" not in kept
    assert await _ask(fake_telegram, MEMBER, QUESTION) == f"echo: {QUESTION}"

    set_global = f"/limit global day {_usd(limit + 2 * ceiling)}"
    assert "Limit set" in await _ask(fake_telegram, ADMIN, set_global)
    assert await _ask(fake_telegram, OUTSIDER, QUESTION) == f"echo: {QUESTION}"
    assert await bot.stop() == 0


async def test_a_runtime_global_limit_is_named_at_every_start_and_default_goes_back(
    app_factory: AppFactory, fake_telegram: FakeTelegram, bot_env: dict[str, str]
) -> None:
    """``BUDGET_GLOBAL_DAILY_USD=5``, then ``/limit global day off`` (kept in the
    database): after a restart the start logs one WARNING naming it, /budget says the
    runtime value is used instead of the setting, and ``/limit global day default``
    goes back to $5 — /budget then shows the setting's limit and no override line."""
    bot = app_factory(env=dict(bot_env, ADMIN_IDS=str(ADMIN), BUDGET_GLOBAL_DAILY_USD="5"))
    await bot.start()
    assert "runtime limits override" not in bot.logs()
    assert "Limit set: global day = off" in await _ask(
        fake_telegram, ADMIN, "/limit global day off"
    )
    assert await bot.restart() == 0
    warned = [line for line in bot.logs().splitlines() if "runtime limits override" in line]
    assert len(warned) == 1 and " WARNING " in warned[0], warned
    said = (
        "global day: the runtime limit off (/limit) is used, not BUDGET_GLOBAL_DAILY_USD"
        " $5.000000; /limit global day default goes back to it"
    )
    assert said in warned[0], warned
    report = await _ask(fake_telegram, ADMIN, "/budget")
    assert "⚙️ " + said in report, report
    assert "global day: settled $0.000000, held $0.000000, limit —" in report, report
    assert "LLM requests today, digests' included: 0 (" in report, report

    back = await _ask(fake_telegram, ADMIN, "/limit global day default")
    assert back == (
        "Runtime limit removed: global day follows BUDGET_GLOBAL_DAILY_USD again ($5.000000)."
    ), back
    report = await _ask(fake_telegram, ADMIN, "/budget")
    assert "global day: settled $0.000000, held $0.000000, limit $5.000000" in report, report
    assert "⚙️" not in report
    assert await bot.stop() == 0
