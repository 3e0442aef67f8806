"""USER_MAX_UPDATES_PER_MINUTE and admins, through the real bot (in process): an admin's
commands that cost nothing are never counted nor dropped; his messages to the LLM are
counted as anyone's, and so is a command of his that asks a provider."""

from __future__ import annotations

from tests.support.inprocess import AppFactory
from tests.support.providers import FakeProviders
from tests.support.telegram import FakeTelegram

LIMIT = 3
ADMIN = 7
TOO_FAST = "sending too fast"


async def test_an_admins_free_commands_pass_the_update_rate_but_his_chat_does_not(
    app_factory: AppFactory,
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
    bot_env: dict[str, str],
) -> None:
    """With a limit of 3 a minute, an admin's 4 × 3 ``/providers``, ``/budget``, ``/access``
    and ``/help`` are all answered and none gets the too-fast notice; then his 4 chat
    messages: 3 go to the model, the 4th gets the notice and no provider request."""
    env = {**bot_env, "ADMIN_IDS": str(ADMIN), "USER_MAX_UPDATES_PER_MINUTE": str(LIMIT)}
    bot = app_factory(env=env)
    await bot.start()
    mark = fake_telegram.mark()
    commands = ["/providers", "/budget", "/access", "/help"] * LIMIT
    for command in commands:
        fake_telegram.inject_message(ADMIN, command)
    replies = await fake_telegram.wait_sent(ADMIN, len(commands), since=mark, timeout=60)
    assert not [r.text for r in replies if TOO_FAST in r.text]
    assert fake_providers.requests == []

    mark = fake_telegram.mark()
    for n in range(LIMIT + 1):
        fake_telegram.inject_message(ADMIN, f"question {n}")
    await fake_telegram.wait_for(
        lambda m: m.chat_id == ADMIN and TOO_FAST in m.text, since=mark, timeout=30
    )
    await fake_telegram.wait_until(lambda: len(fake_providers.requests) >= LIMIT or None, 30)
    assert await bot.stop() == 0
    assert len(fake_providers.requests) == LIMIT
    notices = [e for e in fake_telegram.sent_events(ADMIN, since=mark) if TOO_FAST in e.text]
    assert len(notices) == 1
