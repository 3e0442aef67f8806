"""Emergency controls through the real bot (in process) when the sender is over
USER_MAX_UPDATES_PER_MINUTE: an admin's ``/kill hard``, a group
user's Stop button and ``/stop`` still act; everything else over the rate is still
dropped, and a flood of controls with nothing to stop gets no replies."""

from __future__ import annotations

import asyncio
from pathlib import Path

from tests.e2e.test_adversarial import inject_sticker
from tests.e2e.test_stream import LONG, env_for, holds, until
from tests.support.groups import BOT, drain, mention
from tests.support.inprocess import AppFactory
from tests.support.providers import FakeProviders
from tests.support.telegram import FakeTelegram

LIMIT = 5
GROUP = -100680


async def _taken(tg: FakeTelegram) -> None:
    """Wait until every injected update was fetched by the bot."""
    await tg.wait_until(lambda: None if tg.pending_updates() else True, 20)


async def test_admin_kill_hard_passes_the_update_rate(
    app_factory: AppFactory,
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
    tmp_path: Path,
) -> None:
    """An admin over the rate (LIMIT stickers, then one more that is dropped) sends
    ``/kill hard``: it is answered, the stream in flight is closed and settled, and a new
    message is refused with no provider call. A non-admin's ``/kill`` over the rate is
    dropped like any other update over it (no reply, nothing stopped)."""
    env = env_for(tmp_path, fake_telegram, fake_providers, ("deepseek",))
    bot = app_factory(env={**env, "USER_MAX_UPDATES_PER_MINUTE": str(LIMIT)})
    await bot.start()
    fake_providers.default("deepseek", {"text": LONG, "interval_s": 0.1, "no_usage": True})
    fake_telegram.inject_message(51, "Tell me a long story")
    await until(lambda: bool(fake_providers.streams) and fake_providers.streams[0].chunks_sent >= 2)

    mark = fake_telegram.mark()
    for _ in range(LIMIT + 1):  # stickers: an admin's commands are not counted
        inject_sticker(fake_telegram, 1)
    await fake_telegram.wait_sent(1, count=LIMIT + 1, since=mark, timeout=30)  # + the notice
    # a non-admin over the rate: /kill is dropped like an unknown command would be
    for _ in range(LIMIT):
        fake_telegram.inject_message(60, "/frobnicate")
    fake_telegram.inject_message(60, "/kill hard")
    await fake_telegram.wait_sent(60, count=LIMIT + 1, since=mark, timeout=30)
    await _taken(fake_telegram)
    await asyncio.sleep(0.3)  # the dropped /kill would have answered by now

    after = fake_telegram.mark()
    fake_telegram.inject_message(1, "/kill hard emergency")
    [report] = await fake_telegram.wait_sent(1, since=after, timeout=20)
    assert report.text.startswith("⛔ Kill switch ON, hard (emergency)")
    stream = fake_providers.streams[0]
    assert stream.closed_at is not None and not stream.finished
    [stopped] = await fake_telegram.wait_sent(51, since=after, timeout=20)
    assert "Stopped by an admin" in stopped.text
    replies_60 = [e.text for e in fake_telegram.sent_events(60, since=mark)]
    # LIMIT unknown-command replies and the one too-fast notice; the /kill got nothing
    assert replies_60.count("Unknown command. See /help.") == LIMIT
    assert len(replies_60) == LIMIT + 1 and any("sending too fast" in t for t in replies_60)

    fake_telegram.inject_message(52, "hello after the kill")
    [refusal] = await fake_telegram.wait_sent(52, since=after, timeout=20)
    assert "paused by its administrators" in refusal.text
    assert len(fake_providers.requests) == 1
    [hold] = holds(tmp_path / "kopek.db")
    assert hold["state"] == "settled" and hold["stopped"] == 1
    assert await bot.stop() == 0


async def test_group_stop_button_and_stop_pass_the_update_rate(
    app_factory: AppFactory,
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
    tmp_path: Path,
) -> None:
    """A group user over the rate (LIMIT + 2 /me after asking) presses Stop: the
    stream is closed, not run to max_tokens. Another member asks, goes over the rate
    and sends ``/stop``: that stream is closed too. Then 20 more presses and /stops
    with nothing left to stop get no reply at all (a flood of controls costs no
    sends), and ordinary messages over the rate are still dropped (no provider call)."""
    env = env_for(tmp_path, fake_telegram, fake_providers, ("deepseek",))
    bot = app_factory(env={**env, "USER_MAX_UPDATES_PER_MINUTE": str(LIMIT)})
    await bot.start()
    fake_providers.default("deepseek", {"text": LONG, "interval_s": 0.1, "no_usage": True})
    group = {"chat_id": GROUP, "chat_type": "supergroup"}
    ask = f"@{BOT} tell me a long story"
    mark = fake_telegram.mark()
    fake_telegram.inject_message(70, ask, entities=mention(ask), **group)  # type: ignore[arg-type]
    [first] = await fake_telegram.wait_sent(GROUP, since=mark, timeout=20)
    data = first.reply_markup["inline_keyboard"][0][0]["callback_data"]
    for _ in range(LIMIT + 2):
        fake_telegram.inject_message(70, f"/me@{BOT}", **group)  # type: ignore[arg-type]
    await _taken(fake_telegram)
    fake_telegram.inject_callback_query(70, data, message_id=first.message_id, chat_id=GROUP)
    await until(lambda: fake_providers.streams[0].closed_at is not None, 5)
    assert not fake_providers.streams[0].finished
    answer = await fake_telegram.wait_request("answerCallbackQuery", timeout=10)
    assert answer.params.get("text") == "Stopping…"

    # another member asks, goes over the rate, and sends /stop
    ask2 = f"@{BOT} and another one"
    fake_telegram.inject_message(71, ask2, entities=mention(ask2), **group)  # type: ignore[arg-type]
    await until(lambda: len(fake_providers.streams) == 2, 20)
    await until(lambda: fake_providers.streams[1].chunks_sent >= 2)
    for _ in range(LIMIT):
        fake_telegram.inject_message(71, f"/me@{BOT}", **group)  # type: ignore[arg-type]
    await _taken(fake_telegram)
    fake_telegram.inject_message(71, f"/stop@{BOT}", **group)  # type: ignore[arg-type]
    await until(lambda: fake_providers.streams[1].closed_at is not None, 5)
    assert not fake_providers.streams[1].finished
    await until(lambda: len(holds(tmp_path / "kopek.db")) == 2)
    # settled, then flagged stopped (a second write): both stopped, not run to the end
    await until(
        lambda: all(
            h["state"] == "settled" and h["stopped"] == 1 for h in holds(tmp_path / "kopek.db")
        )
    )

    # a flood of controls with nothing to stop: no replies, no provider call
    await drain(fake_telegram, GROUP)
    flood = fake_telegram.mark()
    answers = len(fake_telegram.requests("answerCallbackQuery"))
    for _ in range(20):
        fake_telegram.inject_callback_query(70, data, message_id=first.message_id, chat_id=GROUP)
        fake_telegram.inject_message(70, f"/stop@{BOT}", **group)  # type: ignore[arg-type]
        fake_telegram.inject_message(70, ask, entities=mention(ask), **group)  # type: ignore[arg-type]
    await drain(fake_telegram, -100681)
    await bot.idle()  # every control of the flood handled
    assert fake_telegram.sent_events(GROUP, since=flood) == []
    assert len(fake_telegram.requests("answerCallbackQuery")) == answers
    assert len(fake_providers.requests) == 2
    assert await bot.stop() == 0


async def test_kill_hard_counts_only_the_streams_it_cut_and_keeps_the_first_reason(
    app_factory: AppFactory,
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
    tmp_path: Path,
) -> None:
    """GLOBAL_MAX_INFLIGHT_CALLS=2 and four users asking: two stream, two wait for a
    call slot. /kill hard says 2 streamed answers were cut and 2 waiting ones cancelled
    with no call (it used to say 4 cut), and no provider is asked for them. A
    second /kill hard says the switch was already on, by whom and why, and keeps that
    reason: /budget still shows the first one."""
    env = env_for(tmp_path, fake_telegram, fake_providers, ("deepseek",))
    bot = app_factory(env={**env, "GLOBAL_MAX_INFLIGHT_CALLS": "2"})
    await bot.start()
    fake_providers.default("deepseek", {"text": LONG, "interval_s": 0.1, "no_usage": True})
    for user in (81, 82, 83, 84):
        fake_telegram.inject_message(user, "Tell me a long story")
    await until(
        lambda: (
            len(fake_providers.streams) == 2
            and all(s.chunks_sent >= 2 for s in fake_providers.streams)
        )
    )
    await _taken(fake_telegram)
    app = bot.app
    assert app is not None
    await until(lambda: app.cascade.slots.waiting == 2)  # the other two wait for a call slot
    mark = fake_telegram.mark()
    fake_telegram.inject_message(1, "/kill hard runaway costs")
    [report] = await fake_telegram.wait_sent(1, since=mark, timeout=20)
    assert report.text.startswith("⛔ Kill switch ON, hard (runaway costs).")
    assert "2 streamed answer(s) in flight cut (settled at the tokens received)" in report.text
    assert "2 answer(s) still waiting for a model call cancelled (no call made)" in report.text
    for user in (81, 82, 83, 84):
        await fake_telegram.wait_sent(user, since=mark, timeout=20)
    assert len(fake_providers.requests) == 2

    again = fake_telegram.mark()
    fake_telegram.inject_message(1, "/kill hard again")
    [second] = await fake_telegram.wait_sent(1, since=again, timeout=20)
    assert second.text.startswith("⛔ The kill switch was already ON (by admin 1 at ")
    assert ": runaway costs); that reason is kept." in second.text
    assert "0 streamed answer(s) in flight cut" in second.text
    fake_telegram.inject_message(1, "/budget")
    [_, status] = await fake_telegram.wait_sent(1, since=again, count=2, timeout=20)
    assert "KILLED by admin 1: runaway costs" in status.text
    assert await bot.stop() == 0


async def test_stop_with_streaming_off_says_it_cannot_stop_a_one_piece_answer(
    app_factory: AppFactory,
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
    tmp_path: Path,
) -> None:
    """STREAM_MODE_PRIVATE=off, an answer being written in one piece: /stop says
    truthfully that it cannot stop it (it used to say nothing was being written),
    and the answer arrives once the model is done."""
    env = env_for(tmp_path, fake_telegram, fake_providers, ("groq",))
    bot = app_factory(env={**env, "STREAM_MODE_PRIVATE": "off"})
    await bot.start()
    fake_providers.script("groq", {"text": "the whole answer", "gate": "answer"})
    mark = fake_telegram.mark()
    fake_telegram.inject_message(42, "Tell me something")
    await until(lambda: bool(fake_providers.requests))
    fake_telegram.inject_message(42, "/stop")
    [reply] = await fake_telegram.wait_sent(42, since=mark, timeout=20)
    assert reply.text == (
        "Answers in this chat are written in one piece, not streamed, so /stop cannot "
        "stop one: it arrives when it is ready."
    )
    fake_providers.open_gate("answer")
    [_, answer] = await fake_telegram.wait_sent(42, since=mark, count=2, timeout=20)
    assert answer.text == "the whole answer"
    assert await bot.stop() == 0
