"""Streamed answers through the real bot (in process): drafts with a Stop button in a
private chat, edits with an inline Stop button in a forum topic, Stop, cuts and
``/kill hard`` — against the streaming provider fakes and the fake Bot API."""

from __future__ import annotations

import asyncio
import itertools
import sqlite3
from collections.abc import Callable
from pathlib import Path

from budget.pricing.tokens import TokenCounter
from llm.types import Message
from tests.support.harness import BotFactory, bot_environment
from tests.support.inprocess import AppFactory
from tests.support.providers import FakeProviders
from tests.support.telegram import FakeTelegram

BOT = "kopek_test_bot"
DENIED = "Only the person who asked, or an admin, can stop this answer."
LONG = " ".join(f"word{i}" for i in range(120))  # 120 words, ~160 four-character chunks
STREAMING = {
    "STREAM_MODE_PRIVATE": "draft",
    "STREAM_MODE_GROUP": "edit",
    "STREAM_DRAFT_INTERVAL_MS": "200",
    "STREAM_EDIT_INTERVAL_MS": "1000",
}


async def until(condition: Callable[[], bool], limit_s: float = 15.0) -> None:
    """Wait (polling the fakes' state every 10 ms) until ``condition()`` holds."""
    loop = asyncio.get_running_loop()
    end = loop.time() + limit_s
    while not condition():
        assert loop.time() < end, "condition not reached in time"
        await asyncio.sleep(0.01)


def holds(db: Path) -> list[sqlite3.Row]:
    """Every ledger hold, as stored."""
    with sqlite3.connect(db) as conn:
        conn.row_factory = sqlite3.Row
        return list(conn.execute("SELECT * FROM budget_holds ORDER BY granted_at"))


def env_for(
    tmp_path: Path, telegram: FakeTelegram, providers: FakeProviders, names: tuple[str, ...]
) -> dict[str, str]:
    """The bot's environment with only ``names`` configured, streaming on."""
    urls = {n: providers.base_urls[n] for n in names}
    return bot_environment(
        telegram=telegram,
        database_path=tmp_path / "kopek.db",
        provider_base_urls=urls,
        extra={**STREAMING, "ADMIN_IDS": "1"},
    )


async def test_private_answer_streams_drafts_then_one_final_message(
    app_factory: AppFactory,
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
    tmp_path: Path,
) -> None:
    """A long answer shows at least 3 growing drafts with can_stop, never more than one
    per STREAM_DRAFT_INTERVAL_MS, then exactly one final message with the whole text."""
    bot = app_factory(env=env_for(tmp_path, fake_telegram, fake_providers, ("groq",)))
    await bot.start()
    fake_providers.script("groq", {"text": LONG, "interval_s": 0.01})
    mark = fake_telegram.mark()
    fake_telegram.inject_message(42, "Tell me a long story")
    [final] = await fake_telegram.wait_sent(42, since=mark, timeout=20)
    assert final.method == "sendMessage" and final.text == LONG
    drafts = fake_telegram.drafts(42)
    assert len(drafts) >= 3
    assert all(d.can_stop and d.draft_id == drafts[0].draft_id != 0 for d in drafts)
    assert all(len(b.text) > len(a.text) for a, b in itertools.pairwise(drafts))
    assert all(LONG.startswith(d.text) for d in drafts)
    gaps = [b.at - a.at for a, b in itertools.pairwise(drafts)]
    assert min(gaps) >= 0.2 - 0.01
    await asyncio.sleep(0.3)
    assert len(fake_telegram.sent_events(42, since=mark)) == 1
    assert await bot.stop() == 0


async def test_stop_after_fifth_chunk_settles_what_was_received(
    app_factory: AppFactory,
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
    tmp_path: Path,
) -> None:
    """The draft's Stop after the 5th chunk: the provider's connection closes within
    1 s; the user gets the partial text marked stopped; the hold is settled estimated at
    input + tokens received (well below the ceiling) and flagged stopped; no other
    provider is asked; /budget counts the stop."""
    bot = app_factory(env=env_for(tmp_path, fake_telegram, fake_providers, ("deepseek",)))
    await bot.start()
    fake_providers.script("deepseek", {"text": LONG, "interval_s": 0.05, "no_usage": True})
    mark = fake_telegram.mark()
    fake_telegram.inject_message(42, "Tell me a long story")
    await until(lambda: bool(fake_providers.streams) and fake_providers.streams[0].chunks_sent >= 5)
    await until(lambda: bool(fake_telegram.drafts(42)))
    stopped_at = asyncio.get_running_loop().time()
    fake_telegram.inject_stopped_generation(42, fake_telegram.drafts(42)[0].draft_id)
    [final] = await fake_telegram.wait_sent(42, since=mark, timeout=20)
    log = fake_providers.streams[0]
    assert log.closed_at is not None and log.closed_at - stopped_at < 1.0
    assert not log.finished
    received = log.text_sent  # written by the fake; the bot may have read less of it
    partial, _, note = final.text.partition("\n\n")
    assert "Stopped" in note and len(partial) >= 16 and received.startswith(partial)
    assert len(fake_providers.requests) == 1
    [hold] = holds(tmp_path / "kopek.db")
    assert hold["state"] == "settled" and hold["estimated"] == 1 and hold["stopped"] == 1
    counted = TokenCounter().messages([Message("assistant", received)])
    assert hold["usage_output"] <= counted + log.chunks_sent + 1
    assert hold["usage_input"] == hold["input_tokens"]
    assert hold["actual_musd"] < hold["ceiling_musd"] // 4

    mark = fake_telegram.mark()
    fake_telegram.inject_message(1, "/budget")
    [report] = await fake_telegram.wait_sent(1, since=mark, timeout=20)
    assert "Stopped answers today: 1" in report.text
    assert f"not generated: {hold['max_tokens'] - hold['usage_output']}" in report.text
    assert await bot.stop() == 0


async def test_topic_edits_keep_thread_and_others_cannot_stop(
    app_factory: AppFactory,
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
    tmp_path: Path,
) -> None:
    """In a forum topic: one message sent into the topic with a Stop button, edited at
    most once per STREAM_EDIT_INTERVAL_MS (the edits stay in the topic); a Stop press by
    another user is refused with a callback answer and the stream goes on; the final
    edit has the whole text and no button; a press after the end says it is over."""
    bot = app_factory(env=env_for(tmp_path, fake_telegram, fake_providers, ("groq",)))
    await bot.start()
    forum = -1007000
    fake_providers.script("groq", {"text": LONG, "interval_s": 0.02})
    mark = fake_telegram.mark()
    text = f"@{BOT} tell me a long story"
    fake_telegram.inject_message(
        30, text, chat_id=forum, chat_type="supergroup", thread_id=7, is_forum=True,
        entities=[{"type": "mention", "offset": 0, "length": len(BOT) + 1}],
    )  # fmt: skip
    [first] = await fake_telegram.wait_sent(forum, since=mark, timeout=20)
    assert first.message_thread_id == 7
    data = first.reply_markup["inline_keyboard"][0][0]["callback_data"]
    fake_telegram.inject_callback_query(31, data, message_id=first.message_id, chat_id=forum)
    refused = await fake_telegram.wait_request("answerCallbackQuery", timeout=10)
    assert refused.params.get("text") == DENIED  # told, and only them (a callback answer)

    def done() -> bool:
        events = fake_telegram.sent_events(forum, since=mark)
        return bool(events) and events[-1].text == LONG and not events[-1].reply_markup

    await until(done, 30)
    events = fake_telegram.sent_events(forum, since=mark)
    assert all(e.message_thread_id == 7 and e.message_id == first.message_id for e in events)
    edits = [r for r in fake_telegram.requests("editMessageText") if r.chat_id == forum]
    assert len(edits) >= 2
    streaming_edits = edits[:-1]  # the last one is the final answer
    gaps = [b.monotonic - a.monotonic for a, b in itertools.pairwise(streaming_edits)]
    assert all(gap >= 1.0 - 0.02 for gap in gaps)
    assert fake_providers.streams[0].finished  # not stopped by the other user
    # the asker's press after the end changes nothing and says why
    fake_telegram.inject_callback_query(30, data, message_id=first.message_id, chat_id=forum)
    late = await fake_telegram.wait_request(
        "answerCallbackQuery", lambda r: r.seq > refused.seq, timeout=10
    )
    assert late.params.get("text") == "This answer is no longer being written."
    assert fake_telegram.sent_events(forum, since=mark)[-1].text == LONG
    assert await bot.stop() == 0


async def test_cuts_after_and_before_text(
    app_factory: AppFactory,
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
    tmp_path: Path,
) -> None:
    """A cut after text was shown: that text with a note, one provider, settled
    estimated. A cut before any text: the next provider answers, the first attempt is
    released."""
    env = env_for(tmp_path, fake_telegram, fake_providers, ("groq", "deepseek"))
    bot = app_factory(env=env)
    await bot.start()
    fake_providers.script("groq", {"text": LONG, "interval_s": 0.03, "cut_after": 20})
    mark = fake_telegram.mark()
    fake_telegram.inject_message(42, "first")
    [cut] = await fake_telegram.wait_sent(42, since=mark, timeout=20)
    assert cut.text.startswith(LONG[:80].strip()) and "answer broke off here" in cut.text
    assert len(fake_providers.requests) == 1
    [hold] = holds(tmp_path / "kopek.db")
    assert hold["state"] == "settled" and hold["estimated"] == 1 and hold["usage_output"] > 0

    fake_providers.script("gsk_fake_groq_key_1", {"text": LONG, "cut_after": 0})
    fake_providers.script("gsk_fake_groq_key_2", {"text": LONG, "cut_after": 0})
    fake_providers.script("deepseek", {"text": "from the anchor"})
    mark = fake_telegram.mark()
    fake_telegram.inject_message(42, "second")
    [answer] = await fake_telegram.wait_sent(42, since=mark, timeout=20)
    assert answer.text == "from the anchor"
    later = holds(tmp_path / "kopek.db")[1:]
    assert [h["state"] for h in later] == ["released", "released", "settled"]
    assert await bot.stop() == 0


async def test_kill_hard_cuts_every_stream(
    app_factory: AppFactory,
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
    tmp_path: Path,
) -> None:
    """/kill hard with 3 streams in flight: all 3 connections closed within 1 s, each
    hold settled at the tokens received, nothing left held; the admin's reply is written
    after the cuts settled and says so (exposure now $0, not the three ceilings)."""
    bot = app_factory(env=env_for(tmp_path, fake_telegram, fake_providers, ("deepseek",)))
    await bot.start()
    fake_providers.default("deepseek", {"text": LONG, "interval_s": 0.1, "no_usage": True})
    for user in (51, 52, 53):
        fake_telegram.inject_message(user, "Tell me a long story")
    await until(
        lambda: (
            len(fake_providers.streams) == 3
            and all(s.chunks_sent >= 2 for s in fake_providers.streams)
        )
    )
    mark = fake_telegram.mark()
    killed_at = asyncio.get_running_loop().time()
    fake_telegram.inject_message(1, "/kill hard test")
    await until(lambda: all(s.closed_at is not None for s in fake_providers.streams), 5)
    assert all(
        s.closed_at is not None and s.closed_at - killed_at < 1.0 for s in fake_providers.streams
    )
    for user in (51, 52, 53):
        [final] = await fake_telegram.wait_sent(user, since=mark, timeout=20)
        assert "Stopped by an admin" in final.text
    rows = holds(tmp_path / "kopek.db")
    assert len(rows) == 3
    assert all(r["state"] == "settled" and r["estimated"] == 1 for r in rows)
    assert all(0 < r["actual_musd"] < r["ceiling_musd"] for r in rows)
    [report] = await fake_telegram.wait_sent(1, since=mark, timeout=20)
    # the reply comes once the cuts settled, and says what is still held then
    assert "3 streamed answer(s) in flight cut (settled at the tokens received)" in report.text
    assert report.text.endswith("now: $0.000000")
    assert "Exposure when killed: $0.000000" not in report.text  # three holds were out
    assert await bot.stop() == 0


async def test_streaming_in_a_real_bot_process(
    bot_factory: BotFactory,
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
    tmp_path: Path,
) -> None:
    """The same drafts-then-final answer from ``python -m bot`` as a process (the
    composition root with its own settings parsing, event loop and polling)."""
    bot = bot_factory(env=env_for(tmp_path, fake_telegram, fake_providers, ("groq",)))
    await bot.start()
    fake_providers.script("groq", {"text": LONG, "interval_s": 0.01})
    mark = fake_telegram.mark()
    fake_telegram.inject_message(42, "Tell me a long story")
    [final] = await fake_telegram.wait_sent(42, since=mark, timeout=30)
    assert final.text == LONG
    drafts = fake_telegram.drafts(42)
    assert len(drafts) >= 3 and all(d.can_stop for d in drafts)
    assert await bot.stop() == 0
