"""Arguments a stranger types, through the real bot: a persona of invisible characters
only, /sub and /unsub arguments with direction marks or zero-width characters in
them, private addresses that must not spend the user's look-ups, and an admin's
/digest_now under the kill switch, which has no reset to wait for."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from tests.support.inprocess import AppFactory
from tests.support.providers import FakeProviders
from tests.support.telegram import FakeTelegram
from tests.support.tme import FakeTme, TmePost

ADMIN = 1
PERSONA_USAGE = "Write the persona after the command: /persona custom"


async def _ask(tg: FakeTelegram, user: int, text: str) -> str:
    mark = tg.mark()
    tg.inject_message(user, text)
    [reply] = await tg.wait_sent(user, since=mark, timeout=30)
    return reply.text


def _channel(tme: FakeTme, name: str) -> None:
    now = datetime.now(UTC)
    posts = [
        TmePost(post_id=100 + i, date=now - timedelta(hours=2 - i), text=f"Post {i}: news.")
        for i in range(2)
    ]
    tme.add_posts(name, posts, title=f"{name.title()} News")


async def test_a_persona_of_invisible_characters_only_gets_the_usage(
    app_factory: AppFactory, fake_telegram: FakeTelegram, fake_providers: FakeProviders
) -> None:
    """``/persona custom`` followed by zero-width spaces, a word joiner, a byte order
    mark and direction marks is refused with the persona usage template; the chat keeps
    the default persona and no provider is asked."""
    bot = app_factory()
    await bot.start()
    for invisible in ("\u200b\u200b", "\u2060\ufeff", "\u200e\u200f\u200b"):
        reply = await _ask(fake_telegram, 41, f"/persona custom {invisible}")
        assert reply.startswith(PERSONA_USAGE), reply
    menu = await _ask(fake_telegram, 41, "/persona")
    assert "\u200b" not in menu
    assert not fake_providers.requests
    assert await bot.stop() == 0


async def test_sub_and_unsub_read_an_argument_with_invisible_marks_alike(
    app_factory: AppFactory, fake_telegram: FakeTelegram, fake_tme: FakeTme
) -> None:
    """A right-to-left mark before the channel and a zero-width space after it: /sub
    subscribes and /unsub unsubscribes; an /unsub argument that is only marks, or junk,
    gets /unsub's usage, not /sub's."""
    _channel(fake_tme, "harbour")
    bot = app_factory()
    await bot.start()
    await _ask(fake_telegram, 42, "/digest_off")
    assert "Subscribed" in await _ask(fake_telegram, 42, "/sub \u200f@harbour\u200b")
    assert "@harbour" in await _ask(fake_telegram, 42, "/subs")
    assert "Unsubscribed" in await _ask(fake_telegram, 42, "/unsub \u200f@harbour\u200b")
    for junk in ("\u200f", "\u200f!!"):
        reply = await _ask(fake_telegram, 42, f"/unsub {junk}")
        assert reply.startswith("Usage: /unsub @channel"), reply
    assert await bot.stop() == 0


async def test_private_addresses_refused_before_any_lookup_spend_no_lookup(
    app_factory: AppFactory,
    fake_telegram: FakeTelegram,
    fake_tme: FakeTme,
    bot_env: dict[str, str],
) -> None:
    """SUB_LOOKUPS_PER_MINUTE=1: four /sub of literal loopback and private addresses
    are each refused as not allowed, and the one look-up of the minute is still there
    for a real channel, which subscribes; the next look-up is then rate limited."""
    _channel(fake_tme, "harbour")
    bot = app_factory(env=dict(bot_env, SUB_LOOKUPS_PER_MINUTE="1"))
    await bot.start()
    await _ask(fake_telegram, 43, "/digest_off")
    for url in (
        "http://127.0.0.1/feed",
        "http://10.0.0.1/rss",
        "http://[::1]/a",
        "http://0.0.0.0/",
    ):
        reply = await _ask(fake_telegram, 43, f"/sub {url}")
        assert "not allowed" in reply, (url, reply)
    assert "Subscribed" in await _ask(fake_telegram, 43, "/sub @harbour")
    assert "Too many /sub look-ups" in await _ask(fake_telegram, 43, "/sub @another")
    assert await bot.stop() == 0


async def test_digest_now_under_the_kill_switch_says_how_it_is_lifted(
    app_factory: AppFactory,
    fake_telegram: FakeTelegram,
    fake_tme: FakeTme,
    fake_providers: FakeProviders,
    bot_env: dict[str, str],
) -> None:
    """/kill, then /digest_now for a subscriber: the progress message ends saying the
    kill switch postponed it and that it goes out once lifted with /unkill — not "when
    the limit resets", which a kill never does; no provider is asked."""
    _channel(fake_tme, "harbour")
    bot = app_factory(env=dict(bot_env, ADMIN_IDS=str(ADMIN), DIGEST_STAGGER_SECONDS="0"))
    await bot.start()
    await _ask(fake_telegram, 44, "/digest_off")
    assert "Subscribed" in await _ask(fake_telegram, 44, "/sub @harbour")
    assert "Kill switch ON" in await _ask(fake_telegram, ADMIN, "/kill drill")
    mark = fake_telegram.mark()
    fake_telegram.inject_message(ADMIN, "/digest_now 44")
    final = await fake_telegram.wait_for(
        lambda m: m.chat_id == ADMIN and "kill switch is on" in m.text, since=mark, timeout=60
    )
    assert "once an admin lifts it (/unkill)" in final.text, final.text
    assert "limit resets" not in final.text
    assert not fake_providers.requests
    assert await bot.stop() == 0
