"""Digests through the real bot process, the fake t.me and the fake providers."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from tests.support.inprocess import AppFactory
from tests.support.providers import FakeProviders
from tests.support.telegram import FakeTelegram
from tests.support.tme import FakeTme, TmePost

ADMIN = 1


async def _ask(tg: FakeTelegram, user: int, text: str, timeout: float = 30.0) -> str:  # noqa: ASYNC109
    mark = tg.mark()
    tg.inject_message(user, text)
    [reply] = await tg.wait_sent(user, since=mark, timeout=timeout)
    return reply.text


def _channel(tme: FakeTme, name: str, count: int = 4) -> None:
    now = datetime.now(UTC)
    posts = [
        TmePost(
            post_id=100 + i,
            date=now - timedelta(hours=count - i),
            text=f"Post {i} of {name}: the council approved budget item {i} after a long debate.",
        )
        for i in range(count)
    ]
    tme.add_posts(name, posts, title=f"{name.title()} News")


def _env(bot_env: dict[str, str], **extra: str) -> dict[str, str]:
    return dict(bot_env, ADMIN_IDS=str(ADMIN), DIGEST_STAGGER_SECONDS="0", **extra)


async def test_two_subscribers_one_llm_request_per_post_even_across_a_restart(
    app_factory: AppFactory,
    fake_telegram: FakeTelegram,
    fake_tme: FakeTme,
    fake_providers: FakeProviders,
    bot_env: dict[str, str],
) -> None:
    """Users 51 and 52 follow the same channel; their digests (the second after a
    restart) together cost one LLM request per post; both get the summaries."""
    _channel(fake_tme, "citynews")
    env = _env(bot_env)
    bot = app_factory(env=env)
    await bot.start()
    for uid in (51, 52):
        await _ask(fake_telegram, uid, "/digest_off")  # only /digest_now sends, whatever the hour
        assert "Subscribed" in await _ask(fake_telegram, uid, "/sub @citynews")
    assert fake_providers.requests == []
    mark = fake_telegram.mark()
    fake_telegram.inject_message(ADMIN, "/digest_now 51")
    digest = await fake_telegram.wait_for(
        lambda m: m.chat_id == 51 and "Citynews News" in m.text, since=mark, timeout=60
    )
    assert "digest" in digest.text.lower()
    assert len(fake_providers.requests) == 4
    assert await bot.stop() == 0

    again = app_factory(env=env)
    await again.start()
    mark = fake_telegram.mark()
    fake_telegram.inject_message(ADMIN, "/digest_now 52")
    second = await fake_telegram.wait_for(
        lambda m: m.chat_id == 52 and "Citynews News" in m.text, since=mark, timeout=60
    )
    assert len(fake_providers.requests) == 4, "the cache served the second digest"
    summaries_51 = [line for line in digest.text.splitlines() if line.startswith("•")]
    summaries_52 = [line for line in second.text.splitlines() if line.startswith("•")]
    assert len(summaries_51) == len(summaries_52) == 4
    await again.stop()


async def test_digest_now_again_says_how_todays_run_ended_not_zero_posts(
    app_factory: AppFactory,
    fake_telegram: FakeTelegram,
    fake_tme: FakeTme,
    fake_providers: FakeProviders,
    bot_env: dict[str, str],
) -> None:
    """A second /digest_now the same day runs nothing and its progress message ends on
    how today's run ended ("already done today (sent)"); before, the final line was
    overwritten with "sent — 0 posts, 0 LLM calls". A user who never wrote to the bot
    keeps the step's own line."""
    _channel(fake_tme, "harbour", count=2)
    bot = app_factory(env=_env(bot_env))
    await bot.start()
    await _ask(fake_telegram, 56, "/digest_off")
    assert "Subscribed" in await _ask(fake_telegram, 56, "/sub @harbour")
    mark = fake_telegram.mark()
    fake_telegram.inject_message(ADMIN, "/digest_now 56")
    await fake_telegram.wait_for(
        lambda m: m.chat_id == ADMIN and m.text.startswith("Digest for 56: sent — 2 posts"),
        since=mark,
        timeout=60,
    )
    calls = len(fake_providers.requests)
    mark = fake_telegram.mark()
    finals = {
        56: "Digest for 56: already done today (sent)",
        57: "Digest for 57: this user has never written to the bot",
    }
    for target, final in finals.items():
        fake_telegram.inject_message(ADMIN, f"/digest_now {target}")
        await fake_telegram.wait_for(
            lambda m, final=final: m.chat_id == ADMIN and m.text == final,  # type: ignore[misc]
            since=mark,
            timeout=30,
        )
    assert await bot.stop() == 0  # drains the handlers: a later overwrite would be in
    last: dict[int, str] = {}
    for event in fake_telegram.sent_events(ADMIN, since=mark):
        last[event.message_id] = event.text
    assert sorted(last.values()) == sorted(finals.values())
    assert len(fake_providers.requests) == calls, "nothing ran again"


async def test_blocked_user_marked_inactive_and_the_run_goes_on(
    app_factory: AppFactory,
    fake_telegram: FakeTelegram,
    fake_tme: FakeTme,
    bot_env: dict[str, str],
) -> None:
    """Two users due at start; one has blocked the bot (403): the other still gets the
    digest, and the blocked one is not retried while inactive."""
    _channel(fake_tme, "portnews", count=2)
    env = _env(bot_env)
    bot = app_factory(env=env)
    await bot.start()
    for uid in (53, 54):
        await _ask(fake_telegram, uid, "/sub @portnews")
        await _ask(fake_telegram, uid, "/digest_time 00:00")
    assert await bot.stop() == 0
    fake_telegram.block(53)
    again = app_factory(env=env)
    mark = fake_telegram.mark()
    requests_mark = len(fake_telegram.requests())
    await again.start()
    await fake_telegram.wait_for(
        lambda m: m.chat_id == 54 and "Portnews News" in m.text, since=mark, timeout=60
    )
    assert "late" in fake_telegram.sent_events(54, since=mark)[0].text  # missed at 00:00
    assert [e for e in fake_telegram.sent_events(53, since=mark)] == []
    blocked = await fake_telegram.wait_request(
        "sendMessage", lambda r: r.chat_id == 53, since=requests_mark, timeout=30
    )
    assert blocked.status == 403
    attempts = [
        r
        for r in fake_telegram.requests()[requests_mark:]
        if r.method == "sendMessage" and r.chat_id == 53
    ]
    assert len(attempts) == 1, "one 403, then the user is inactive"
    await again.stop()


async def test_429_on_one_chat_delays_only_that_chat(
    app_factory: AppFactory,
    fake_telegram: FakeTelegram,
    fake_tme: FakeTme,
    bot_env: dict[str, str],
) -> None:
    """A 429 with retry_after 3 for user 55's chat: user 56's digest goes out first and
    55's after ≥ 3 s, with no call to 55's chat inside the flood wait."""
    _channel(fake_tme, "harbour", count=2)
    env = _env(bot_env)
    bot = app_factory(env=env)
    await bot.start()
    for uid in (55, 56):
        await _ask(fake_telegram, uid, "/sub @harbour")
        await _ask(fake_telegram, uid, "/digest_time 00:00")
    assert await bot.stop() == 0
    fake_telegram.fail_next("sendMessage", 429, retry_after=3, chat_id=55)
    again = app_factory(env=env)
    mark = fake_telegram.mark()
    requests_mark = len(fake_telegram.requests())
    await again.start()
    other = await fake_telegram.wait_for(
        lambda m: m.chat_id == 56 and "Harbour News" in m.text, since=mark, timeout=60
    )
    delayed = await fake_telegram.wait_for(
        lambda m: m.chat_id == 55 and "Harbour News" in m.text, since=mark, timeout=60
    )
    assert delayed.date >= other.date
    to_55 = [
        r
        for r in fake_telegram.requests()[requests_mark:]
        if r.method == "sendMessage" and r.chat_id == 55
    ]
    assert to_55[0].status == 429
    refused = to_55
    assert refused[1].monotonic - refused[0].monotonic >= 3.0
    assert fake_telegram.flood_violations() == []
    await again.stop()


async def test_sub_refuses_private_addresses_and_channels_without_preview(
    app_factory: AppFactory, fake_telegram: FakeTelegram, fake_tme: FakeTme
) -> None:
    """Feed URLs to 127.0.0.1 or 10.0.0.1 are refused (SSRF); a channel without a public
    preview gets a clear message; junk gets the usage line; /subs lists what is there."""
    fake_tme.set_no_preview("closedclub")
    _channel(fake_tme, "opennews", count=1)
    bot = app_factory()
    await bot.start()
    await _ask(fake_telegram, 57, "/digest_off")  # no scheduled digest mid-test
    for url in ("http://127.0.0.1:8080/feed.xml", "http://10.0.0.1/rss"):
        assert "not allowed" in await _ask(fake_telegram, 57, f"/sub {url}")
    assert "no public web preview" in await _ask(fake_telegram, 57, "/sub @closedclub")
    assert "Usage: /sub" in await _ask(fake_telegram, 57, "/sub !!")
    assert "Subscribed" in await _ask(fake_telegram, 57, "/sub https://t.me/opennews")
    subs = await _ask(fake_telegram, 57, "/subs")
    assert "@opennews" in subs and "closedclub" not in subs
    assert "Unsubscribed" in await _ask(fake_telegram, 57, "/unsub @opennews")
    await bot.stop()


async def test_sub_of_a_host_that_does_not_resolve_says_so_not_that_it_is_forbidden(
    app_factory: AppFactory, fake_telegram: FakeTelegram
) -> None:
    """A feed whose host name resolves to nothing (``.invalid`` never does, RFC 6761) is
    refused, fail closed, with a sentence that says so: not the private-address one, which
    would tell a user in a DNS outage that a valid feed is forbidden. Nothing is stored."""
    bot = app_factory()
    await bot.start()
    await _ask(fake_telegram, 58, "/digest_off")
    reply = await _ask(fake_telegram, 58, "/sub https://feeds.nosuchhost.invalid/rss.xml")
    assert "could not resolve" in reply and "feeds.nosuchhost.invalid" in reply
    assert "nothing was subscribed" in reply.lower() and "not allowed" not in reply
    assert "feeds.nosuchhost.invalid" not in await _ask(fake_telegram, 58, "/subs")
    await bot.stop()
