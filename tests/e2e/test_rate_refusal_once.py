"""A burst over USER_MAX_PER_MINUTE gets one refusal per window, through the real bot
(``docs/decisions/305-one-rate-refusal-per-window.md``): the first refused message is
told when to retry, the rest of the burst get no reply (and ask no provider) until the
window resets; after the reset the user is answered, and told again at his next
refusal."""

from __future__ import annotations

from datetime import UTC, datetime

from tests.support.clocks import JumpClock
from tests.support.inprocess import AppFactory, InProcessBot
from tests.support.providers import FakeProviders
from tests.support.telegram import SentMessage

USER = 7
RATE = "✋ Too many messages per minute. Please retry after "


async def _burst(bot: InProcessBot, texts: list[str]) -> list[SentMessage]:
    """Inject ``texts`` at once; what the bot sent ``USER`` for them once it is idle."""
    tg = bot.telegram
    mark = tg.mark()
    for text in texts:
        tg.inject_message(USER, text)
    await bot.idle()
    return tg.sent_events(USER, since=mark)


async def test_a_burst_over_the_rate_is_refused_once_per_window(
    app_factory: AppFactory,
    fake_providers: FakeProviders,
    bot_env: dict[str, str],
) -> None:
    """USER_MAX_PER_MINUTE=1: after one answer, four messages sent at once get exactly
    one reply, the rate refusal naming the minute to retry after, and no provider is
    asked for them; 61 s later a message is answered, and a burst of three after it
    gets one refusal again."""
    clock = JumpClock(datetime.now(UTC))
    env = dict(bot_env, USER_MAX_PER_MINUTE="1", USER_MAX_UPDATES_PER_MINUTE="1000")
    env["USER_QUEUE_MAX"] = "10"
    bot = app_factory(env=env, clock=clock)
    await bot.start()
    [answer] = await _burst(bot, ["first"])
    assert answer.text.endswith("first"), answer.text
    asked = len(fake_providers.requests)

    sent = await _burst(bot, [f"burst {i}" for i in range(4)])
    assert [m.text[: len(RATE)] for m in sent] == [RATE], [m.text for m in sent]
    assert "messages refused until then get no further notice" in sent[0].text
    assert len(fake_providers.requests) == asked, "a refused message asked a provider"

    clock.jump(61)
    [later] = await _burst(bot, ["after the reset"])
    assert later.text.endswith("after the reset"), later.text
    again = await _burst(bot, [f"again {i}" for i in range(3)])
    assert [m.text[: len(RATE)] for m in again] == [RATE], [m.text for m in again]
    assert await bot.stop() == 0
