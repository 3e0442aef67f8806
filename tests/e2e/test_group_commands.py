"""Commands for other bots: in groups, commands addressed to another bot and
unknown commands get nothing — through the bot built by create_app against the fake Bot API."""

from __future__ import annotations

from tests.support.groups import BOT, drain
from tests.support.inprocess import AppFactory
from tests.support.providers import FakeProviders
from tests.support.telegram import FakeTelegram

ADMIN = 1


async def test_commands_for_other_bots_and_unknown_commands_get_nothing_in_groups(
    app_factory: AppFactory,
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
    bot_env: dict[str, str],
) -> None:
    """In a group: /help@other_bot, /kill@other_bot (from an admin) and /frobnicate →
    0 messages, and the kill switch stays off; /help@kopek_test_bot → exactly one reply.
    In a private chat /frobnicate still gets "Unknown command"."""
    bot = app_factory(env=dict(bot_env, ADMIN_IDS=str(ADMIN)))
    await bot.start()
    group = -1001234
    mark = fake_telegram.mark()
    fake_telegram.inject_message(5, "/help@other_bot", chat_id=group, chat_type="supergroup")
    fake_telegram.inject_message(
        ADMIN, "/kill@other_bot because", chat_id=group, chat_type="supergroup"
    )
    fake_telegram.inject_message(5, "/frobnicate", chat_id=group, chat_type="supergroup")
    fake_telegram.inject_message(ADMIN, "/budget@other_bot", chat_id=group, chat_type="supergroup")
    await drain(fake_telegram, -1009999)
    assert fake_telegram.sent_events(group, since=mark) == []

    mark = fake_telegram.mark()
    fake_telegram.inject_message(5, f"/help@{BOT}", chat_id=group, chat_type="supergroup")
    [help_reply] = await fake_telegram.wait_sent(group, since=mark)
    assert "/me" in help_reply.text
    await drain(fake_telegram, -1009999)
    assert len(fake_telegram.sent_events(group, since=mark)) == 1

    mark = fake_telegram.mark()
    fake_telegram.inject_message(5, "/frobnicate")
    [unknown] = await fake_telegram.wait_sent(5, since=mark)
    assert unknown.text == "Unknown command. See /help."

    # /kill@other_bot never ran: the kill switch is off and chat is answered
    mark = fake_telegram.mark()
    fake_telegram.inject_message(ADMIN, "/budget")
    [report] = await fake_telegram.wait_sent(ADMIN, since=mark, timeout=20)
    assert "Kill switch: off" in report.text
    mark = fake_telegram.mark()
    fake_telegram.inject_message(5, "still there?")
    [answer] = await fake_telegram.wait_sent(5, since=mark, timeout=20)
    assert answer.text.startswith("echo: still there?")
    assert await bot.stop() == 0
