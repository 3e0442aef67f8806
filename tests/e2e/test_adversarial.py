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


async def _taken(fake: FakeTelegram, update_id: int) -> None:
    """Wait until the bot has confirmed ``update_id`` (a getUpdates with a later offset):
    the updates up to it are being handled."""

    def probe() -> bool | None:
        for r in fake.requests("getUpdates"):
            if int(r.params.get("offset") or 0) > update_id:
                return True
        return None

    await fake.wait_until(probe, 30)


def _reply_latency(fake: FakeTelegram, chat_id: int, since_seq: int, started: float) -> float:
    """Seconds from ``started`` (fake clock) to the first sendMessage to ``chat_id``."""
    sends = [
        r
        for r in fake.requests("sendMessage")
        if r.chat_id == chat_id and r.seq >= since_seq and r.status == 200
    ]
    return sends[0].monotonic - started


async def test_five_long_cjk_messages_do_not_stall_another_users_help(
    bot: BotProcess, fake_telegram: FakeTelegram
) -> None:
    """Five ``"你好" * 2048`` messages (seconds each in the pure-Python tokenizer) are
    in flight; another user's /help is answered within 0.5 s, because counting runs in
    a worker thread, never on the event loop."""
    last = 0
    for user in range(301, 306):
        last = fake_telegram.inject_message(user, "你好" * 2048)
    await _taken(fake_telegram, last)  # the five are being handled now
    seq = len(fake_telegram.requests())
    mark = fake_telegram.mark()
    started = fake_telegram.clock.monotonic()
    fake_telegram.inject_message(399, "/help")
    [reply] = await fake_telegram.wait_sent(399, since=mark, timeout=30)
    assert "/me" in reply.text
    latency = _reply_latency(fake_telegram, 399, seq, started)
    assert latency < 0.5, f"/help took {latency:.2f} s"
    for user in range(301, 306):  # the five are answered too (a template or an answer)
        await fake_telegram.wait_sent(user, timeout=120)
