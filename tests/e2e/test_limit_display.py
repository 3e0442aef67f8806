"""What is left of a limit lowered below the spend, amounts typed in other scripts'
digits, and a kill reason that tries to forge a log line, through the real bot."""

from __future__ import annotations

import logging
import re

import pytest

from tests.support.inprocess import AppFactory
from tests.support.providers import FakeProviders
from tests.support.telegram import FakeTelegram

ADMIN = 1
USER = 42
DEEPSEEK_KEY = "fake_deepseek_key"


async def _ask(tg: FakeTelegram, user: int, text: str) -> str:
    mark = tg.mark()
    tg.inject_message(user, text)
    [reply] = await tg.wait_sent(user, since=mark, timeout=20)
    return reply.text


async def test_a_limit_lowered_below_the_spend_shows_nothing_left_and_the_overrun(
    app_factory: AppFactory,
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
    bot_env: dict[str, str],
) -> None:
    """A paid answer, then the user's day limit lowered to $0.000001: /me says the
    limit is reached and by how much, /budget user says $0 remaining and the overrun;
    neither shows a negative amount."""
    env = {k: v for k, v in bot_env.items() if not k.startswith(("GROQ_", "MISTRAL_", "CEREBRAS_"))}
    env.update(
        DEEPSEEK_API_KEY=DEEPSEEK_KEY,
        DEEPSEEK_BASE_URL=fake_providers.base_urls["deepseek"],
        ADMIN_IDS=str(ADMIN),
    )
    bot = app_factory(env=env)
    await bot.start()
    fake_providers.script(
        DEEPSEEK_KEY, {"text": "Paid.", "prompt_tokens": 900, "completion_tokens": 400}
    )
    assert await _ask(fake_telegram, USER, "Tell me something") == "Paid."
    assert "Limit set" in await _ask(fake_telegram, ADMIN, f"/limit user {USER} day 0.000001")

    me = await _ask(fake_telegram, USER, "/me")
    assert "limit reached (over by $0.000" in me
    assert "$-" not in me and "-$" not in me
    report = await _ask(fake_telegram, ADMIN, f"/budget user {USER}")
    assert "remaining $0.000000 (over by $0.000" in report
    assert "$-" not in report and "-$" not in report
    assert await bot.stop() == 0


async def test_amounts_and_ids_in_non_ascii_digits_are_refused(
    app_factory: AppFactory, fake_telegram: FakeTelegram, bot_env: dict[str, str]
) -> None:
    """Fullwidth and Arabic-Indic digits are refused with the usage line, as /team and
    ADMIN_IDS refuse them; nothing is set."""
    bot = app_factory(env=dict(bot_env, ADMIN_IDS=str(ADMIN)))
    await bot.start()
    for amount in ("１", "١", "٠.٥", "0.٥"):
        reply = await _ask(fake_telegram, ADMIN, f"/limit global day {amount}")
        assert "The amount is USD" in reply, amount
    assert "user id" in await _ask(fake_telegram, ADMIN, "/team core add ٤٢")
    assert "Limit set" not in await _ask(fake_telegram, ADMIN, "/limit user ４２ day 1")
    report = await _ask(fake_telegram, ADMIN, "/budget")
    assert "limit $1.000000" not in report
    assert await bot.stop() == 0


async def test_a_kill_reason_is_one_bounded_line_in_the_reply_the_books_and_the_log(
    app_factory: AppFactory,
    fake_telegram: FakeTelegram,
    bot_env: dict[str, str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A /kill reason with a newline and a forged log line, a right-to-left override and
    5,000 characters is kept as one line of at most 200 characters: the log gets one
    kill line and no forged one, the reply shows the cleaned reason."""
    caplog.set_level(logging.WARNING, logger="bot.ops.killswitch")
    bot = app_factory(env=dict(bot_env, ADMIN_IDS=str(ADMIN)))
    await bot.start()
    forged = "2026-12-02 02:11:00,000 WARNING bot.ops.killswitch: kill switch reset"
    reply = await _ask(fake_telegram, ADMIN, f"/kill oops\n{forged}\u202e{'x' * 5000}")
    assert reply.startswith("⛔ Kill switch ON (oops 2026-12-02") and "\u202e" not in reply
    lines = [r.getMessage() for r in caplog.records if r.name == "bot.ops.killswitch"]
    assert len(lines) == 1 and "\n" not in lines[0] and "\u202e" not in lines[0]
    kept = lines[0].split(": ", 1)[1]
    assert len(kept) == 200 and kept.startswith("oops 2026-12-02")
    assert await bot.stop() == 0


async def test_budget_gives_a_monthly_window_its_reset_date(
    app_factory: AppFactory,
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
    bot_env: dict[str, str],
) -> None:
    """/budget's month rows say the date they reset on (the first of next month), not only
    a time that reads as tonight; its day rows keep the time alone, as /me does."""
    env = {k: v for k, v in bot_env.items() if not k.startswith(("GROQ_", "MISTRAL_", "CEREBRAS_"))}
    env.update(
        DEEPSEEK_API_KEY=DEEPSEEK_KEY,
        DEEPSEEK_BASE_URL=fake_providers.base_urls["deepseek"],
        ADMIN_IDS=str(ADMIN),
        BUDGET_GLOBAL_MONTHLY_USD="10",
        BUDGET_GLOBAL_DAILY_USD="1",
    )
    bot = app_factory(env=env)
    await bot.start()
    fake_providers.script(
        DEEPSEEK_KEY, {"text": "Paid.", "prompt_tokens": 90, "completion_tokens": 40}
    )
    assert await _ask(fake_telegram, USER, "Tell me something") == "Paid."
    report = await _ask(fake_telegram, ADMIN, "/budget")
    [month] = [line for line in report.splitlines() if line.startswith("• global month")]
    assert re.search(r"resets \d{4}-\d{2}-\d{2} \d{2}:\d{2} \S+$", month), month
    [day] = [line for line in report.splitlines() if line.startswith("• global day")]
    assert re.search(r"resets \d{2}:\d{2} \S+$", day), day
    assert await bot.stop() == 0
