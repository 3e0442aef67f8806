"""A burst through the real bot with the intake window on (INTAKE_LAG_TARGET_MS): every
message answered, each chat's answers in the order of its messages, and the window made
updates wait (the policy and the gate alone: tests/bot/test_intake_window.py)."""

from __future__ import annotations

from tests.support.inprocess import AppFactory
from tests.support.providers import FakeProviders
from tests.support.telegram import FakeTelegram

USERS = 12
EACH = 3  # a user's in-flight slots (2) and one queued


async def test_a_burst_is_answered_in_full_and_in_order_per_chat_with_the_window_on(
    app_factory: AppFactory,
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
    bot_env: dict[str, str],
) -> None:
    # the window starts at its floor (8) below the ceiling; answers that take a
    # while keep its slots taken while the rest of the burst arrives
    bot = app_factory(env=bot_env | {"INTAKE_LAG_TARGET_MS": "4", "INTAKE_MAX_CONCURRENT": "9"})
    await bot.start()
    assert bot.app is not None
    window = bot.app.intake_window
    assert window.sized and window.limit == 8  # the floor; aiogram starts up to 9 tasks
    fake_providers.default("groq", {"delay_s": 0.05})
    mark = fake_telegram.mark()
    users = [7_000 + u for u in range(USERS)]
    for i in range(EACH):  # interleaved, as a burst arrives: every user's first, then ...
        for user in users:
            fake_telegram.inject_message(user, f"user {user} question {i}")
    for user in users:
        replies = await fake_telegram.wait_sent(user, EACH, since=mark, timeout=30)
        asked = [next(i for i in range(EACH) if f"question {i}" in r.text) for r in replies]
        assert asked == list(range(EACH)), f"chat {user}: answers out of order"
    assert len(fake_providers.requests) == USERS * EACH
    await bot.idle()
    assert window.waited > 0, "the window never held an update back"
    assert window.active == 0 and window.waiting == 0
    assert await bot.stop() == 0
