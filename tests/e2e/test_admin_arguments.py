"""An admin command with a wrong argument says what is wrong with it, through the real
bot: not only the usage line, and nothing is created or stored."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from tests.support.inprocess import AppFactory, InProcessBot
from tests.support.telegram import FakeTelegram

ADMIN = 1


async def _ask(tg: FakeTelegram, text: str) -> str:
    mark = tg.mark()
    tg.inject_message(ADMIN, text)
    [reply] = await tg.wait_sent(ADMIN, since=mark, timeout=20)
    return reply.text


def _count(bot_env: dict[str, str], sql: str) -> int:
    path = Path(bot_env["DATABASE_URL"].split("///", 1)[1])
    with sqlite3.connect(path) as conn:
        return int(conn.execute(sql).fetchone()[0])


async def _start(app_factory: AppFactory, bot_env: dict[str, str]) -> InProcessBot:
    bot = app_factory(env=dict(bot_env, ADMIN_IDS=str(ADMIN), ACCESS_MODE="allowlist"))
    await bot.start()
    return bot


async def test_invite_and_plan_say_which_argument_is_wrong(
    app_factory: AppFactory, fake_telegram: FakeTelegram, bot_env: dict[str, str]
) -> None:
    await _start(app_factory, bot_env)
    unknown = await _ask(fake_telegram, "/invite 2 nosuchplan")
    assert "No plan 'nosuchplan'" in unknown and "pro" in unknown, unknown
    negative = await _ask(fake_telegram, "/invite 3 pro -5h")
    assert "-5h" in negative and "positive" in negative, negative
    below = await _ask(fake_telegram, "/invite -1")
    assert "-1" in below and "at least 1" in below, below
    zero = await _ask(fake_telegram, "/invite 0")
    assert "at least 1" in zero, zero
    assert _count(bot_env, "SELECT COUNT(*) FROM access_invites") == 0
    past = await _ask(fake_telegram, "/plan 42 pro 2020-01-01")
    assert "2020-01-01" in past and "in the past" in past, past
    minus = await _ask(fake_telegram, "/plan 42 pro -30d")
    assert "-30d" in minus and "positive" in minus, minus
    assert "No plan 'gold'" in await _ask(fake_telegram, "/plan 42 gold")
    me = await _ask(fake_telegram, "/plan list")
    assert "pro" in me


async def test_a_limit_for_a_team_that_does_not_exist_is_refused_and_nothing_stored(
    app_factory: AppFactory, fake_telegram: FakeTelegram, bot_env: dict[str, str]
) -> None:
    """A limit nobody is under, that no command shows, would be a typo kept silently."""
    await _start(app_factory, bot_env)
    before = _count(bot_env, "SELECT COUNT(*) FROM budget_limits")
    refused = await _ask(fake_telegram, "/limit team nope day 1")
    assert "No team named nope" in refused and "/team nope add" in refused, refused
    assert _count(bot_env, "SELECT COUNT(*) FROM budget_limits") == before
    assert "is in team ops" in await _ask(fake_telegram, "/team ops add 42")
    with_one = await _ask(fake_telegram, "/limit team nope day 1")
    assert "the teams are ops" in with_one, with_one
    assert "Limit set: team ops day = $1.00" in await _ask(fake_telegram, "/limit team ops day 1")
    assert _count(bot_env, "SELECT COUNT(*) FROM budget_limits") == before + 1


async def test_allow_and_plan_of_a_banned_user_name_the_user_and_say_it_is_still_refused(
    app_factory: AppFactory, fake_telegram: FakeTelegram, bot_env: dict[str, str]
) -> None:
    await _start(app_factory, bot_env)
    assert "banned" in await _ask(fake_telegram, "/ban 77 spam")
    allowed = await _ask(fake_telegram, "/allow 77")
    assert "User 77 is banned: still refused until /unban 77." in allowed, allowed
    assert " It " not in allowed
    planned = await _ask(fake_telegram, "/plan 77 pro")
    assert "User 77 is on pro" in planned
    assert "User 77 is banned: still refused until /unban 77." in planned, planned
    assert "banned" not in await _ask(fake_telegram, "/plan 78 pro")


async def test_prices_of_a_speech_model_are_per_audio_time_and_rounded(
    app_factory: AppFactory, fake_telegram: FakeTelegram, bot_env: dict[str, str]
) -> None:
    """A speech model's "tokens" are audio seconds: its price is per hour and per minute
    of audio, not $11.1111… per 1M tokens."""
    await _start(app_factory, bot_env)
    prices = await _ask(fake_telegram, "/providers prices")
    whispers = [line for line in prices.splitlines() if "whisper" in line]
    assert whispers, prices
    for line in whispers:  # the second Groq key's whisper too
        assert "$0.04 per hour of audio ($0.000667 per minute)" in line, line
    assert "11.11" not in prices


async def test_the_start_up_price_lines_give_every_keys_speech_model_per_audio_time(
    app_factory: AppFactory, bot_env: dict[str, str]
) -> None:
    """The start-up log's price card: the whisper model of both Groq keys (``groq`` and
    the second key ``groq2``) is stated per hour of audio, never per 1M tokens
    ($11.11… per 1M of its audio seconds); the chat models keep their per-1M-tokens
    unit."""
    bot = await _start(app_factory, bot_env)
    lines = [line for line in bot.logs().splitlines() if "price card: " in line]
    whispers = [line for line in lines if "whisper" in line]
    assert {line.split("price card: ", 1)[1].split(":", 1)[0] for line in whispers} >= {
        "groq",
        "groq2",
    }, whispers
    for line in whispers:
        assert "$0.04 per hour of audio" in line and "1M tokens" not in line, line
    assert not any("11.11" in line for line in lines), lines
    assert any("per 1M tokens" in line for line in lines if "whisper" not in line), lines


async def test_a_charge_id_longer_than_any_payment_can_have_is_refused_without_a_traceback(
    app_factory: AppFactory, fake_telegram: FakeTelegram, bot_env: dict[str, str]
) -> None:
    """/refund with 129 characters (the ledger keeps at most 128) is told so in the
    usage template, costs nothing and leaves no ERROR in the log; 128 characters is a
    charge id like any other (no payment has it). The other admin commands that take a
    free-text name or id answer a 300-character one with their own refusal."""
    bot = await _start(app_factory, bot_env)
    long = await _ask(fake_telegram, "/refund " + "c" * 129)
    assert "a charge id is at most 128 characters, this one is 129" in long, long
    assert "Usage: /refund <telegram_payment_charge_id>" in long, long
    assert "Something went wrong" not in long
    unknown = await _ask(fake_telegram, "/refund " + "c" * 128)
    assert unknown.startswith("No payment 'ccc"), unknown
    name = "x" * 300
    for text, said in [
        (f"/team {name} add 42", "Team names are 1-32"),
        (f"/team {name} guarantee day 1", "Team names are 1-32"),
        (f"/limit team {name} day 1", "Team names are 1-32"),
        (f"/limit plan {name} day 1", "No plan 'xxx"),
        (f"/plan 42 {name}", "No plan 'xxx"),
        (f"/providers enable {name}", "Unknown provider 'xxx"),
        (f"/alerts mute {name}", "Usage: /alerts"),
        (f"/budget team {name}", "No team 'xxx"),
        (f"/budget plan {name}", "No plan 'xxx"),
    ]:
        answer = await _ask(fake_telegram, text)
        assert said in answer, (text, answer)
    assert _count(bot_env, "SELECT COUNT(*) FROM budget_wallet_refunds") == 0
    assert _count(bot_env, "SELECT COUNT(*) FROM budget_holds") == 0
    assert "ERROR" not in bot.logs() and "Traceback" not in bot.logs(), bot.logs()
