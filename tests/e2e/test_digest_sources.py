"""T.me posts with impossible dates or ids, in-process (create_app)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from tests.support.inprocess import AppFactory
from tests.support.providers import FakeProviders
from tests.support.telegram import FakeTelegram
from tests.support.tme import FakeTme, TmePost

ADMIN = 1


async def test_year_one_and_a_23_digit_id_are_skipped_and_the_digest_goes_out(
    app_factory: AppFactory,
    fake_telegram: FakeTelegram,
    fake_tme: FakeTme,
    fake_providers: FakeProviders,
    bot_env: dict[str, str],
) -> None:
    """A channel page with a post dated year 1 and a post numbered with 23 digits: the
    digest is delivered with the two good posts, the two bad ones are logged as skipped."""
    now = datetime.now(UTC)
    fake_tme.add_posts(
        "oddnews",
        [
            TmePost(post_id=10, date=datetime(1, 1, 1, tzinfo=UTC), text="From year one."),
            TmePost(post_id=11, date=now - timedelta(hours=3), text="A good post, first."),
            TmePost(post_id=12345678901234567890123, date=now, text="An impossible id."),
            TmePost(post_id=12, date=now - timedelta(hours=2), text="A good post, second."),
        ],
        title="Odd News",
    )
    env = dict(bot_env, ADMIN_IDS=str(ADMIN), DIGEST_STAGGER_SECONDS="0")
    bot = app_factory(env=env)
    await bot.start()
    for text in ("/digest_off", "/sub @oddnews"):
        mark = fake_telegram.mark()
        fake_telegram.inject_message(55, text)
        await fake_telegram.wait_sent(55, since=mark, timeout=30)
    mark = fake_telegram.mark()
    fake_telegram.inject_message(ADMIN, "/digest_now 55")
    digest = await fake_telegram.wait_for(
        lambda m: m.chat_id == 55 and "Odd News" in m.text, since=mark, timeout=60
    )
    items = [line for line in digest.text.splitlines() if line.startswith("•")]
    assert len(items) == 2
    assert len(fake_providers.requests) == 2
    assert "From year one" not in digest.text and "impossible" not in digest.text
    assert await bot.stop() == 0
    assert bot.logs().count("tme.unparseable_post channel=oddnews") >= 2
