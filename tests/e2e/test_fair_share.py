"""The fair share of the free keys, through the real bot: one user flooding a free key
while another asks (FREE_SHARE_MAX; llm/keys/shares.py)."""

from __future__ import annotations

from tests.e2e.test_access import _send
from tests.support.inprocess import AppFactory
from tests.support.providers import FakeProviders
from tests.support.telegram import FakeTelegram

FLOODER, OTHER = 501, 502
#: Groq's headers with a daily quota of 8 requests (``x-ratelimit-limit-requests`` is
#: requests per day: console.groq.com/docs/rate-limits): a share of 0.25 is 2 requests.
GROQ_DAY_OF_8 = {
    "x-ratelimit-limit-requests": "8",
    "x-ratelimit-remaining-requests": "8",
    "x-ratelimit-reset-requests": "2m59.56s",
    "x-ratelimit-limit-tokens": "1000000",
    "x-ratelimit-remaining-tokens": "1000000",
    "x-ratelimit-reset-tokens": "0.05s",
}
KEY_1, KEY_2 = "gsk_fake_groq_key_1", "gsk_fake_groq_key_2"


async def test_a_flooder_moves_on_at_the_share_and_the_other_user_stays_on_a_free_key(
    app_factory: AppFactory,
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
    bot_env: dict[str, str],
) -> None:
    """Two Groq keys of 8 requests a day, the paid anchor behind them, no other free key:
    while another user is active the flooder takes 2 requests of key 1, moves on to
    key 2 for 2 more, and is then refused with the fair-share template — never moved to
    the paid anchor; the other user is served by key 1 before and after the flood."""
    env = {k: v for k, v in bot_env.items() if not k.startswith(("MISTRAL_", "CEREBRAS_"))}
    bot = app_factory(env=dict(env, FREE_SHARE_MAX="0.25", STREAM_MODE_PRIVATE="off"))
    await bot.start()
    fake_providers.default("groq", {"headers": GROQ_DAY_OF_8})
    assert len(await _send(fake_telegram, OTHER, "hello from the other user")) == 1
    for i in range(4):
        [answer] = await _send(fake_telegram, FLOODER, f"flood {i}")
        assert "fair share" not in answer
    [refused] = await _send(fake_telegram, FLOODER, "flood 4")
    assert "fair share" in refused and "resets at" in refused
    assert fake_providers.requests_for("deepseek") == []
    assert len(await _send(fake_telegram, OTHER, "and me?")) == 1
    assert fake_providers.requests_for("deepseek") == []
    served = [(r.key, r.body["messages"][-1]["content"]) for r in fake_providers.requests]
    assert served == [
        (KEY_1, "hello from the other user"),
        (KEY_1, "flood 0"),
        (KEY_1, "flood 1"),
        (KEY_2, "flood 2"),
        (KEY_2, "flood 3"),
        (KEY_1, "and me?"),
    ]
