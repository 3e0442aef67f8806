"""Plans and group budgets through the real bot: two users on ``free`` and ``pro`` under
one burst, each stopped at its own plan's daily limit; ten members of one group under a
group day limit that fits three; the month's reset at local midnight; a bad
``PLANS_FILE`` exits 2 in one line."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tests.e2e.test_access import _send
from tests.support.harness import run_bot_to_exit
from tests.support.inprocess import AppFactory
from tests.support.providers import FakeProviders
from tests.support.telegram import FakeTelegram

ADMIN = 1
GROUP = -1009876543210
MENTION: dict[str, Any] = {
    "entities": [{"type": "mention", "offset": 0, "length": len("@kopek_test_bot")}]
}
PLANS = """
default = "free"

[free]
day_usd = 0.05
concurrency = 20
messages_per_minute = 100

[pro]
title = "Pro"
day_usd = 0.15
concurrency = 20
messages_per_minute = 100
"""


def _paid_env(bot_env: dict[str, str], tmp_path: Path, **extra: str) -> dict[str, str]:
    """Only DeepSeek answers (the free keys are left out), at $10/$20 per 1M tokens: a
    chat hold is at least 1,024 × 20 = 20,480 µUSD."""
    plans = tmp_path / "plans.toml"
    plans.write_text(PLANS, encoding="utf-8")
    env = dict(
        bot_env,
        ADMIN_IDS=str(ADMIN),
        PLANS_FILE=str(plans),
        AUTO_KILL_FRACTION="0",
        DEGRADED_MIN_OUTPUT_TOKENS="1024",
        CHAT_MAX_OUTPUT_TOKENS="1024",
        PRICE_OVERRIDES='{"deepseek:deepseek-chat": '
        '{"input": "10", "cached_input": "1", "output": "20"}}',
        USER_QUEUE_MAX="50",
        **extra,
    )
    for name in ("GROQ_API_KEY", "GROQ_API_KEY_2", "MISTRAL_API_KEY", "CEREBRAS_API_KEY"):
        env.pop(name, None)
    return env


class _ShiftedClock:
    """The system clock moved to another instant (``shift_to``), then running at real
    pace: the bot's loops sleep for real."""

    def __init__(self, at: datetime) -> None:
        self._offset = at - datetime.now(UTC)

    def shift_to(self, at: datetime) -> None:
        self._offset = at - datetime.now(UTC)

    def now(self) -> datetime:
        return datetime.now(UTC) + self._offset

    def monotonic(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))


def _settled(db: Path, sql: str, *args: object) -> int:
    with sqlite3.connect(db) as conn:
        return int(conn.execute(sql, args).fetchone()[0] or 0)


async def test_free_and_pro_in_one_burst_each_stop_at_their_own_plan(
    app_factory: AppFactory,
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
    bot_env: dict[str, str],
    tmp_path: Path,
) -> None:
    """User 10 on ``free`` ($0.05 a day), user 20 put on ``pro`` ($0.15) by /plan; each
    sends 8 messages at once. Each one's settled spend is within its plan's limit to the
    µUSD; free gets at most 2 answers, pro more; every refusal names the user's daily
    limit; DeepSeek saw exactly the answered messages."""
    fake_providers.script("deepseek", *[{"text": "paid", "completion_tokens": 1024}] * 40)
    bot = app_factory(env=_paid_env(bot_env, tmp_path))
    await bot.start()
    mark = fake_telegram.mark()
    fake_telegram.inject_message(ADMIN, "/plan 20 pro")
    [done] = await fake_telegram.wait_sent(ADMIN, since=mark, timeout=20)
    assert "User 20 is on pro" in done.text
    mark = fake_telegram.mark()
    for i in range(8):
        for user in (10, 20):
            fake_telegram.inject_message(user, f"question {i} from {user}")
    replies = {u: await fake_telegram.wait_sent(u, 8, since=mark, timeout=90) for u in (10, 20)}
    answered = {u: [m for m in replies[u] if m.text == "paid"] for u in (10, 20)}
    for user in (10, 20):
        for refused in (m for m in replies[user] if m.text != "paid"):
            assert "daily user limit" in refused.text or "Busy" in refused.text, refused.text
    assert 1 <= len(answered[10]) <= 2 < len(answered[20]) <= 7
    db = Path(bot_env["DATABASE_URL"].split("///", 1)[1])
    spent = "SELECT SUM(actual_musd) FROM budget_holds WHERE user_id = ? AND state = 'settled'"
    assert _settled(db, spent, 10) <= 50_000
    assert _settled(db, spent, 20) <= 150_000
    assert len(fake_providers.requests_for("deepseek")) == len(answered[10]) + len(answered[20])
    mark = fake_telegram.mark()
    fake_telegram.inject_message(20, "/me")
    [me] = await fake_telegram.wait_sent(20, since=mark, timeout=20)
    assert "Plan: Pro" in me.text and "$0.150000" in me.text


async def test_ten_members_of_a_group_under_a_limit_that_fits_three(
    app_factory: AppFactory,
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
    bot_env: dict[str, str],
    tmp_path: Path,
) -> None:
    """/limit chat GROUP day 0.075: three holds of 21,000 µUSD with their provable-bound
    margins (~1,340 each) fit, a fourth does not, even once others settled (~20,910
    each); ten members mention the bot at once; exactly three are answered, the group's
    spend is within its limit, the other seven are told the group's daily limit stopped
    them; /budget chat shows the group."""
    fake_providers.script("deepseek", *[{"text": "paid", "completion_tokens": 1024}] * 20)
    bot = app_factory(env=_paid_env(bot_env, tmp_path))
    await bot.start()
    mark = fake_telegram.mark()
    fake_telegram.inject_message(ADMIN, f"/limit chat {GROUP} day 0.075")
    [done] = await fake_telegram.wait_sent(ADMIN, since=mark, timeout=20)
    assert "Limit set: chat" in done.text
    mark = fake_telegram.mark()
    for user in range(300, 310):
        fake_telegram.inject_message(
            user, "@kopek_test_bot hi", chat_id=GROUP, chat_type="supergroup", **MENTION
        )
    replies = await fake_telegram.wait_sent(GROUP, 10, since=mark, timeout=90)
    answered = [m for m in replies if m.text == "paid"]
    refused = [m.text for m in replies if m.text != "paid"]
    assert len(answered) == 3, [m.text for m in replies]
    assert all("this group's daily limit" in t or "Busy" in t for t in refused), refused
    assert any("this group's daily limit" in t for t in refused)
    db = Path(bot_env["DATABASE_URL"].split("///", 1)[1])
    group_spend = _settled(
        db,
        "SELECT settled_musd FROM budget_buckets WHERE level = 'chat' AND scope = ?"
        " AND win = 'day'",
        str(GROUP),
    )
    assert 0 < group_spend <= 75_000
    mark = fake_telegram.mark()
    fake_telegram.inject_message(ADMIN, f"/budget chat {GROUP}")
    [report] = await fake_telegram.wait_sent(ADMIN, since=mark, timeout=20)
    assert f"Group {GROUP}" in report.text and "limit $0.075000" in report.text


async def test_the_month_resets_at_local_midnight_in_budget_tz(
    app_factory: AppFactory,
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
    bot_env: dict[str, str],
    tmp_path: Path,
) -> None:
    """BUDGET_TZ Europe/Berlin, BUDGET_USER_MONTHLY_USD 0.03 (one paid answer): the second
    message of 31 March is refused naming the monthly limit and its reset, 1 April 00:00
    CEST (printed in Berlin time with the date); at 00:00:30 CEST — 22:00:30 UTC, still
    31 March in UTC — the user is answered again."""
    clock = _ShiftedClock(datetime(2026, 3, 31, 21, 50, tzinfo=UTC))
    fake_providers.script("deepseek", *[{"text": "paid", "completion_tokens": 1024}] * 4)
    env = _paid_env(bot_env, tmp_path, BUDGET_TZ="Europe/Berlin", BUDGET_USER_MONTHLY_USD="0.03")
    fake_telegram.clock = clock
    bot = app_factory(env=env, clock=clock)
    await bot.start()
    for text, expected in (("first", "paid"), ("second", "monthly user limit")):
        mark = fake_telegram.mark()
        fake_telegram.inject_message(5, text)
        [reply] = await fake_telegram.wait_sent(5, since=mark, timeout=30)
        assert expected in reply.text, reply.text
    assert "2026-04-01 00:00 Europe/Berlin" in reply.text
    clock.shift_to(datetime(2026, 3, 31, 22, 0, 30, tzinfo=UTC))
    mark = fake_telegram.mark()
    fake_telegram.inject_message(5, "third")
    [reply] = await fake_telegram.wait_sent(5, since=mark, timeout=30)
    assert reply.text == "paid"


async def test_a_bad_plans_file_exits_2_in_one_line(
    bot_env: dict[str, str], tmp_path: Path
) -> None:
    """A plan with a negative day limit: exit 2 before anything is touched, one line
    naming the file, the plan and the field."""
    plans = tmp_path / "plans.toml"
    plans.write_text('default = "free"\n[free]\n[gold]\nday_usd = -1\n', encoding="utf-8")
    env = dict(bot_env, PLANS_FILE=str(plans), LOG_LEVEL="INFO")
    code, output = await run_bot_to_exit(env, tmp_path)
    assert code == 2
    lines = [line for line in output.splitlines() if line.strip()]
    assert len(lines) == 1, output
    assert "PLANS_FILE" in lines[0] and "'gold'" in lines[0] and "'day_usd'" in lines[0]


async def test_a_plan_title_with_a_bidi_override_exits_2_in_one_line(
    bot_env: dict[str, str], tmp_path: Path
) -> None:
    """A title holding U+202E (it would show /me's and /plan list's line reversed) or a
    line break: exit 2 in one line naming the plan, the field and the character, as
    every other bad value of the file."""
    for title, shown in (('"Gold\u202e"', "<U+202E>"), ('"Gold\\nline"', "<U+000A>")):
        plans = tmp_path / "plans.toml"
        plans.write_text(f'default = "free"\n[free]\n[gold]\ntitle = {title}\n', encoding="utf-8")
        env = dict(bot_env, PLANS_FILE=str(plans), LOG_LEVEL="INFO")
        code, output = await run_bot_to_exit(env, tmp_path)
        assert code == 2, output
        lines = [line for line in output.splitlines() if line.strip()]
        assert len(lines) == 1, output
        assert "'gold'" in lines[0] and "'title'" in lines[0] and shown in lines[0], lines[0]
        assert "\u202e" not in output


async def test_a_plan_without_media_is_told_so_before_a_link_is_fetched(
    app_factory: AppFactory,
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
    bot_env: dict[str, str],
    tmp_path: Path,
) -> None:
    """``media = false``: a one-link message gets the plan's template (no page fetched,
    no provider request, nothing held); typed text is answered as before."""
    plans = tmp_path / "plans.toml"
    plans.write_text('default = "basic"\n[basic]\ntitle = "Basic"\nmedia = false\n')
    bot = app_factory(env=dict(bot_env, PLANS_FILE=str(plans)))
    await bot.start()
    [said] = await _send(fake_telegram, 61, "https://example.com/an-article")
    assert "Basic" in said and "does not include" in said and "links" in said
    assert fake_providers.requests == []
    db = Path(bot_env["DATABASE_URL"].split("///", 1)[1])
    assert _settled(db, "SELECT COUNT(*) FROM budget_holds") == 0
    fake_providers.script("groq", {"text": "Typed is fine."})
    assert await _send(fake_telegram, 61, "and typed text?") == ["Typed is fine."]
