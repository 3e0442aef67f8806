"""Streamed answers at their edges, through the real bot (in process): ``/stop``, the
stream metrics, a draft Telegram refuses, a draft over 4096 UTF-16 units,
``STREAM_MODE_PRIVATE=edit`` and ``=off``, a flood wait on a group answer's final edit,
a streamed message deleted mid-stream, and the bot shutting down mid-stream."""

from __future__ import annotations

import asyncio
from pathlib import Path

from bot.chat.delivery import split_markdown
from budget.pricing.tokens import TokenCounter
from llm.types import Message
from tests.e2e.test_stream import BOT, LONG, env_for, holds, until
from tests.support.inprocess import AppFactory, InProcessBot
from tests.support.providers import FakeProviders
from tests.support.telegram import FakeTelegram, utf16_len

STOPPED_NOTE = "⏹ Stopped; this is the answer so far."
SHUTDOWN_NOTE = "⏹ I was interrupted; this is the answer so far."
GROUP = -1005005


def metric(bot: InProcessBot, name: str, labels: dict[str, str] | None = None) -> float:
    """One sample of the bot's Prometheus registry (0.0 when it has none yet)."""
    assert bot.app is not None
    return bot.app.registry.get_sample_value(name, labels or {}) or 0.0


def mention(telegram: FakeTelegram, user_id: int, text: str) -> None:
    """``user_id`` writes ``@bot text`` in the test group."""
    full = f"@{BOT} {text}"
    telegram.inject_message(
        user_id, full, chat_id=GROUP, chat_type="supergroup",
        entities=[{"type": "mention", "offset": 0, "length": len(BOT) + 1}],
    )  # fmt: skip


async def test_stop_command_ends_the_senders_stream_and_metrics_count_it(
    app_factory: AppFactory,
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
    tmp_path: Path,
) -> None:
    """``/stop`` from the asker while drafts stream: the provider's connection closes
    within 1 s, the text so far arrives marked stopped, the hold is settled estimated
    and flagged stopped; a second ``/stop`` says nothing is being written. The stream
    metrics agree with what happened: one stop by the user, the tokens not generated
    (max_tokens − output settled), one draft counted per draft Telegram accepted, one
    first-token and one first-visible observation."""
    bot = app_factory(env=env_for(tmp_path, fake_telegram, fake_providers, ("deepseek",)))
    await bot.start()
    fake_providers.script("deepseek", {"text": LONG, "interval_s": 0.05, "no_usage": True})
    mark = fake_telegram.mark()
    asked_at = asyncio.get_running_loop().time()
    fake_telegram.inject_message(42, "Tell me a long story")
    await until(lambda: bool(fake_providers.streams) and fake_providers.streams[0].chunks_sent >= 5)
    await until(lambda: bool(fake_telegram.drafts(42)))
    stopped_at = asyncio.get_running_loop().time()
    fake_telegram.inject_message(42, "/stop")
    [final] = await fake_telegram.wait_sent(42, since=mark, timeout=20)
    stream = fake_providers.streams[0]
    assert stream.closed_at is not None and stream.closed_at - stopped_at < 1.0
    assert not stream.finished
    partial, _, note = final.text.partition("\n\n")
    assert note == STOPPED_NOTE and len(partial) >= 16 and stream.text_sent.startswith(partial)
    [hold] = holds(tmp_path / "kopek.db")
    assert hold["state"] == "settled" and hold["estimated"] == 1 and hold["stopped"] == 1
    counted = TokenCounter().messages([Message("assistant", stream.text_sent)])
    assert 0 < hold["usage_output"] <= counted + stream.chunks_sent + 1

    mark = fake_telegram.mark()
    fake_telegram.inject_message(42, "/stop")
    [nothing] = await fake_telegram.wait_sent(42, since=mark, timeout=10)
    assert nothing.text == "Nothing of yours is being written in this chat right now."
    assert len(fake_providers.requests) == 1

    assert metric(bot, "kopek_stream_stops_total", {"by": "user"}) == 1
    saved = hold["max_tokens"] - hold["usage_output"]
    assert metric(bot, "kopek_stream_tokens_saved_total") == saved > 0
    # a draft in flight when /stop closes the display reaches Telegram, but its answer is
    # never read, so it is not counted: at most one fewer than Telegram saw
    accepted = len(fake_telegram.drafts(42))
    assert accepted - 1 <= metric(bot, "kopek_stream_drafts_total") <= accepted
    assert metric(bot, "kopek_stream_drafts_total") >= 1
    assert metric(bot, "kopek_stream_edits_total") == 0
    assert metric(bot, "kopek_stream_first_token_seconds_count") == 1
    assert metric(bot, "kopek_stream_first_visible_seconds_count") == 1
    first_visible = metric(bot, "kopek_stream_first_visible_seconds_sum")
    assert 0 < first_visible < fake_telegram.drafts(42)[0].at - asked_at + 0.05
    assert await bot.stop() == 0


async def test_a_draft_telegram_refuses_is_retried_plain(
    app_factory: AppFactory,
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
    tmp_path: Path,
) -> None:
    """The first draft is refused (400 can't parse entities): the same text is sent at
    once as a plain draft, later drafts stay plain (the raw Markdown shows), the answer
    goes on, and the final message is formatted as always (bold entity) — one provider
    call."""
    bot = app_factory(env=env_for(tmp_path, fake_telegram, fake_providers, ("groq",)))
    await bot.start()
    text = "**Bold** start. " + LONG
    fake_providers.script("groq", {"text": text, "interval_s": 0.01})
    fake_telegram.fail_next(
        "sendMessageDraft", 400, "Bad Request: can't parse entities: Unsupported start tag",
        chat_id=42,
    )  # fmt: skip
    mark = fake_telegram.mark()
    fake_telegram.inject_message(42, "Tell me a long story")
    [final] = await fake_telegram.wait_sent(42, since=mark, timeout=20)
    assert final.text == "Bold start. " + LONG
    assert [e.type for e in final.entities] == ["bold"]
    calls = fake_telegram.requests("sendMessageDraft")
    assert calls[0].status == 400 and all(c.status == 200 for c in calls[1:])
    assert calls[1].params["text"] == calls[0].params["text"]  # the same text, retried
    drafts = fake_telegram.drafts(42)
    assert len(drafts) >= 2
    assert all(d.entities == () for d in drafts)
    assert any(d.text.startswith("**Bold**") for d in drafts)  # plain: Markdown as typed
    assert len(fake_providers.requests) == 1
    assert await bot.stop() == 0


async def test_a_draft_over_4096_utf16_units_shows_the_tail(
    app_factory: AppFactory,
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
    tmp_path: Path,
) -> None:
    """An answer of ~6,000 UTF-16 units in ~3,600 characters (each emoji counts two
    units: a count in characters would think it fits one message): every draft stays within
    4096 units and is accepted at once; once the text outgrew one message the draft
    shows its tail part (not the beginning); the final answer arrives as the Markdown
    pipeline's parts, whole."""
    env = env_for(tmp_path, fake_telegram, fake_providers, ("groq",))
    # the text is 2,719 o200k tokens: within max_tokens 4096 (with 2048, a stream past
    # max_tokens by any tokenizer's count, closed as such)
    bot = app_factory(env={**env, "CHAT_MAX_OUTPUT_TOKENS": "4096"})
    await bot.start()
    lines = [f"L{j}: " + " ".join(["🙂🙂🙂"] * 10) for j in range(80)]
    text = "\n".join(lines)
    assert len(text) < 4096 < 5500 < utf16_len(text)
    chunks = [line + "\n" for line in lines[:-1]] + [lines[-1]]
    fake_providers.script("groq", {"text": text, "chunks": chunks, "interval_s": 0.02})
    parts = split_markdown(text)
    assert len(parts) == 2
    mark = fake_telegram.mark()
    fake_telegram.inject_message(42, "Count with emoji")
    sent = await fake_telegram.wait_sent(42, 2, since=mark, timeout=30)
    assert [m.text for m in sent] == [p.strip() for p, _e in parts]
    assert "\n".join(m.text for m in sent) == text
    assert all(c.status == 200 for c in fake_telegram.requests("sendMessageDraft"))
    drafts = fake_telegram.drafts(42)
    assert all(utf16_len(d.text) <= 4096 for d in drafts)
    assert all(d.text in text for d in drafts)
    tails = [d for d in drafts if not d.text.startswith("L0: ")]
    assert tails, "no draft showed the tail"
    assert all(text.index(d.text) > 0 for d in tails)
    assert await bot.stop() == 0


async def test_private_edit_mode_edits_one_message_with_a_stop_button(
    app_factory: AppFactory,
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
    tmp_path: Path,
) -> None:
    """``STREAM_MODE_PRIVATE=edit``: no drafts; one message (not a reply: a private
    chat) with an inline Stop button, edited in place, ending as the whole answer
    without a button; the edits metric counts the streaming edits. On the next answer
    the asker's own press stops it: "Stopping…" as the callback answer, and the same
    message becomes the text so far, marked stopped."""
    env = env_for(tmp_path, fake_telegram, fake_providers, ("groq",))
    bot = app_factory(env={**env, "STREAM_MODE_PRIVATE": "edit"})
    await bot.start()
    fake_providers.script("groq", {"text": LONG, "interval_s": 0.02})
    mark = fake_telegram.mark()
    fake_telegram.inject_message(42, "Tell me a long story")
    [first] = await fake_telegram.wait_sent(42, since=mark, timeout=20)
    assert first.reply_to_message_id is None
    assert first.reply_markup["inline_keyboard"][0][0]["text"] == "⏹ Stop"

    def ended() -> bool:
        events = fake_telegram.sent_events(42, since=mark)
        return events[-1].text == LONG and not events[-1].reply_markup

    await until(ended, 30)
    events = fake_telegram.sent_events(42, since=mark)
    assert [e.is_edit for e in events].count(False) == 1
    assert all(e.message_id == first.message_id for e in events)
    assert len(events) >= 3  # the first message, at least one streaming edit, the final
    assert metric(bot, "kopek_stream_edits_total") == len(events) - 2
    assert fake_telegram.drafts(42) == []

    fake_providers.script("groq", {"text": LONG, "interval_s": 0.05})
    mark = fake_telegram.mark()
    fake_telegram.inject_message(42, "Another long story")
    [second] = await fake_telegram.wait_sent(42, since=mark, timeout=20)
    await until(lambda: fake_providers.streams[1].chunks_sent >= 5)
    data = second.reply_markup["inline_keyboard"][0][0]["callback_data"]
    fake_telegram.inject_callback_query(42, data, message_id=second.message_id)
    answer = await fake_telegram.wait_request("answerCallbackQuery", timeout=10)
    assert answer.params.get("text") == "Stopping…"
    final = await fake_telegram.wait_for(
        lambda e: e.message_id == second.message_id and STOPPED_NOTE in e.text,
        since=mark, timeout=20,
    )  # fmt: skip
    assert not final.reply_markup and LONG.startswith(final.text.partition("\n\n")[0])
    assert not fake_providers.streams[1].finished
    assert await bot.stop() == 0


async def test_streaming_off_answers_in_one_piece(
    app_factory: AppFactory,
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
    tmp_path: Path,
) -> None:
    """``STREAM_MODE_PRIVATE=off`` and ``STREAM_MODE_GROUP=off``: the provider is asked
    without ``stream``; a private chat and a group each get one message with the whole
    answer, no button, no draft, no edit."""
    env = env_for(tmp_path, fake_telegram, fake_providers, ("groq",))
    bot = app_factory(env={**env, "STREAM_MODE_PRIVATE": "off", "STREAM_MODE_GROUP": "off"})
    await bot.start()
    fake_providers.script("groq", {"text": LONG}, {"text": LONG})
    mark = fake_telegram.mark()
    fake_telegram.inject_message(42, "Tell me a long story")
    mention(fake_telegram, 30, "tell me a long story")
    [private] = await fake_telegram.wait_sent(42, since=mark, timeout=20)
    [group] = await fake_telegram.wait_sent(GROUP, since=mark, timeout=20)
    assert private.text == group.text == LONG
    assert not private.reply_markup and not group.reply_markup
    assert group.reply_to_message_id is not None
    assert len(fake_providers.requests) == 2
    assert not any(r.body.get("stream") for r in fake_providers.requests)
    assert fake_telegram.drafts() == [] and fake_telegram.requests("editMessageText") == []
    await asyncio.sleep(0.2)
    assert len(fake_telegram.sent_events(since=mark)) == 2
    assert await bot.stop() == 0


async def test_flood_wait_on_the_final_group_edit_goes_through_the_outbox(
    app_factory: AppFactory,
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
    tmp_path: Path,
) -> None:
    """In a group the streamed message is out (with its Stop button) when the final
    edit meets a 429 (retry after 2 s): no error template; the whole answer is kept and
    sent by the outbox once the wait is over (a reply to the question), and nothing is
    sent to the chat during the wait."""
    env = env_for(tmp_path, fake_telegram, fake_providers, ("groq",))
    # one edit a minute: the only edit is the final one
    bot = app_factory(env={**env, "STREAM_EDIT_INTERVAL_MS": "60000"})
    await bot.start()
    answer = "A short answer that streams in a few chunks."
    fake_providers.script("groq", {"text": answer, "interval_s": 0.02})
    fake_telegram.fail_next("editMessageText", 429, retry_after=2, chat_id=GROUP)
    mark = fake_telegram.mark()
    mention(fake_telegram, 30, "a question")
    [streamed] = await fake_telegram.wait_sent(GROUP, since=mark, timeout=20)
    assert streamed.reply_markup  # the Stop button: the stream is on
    refused = await fake_telegram.wait_request("editMessageText", timeout=20)
    assert refused.status == 429
    [_, kept] = await fake_telegram.wait_sent(GROUP, 2, since=mark, timeout=20)
    assert kept.text == answer
    assert kept.reply_to_message_id == streamed.reply_to_message_id is not None
    [send] = [r for r in fake_telegram.requests("sendMessage") if r.chat_id == GROUP][1:]
    assert send.monotonic - refused.monotonic >= 2.0
    assert fake_telegram.flood_violations() == []
    assert not any("wrong" in e.text for e in fake_telegram.sent_events(since=mark))
    assert len(fake_providers.requests) == 1
    assert await bot.stop() == 0


async def test_shutdown_mid_stream_settles_what_was_received_and_sends_it(
    app_factory: AppFactory,
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
    tmp_path: Path,
) -> None:
    """The bot stops (SIGTERM's path, SHUTDOWN_GRACE_SECONDS=0.5) while a draft streams
    a long answer: after the grace the stream is stopped, not cancelled — the provider's
    connection closes, the hold is settled estimated at input + the output received
    (far below the ceiling it would have been booked at), and the user gets the text so
    far marked as interrupted."""
    env = env_for(tmp_path, fake_telegram, fake_providers, ("deepseek",))
    bot = app_factory(env={**env, "SHUTDOWN_GRACE_SECONDS": "0.5"})
    await bot.start()
    fake_providers.script("deepseek", {"text": LONG, "interval_s": 0.05, "no_usage": True})
    mark = fake_telegram.mark()
    fake_telegram.inject_message(42, "Tell me a long story")
    await until(lambda: bool(fake_providers.streams) and fake_providers.streams[0].chunks_sent >= 5)
    await until(lambda: bool(fake_telegram.drafts(42)))
    assert await bot.stop() == 0
    stream = fake_providers.streams[0]
    assert stream.closed_at is not None and not stream.finished
    [final] = fake_telegram.sent_events(42, since=mark)
    partial, _, note = final.text.partition("\n\n")
    assert note == SHUTDOWN_NOTE and len(partial) >= 16 and stream.text_sent.startswith(partial)
    [hold] = holds(tmp_path / "kopek.db")
    assert hold["state"] == "settled" and hold["estimated"] == 1
    counted = TokenCounter().messages([Message("assistant", stream.text_sent)])
    assert 0 < hold["usage_output"] <= counted + stream.chunks_sent + 1
    assert hold["usage_input"] == hold["input_tokens"]
    assert hold["actual_musd"] < hold["ceiling_musd"] // 4


async def test_a_flood_wait_pauses_the_display_which_then_resumes(
    app_factory: AppFactory,
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
    tmp_path: Path,
) -> None:
    """A 429 on a streaming edit (group, retry after 2 s) and on a draft (private, 1 s):
    each display waits out its chat's flood wait, then goes on showing the growing text
    (an edit / a draft accepted after the wait and before the end); nothing is sent to
    either chat during its wait; both answers end whole."""
    env = env_for(tmp_path, fake_telegram, fake_providers, ("groq",))
    bot = app_factory(env=env)
    await bot.start()
    fake_providers.default("groq", {"text": LONG, "interval_s": 0.03})
    fake_telegram.fail_next("editMessageText", 429, retry_after=2, chat_id=GROUP)
    fake_telegram.fail_next("sendMessageDraft", 429, retry_after=1, chat_id=42)
    mark = fake_telegram.mark()
    mention(fake_telegram, 30, "tell me a long story")
    fake_telegram.inject_message(42, "Tell me a long story")
    [private] = await fake_telegram.wait_sent(42, since=mark, timeout=30)
    assert private.text == LONG

    def group_done() -> bool:
        events = fake_telegram.sent_events(GROUP, since=mark)
        return bool(events) and events[-1].text == LONG and not events[-1].reply_markup

    await until(group_done, 30)
    for method, chat, wait in (("editMessageText", GROUP, 2), ("sendMessageDraft", 42, 1)):
        calls = [r for r in fake_telegram.requests(method) if r.chat_id == chat]
        [refused] = [r for r in calls if r.status == 429]
        later = [r for r in calls if r.seq > refused.seq and r.status == 200]
        assert len(later) >= 2, method  # resumed, not only the final answer
        assert later[0].monotonic - refused.monotonic >= wait - 0.05
    assert fake_telegram.flood_violations() == []
    assert await bot.stop() == 0


async def test_a_chat_that_refuses_the_stream_stops_it(
    app_factory: AppFactory,
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
    tmp_path: Path,
) -> None:
    """The user blocks the bot while their answer streams: the next draft gets 403, so
    the answer could never be delivered — the stream is stopped (the provider's
    connection closes at once, it does not run to max_tokens), the hold is settled on
    what was received, and the refused delivery is logged as such."""
    bot = app_factory(env=env_for(tmp_path, fake_telegram, fake_providers, ("deepseek",)))
    await bot.start()
    fake_providers.script("deepseek", {"text": LONG, "interval_s": 0.05, "no_usage": True})
    fake_telegram.inject_message(43, "Tell me a long story")
    await until(lambda: bool(fake_telegram.drafts(43)))
    blocked_at = asyncio.get_running_loop().time()
    fake_telegram.block(43)
    stream = await fake_telegram.wait_until(
        lambda: fake_providers.streams[0] if fake_providers.streams[0].closed_at else None, 10
    )
    assert stream.closed_at is not None and stream.closed_at - blocked_at < 1.0
    assert not stream.finished
    await until(lambda: holds(tmp_path / "kopek.db")[0]["state"] != "held")
    [hold] = holds(tmp_path / "kopek.db")
    assert hold["state"] == "settled" and hold["estimated"] == 1
    assert hold["actual_musd"] < hold["ceiling_musd"] // 4
    await until(lambda: "could not deliver the answer to chat 43 (blocked)" in bot.logs())
    assert await bot.stop() == 0


async def test_an_admin_can_stop_anyones_answer_in_a_group(
    app_factory: AppFactory,
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
    tmp_path: Path,
) -> None:
    """In a group, an admin (ADMIN_IDS) may stop another member's answer: by its Stop
    button ("Stopping…", the message becomes the text so far marked stopped), and by
    ``/stop`` in that group (every answer being written there)."""
    bot = app_factory(env=env_for(tmp_path, fake_telegram, fake_providers, ("groq",)))
    await bot.start()
    fake_providers.default("groq", {"text": LONG, "interval_s": 0.05})
    for n, how in enumerate(("button", "command")):
        mark = fake_telegram.mark()
        mention(fake_telegram, 30, "tell me a long story")
        [streamed] = await fake_telegram.wait_sent(GROUP, since=mark, timeout=20)
        await until(lambda: fake_providers.streams[n].chunks_sent >= 5)  # noqa: B023
        if how == "button":
            data = streamed.reply_markup["inline_keyboard"][0][0]["callback_data"]
            fake_telegram.inject_callback_query(
                1, data, message_id=streamed.message_id, chat_id=GROUP
            )
            answer = await fake_telegram.wait_request("answerCallbackQuery", timeout=10)
            assert answer.params.get("text") == "Stopping…"
        else:
            fake_telegram.inject_message(1, "/stop", chat_id=GROUP, chat_type="supergroup")
        final = await fake_telegram.wait_for(
            lambda e: e.message_id == streamed.message_id and STOPPED_NOTE in e.text,  # noqa: B023
            since=mark, timeout=20,
        )  # fmt: skip
        assert not final.reply_markup
        assert not fake_providers.streams[n].finished
    assert await bot.stop() == 0


async def test_a_streamed_group_message_that_ends_empty_becomes_the_template(
    app_factory: AppFactory,
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
    tmp_path: Path,
) -> None:
    """An answer of invisible characters only, streamed into a group: the message
    already shown (with its Stop button) is edited into the could-not-answer template,
    without a button — not left blank beside a second message."""
    bot = app_factory(env=env_for(tmp_path, fake_telegram, fake_providers, ("deepseek",)))
    await bot.start()
    fake_providers.script(
        "deepseek", {"text": "\u200b\u200b", "chunks": ["\u200b", "\u200b"], "interval_s": 0.05}
    )
    mark = fake_telegram.mark()
    mention(fake_telegram, 30, "say nothing")
    [streamed] = await fake_telegram.wait_sent(GROUP, since=mark, timeout=20)
    assert streamed.reply_markup
    final = await fake_telegram.wait_for(
        lambda e: e.is_edit and "could not answer" in e.text, since=mark, timeout=20
    )
    assert final.message_id == streamed.message_id and not final.reply_markup
    await asyncio.sleep(0.2)
    assert [e.is_edit for e in fake_telegram.sent_events(GROUP, since=mark)].count(False) == 1
    assert await bot.stop() == 0


async def test_a_streamed_message_deleted_mid_stream_gets_the_whole_answer_once(
    app_factory: AppFactory,
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
    tmp_path: Path,
) -> None:
    """In a group the streamed message (with its Stop button) is deleted by a user
    while the answer streams: the final edit meets Telegram's "message to edit not
    found", and the whole answer arrives once as a new message replying to the
    question — no error template, no second provider call, the hold settled once."""
    env = env_for(tmp_path, fake_telegram, fake_providers, ("groq",))
    bot = app_factory(env={**env, "STREAM_EDIT_INTERVAL_MS": "60000"})
    await bot.start()
    answer = "An answer that was paid for and must not be lost. " * 8
    fake_providers.script("groq", {"text": answer.strip(), "interval_s": 0.02})
    mark = fake_telegram.mark()
    mention(fake_telegram, 30, "a question")
    [streamed] = await fake_telegram.wait_sent(GROUP, since=mark, timeout=20)
    assert streamed.reply_markup  # the Stop button: the stream is on
    assert fake_providers.streams and not fake_providers.streams[0].finished
    fake_telegram.delete_by_user(GROUP, streamed.message_id)
    [_, resent] = await fake_telegram.wait_sent(GROUP, 2, since=mark, timeout=20)
    assert resent.text == answer.strip() and resent.message_id != streamed.message_id
    assert resent.reply_to_message_id == streamed.reply_to_message_id is not None
    refused = [r for r in fake_telegram.requests("editMessageText") if r.chat_id == GROUP]
    assert refused and refused[-1].status == 400
    assert not any("wrong" in e.text for e in fake_telegram.sent_events(since=mark))
    assert len(fake_providers.requests) == 1
    [hold] = holds(tmp_path / "kopek.db")
    assert hold["state"] == "settled"
    assert await bot.stop() == 0
