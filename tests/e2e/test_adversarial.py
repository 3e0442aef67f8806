"""Issue 16 §3 and §5 through the real bot process: one user must never stall everyone,
and every sentence the bot says is the right one."""

from __future__ import annotations

from tests.e2e.harness import BotProcess
from tests.fakes.telegram import FakeTelegram


async def test_tz_with_a_folder_or_a_long_name_is_an_unknown_timezone(
    bot: BotProcess, fake_telegram: FakeTelegram
) -> None:
    """``/tz Europe`` (a folder of the zone database) and a 300-character zone answer
    "Unknown timezone", not "Something went wrong"; a real zone is still accepted."""
    for arg in ("Europe", "A" * 300, "Europe/" + "x" * 293, "../../etc/passwd"):
        mark = fake_telegram.mark()
        fake_telegram.inject_message(71, f"/tz {arg}")
        [reply] = await fake_telegram.wait_sent(71, since=mark)
        assert reply.text.startswith("Unknown timezone"), (arg[:20], reply.text)
    mark = fake_telegram.mark()
    fake_telegram.inject_message(71, "/tz europe/berlin")
    [reply] = await fake_telegram.wait_sent(71, since=mark)
    assert reply.text == "Timezone set to Europe/Berlin."
    assert "unhandled error" not in bot.logs()
