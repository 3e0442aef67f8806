"""The streaming interval holds per chat across answers streaming at once: several
answers in one group share one edit per ``STREAM_EDIT_INTERVAL_MS``, two answers in one
private chat share one draft per ``STREAM_DRAFT_INTERVAL_MS``; final answers are not held
back. And a Bot API server without ``sendMessageDraft`` (404) is named once in the log."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from tests.e2e.test_stream import LONG, env_for, until
from tests.e2e.test_stream_edges import GROUP, mention
from tests.support.inprocess import AppFactory
from tests.support.providers import FakeProviders
from tests.support.telegram import FakeTelegram

EDIT_S = 1.0  # STREAM_EDIT_INTERVAL_MS is at least 1000
DRAFT_S = 0.2
SLACK_S = 0.01  # the fake records arrival; the gate measures from the previous answer


def overlapping(spans: list[tuple[float, float]]) -> bool:
    """Some two (start, end) spans overlap in time."""
    return any(a[0] < b[1] and b[0] < a[1] for a, b in itertools.combinations(spans, 2))


async def test_concurrent_group_answers_share_the_chats_edit_interval(
    app_factory: AppFactory,
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
    tmp_path: Path,
) -> None:
    """Four users mention the bot in one group at once: the streaming-phase calls into
    that chat (first sendMessage with the Stop button, and editMessageText with it) of
    all four answers together are spaced at least STREAM_EDIT_INTERVAL_MS apart, at
    least three answers stream while another does (it is a concurrent case), and every
    answer's final message holds the whole text without a button."""
    env = env_for(tmp_path, fake_telegram, fake_providers, ("groq",))
    env["STREAM_EDIT_INTERVAL_MS"] = str(int(EDIT_S * 1000))
    bot = app_factory(env=env)
    await bot.start()
    fake_providers.default("groq", {"text": LONG, "interval_s": 0.06})  # ~10 s each
    for user in (1401, 1402, 1403, 1404):
        mention(fake_telegram, user, "tell me a long story")

    def finished() -> list[str]:
        return [
            m.text
            for m in fake_telegram.sent_messages(GROUP)
            if m.text == LONG and not m.reply_markup
        ]

    await until(lambda: len(finished()) == 4, 60)
    calls = [
        r
        for r in fake_telegram.requests()
        if r.chat_id == GROUP and r.method in ("sendMessage", "editMessageText")
    ]
    streaming = [r for r in calls if r.params.get("reply_markup")]
    gaps = [b.monotonic - a.monotonic for a, b in itertools.pairwise(streaming)]
    assert len(gaps) >= 5
    assert min(gaps) >= EDIT_S - SLACK_S, sorted(gaps)[:3]
    spans: dict[object, list[float]] = {}
    for r in streaming:
        key = r.params.get("message_id") or (r.response and r.response["result"]["message_id"])
        spans.setdefault(key, []).append(r.monotonic)
    assert len(spans) >= 3  # at least three answers got a streamed message
    assert overlapping([(min(t), max(t)) for t in spans.values() if len(t) > 1])
    assert fake_telegram.flood_violations() == []
    assert await bot.stop() == 0


async def test_two_answers_in_one_private_chat_share_the_draft_interval(
    app_factory: AppFactory,
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
    tmp_path: Path,
) -> None:
    """One user sends two messages at once (USER_MAX_INFLIGHT=2): both answers stream
    drafts (two draft ids, interleaved in time), all drafts into the chat together are
    at least STREAM_DRAFT_INTERVAL_MS apart, and both final answers arrive whole."""
    env = env_for(tmp_path, fake_telegram, fake_providers, ("groq",))
    env["STREAM_DRAFT_INTERVAL_MS"] = str(int(DRAFT_S * 1000))
    env["USER_MAX_INFLIGHT"] = "2"
    bot = app_factory(env=env)
    await bot.start()
    fake_providers.default("groq", {"text": LONG, "interval_s": 0.02})
    mark = fake_telegram.mark()
    fake_telegram.inject_message(1405, "Tell me a long story")
    fake_telegram.inject_message(1405, "Tell me another long story")
    finals = await fake_telegram.wait_sent(1405, count=2, since=mark, timeout=60)
    assert [f.text for f in finals] == [LONG, LONG]
    drafts = fake_telegram.drafts(1405)
    gaps = [b.at - a.at for a, b in itertools.pairwise(drafts)]
    assert len(gaps) >= 4
    assert min(gaps) >= DRAFT_S - SLACK_S, sorted(gaps)[:3]
    spans: dict[int, list[float]] = {}
    for d in drafts:
        spans.setdefault(d.draft_id, []).append(d.at)
    assert len(spans) == 2 and all(len(t) >= 2 for t in spans.values())
    assert overlapping([(min(t), max(t)) for t in spans.values()])
    assert await bot.stop() == 0


async def test_a_bot_api_server_without_drafts_is_named_once_in_the_log(
    app_factory: AppFactory,
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """sendMessageDraft answered 404 (an older local Bot API server): every answer still
    arrives whole, and the log has exactly one WARNING saying drafts are not supported
    and what to set (STREAM_MODE_PRIVATE=edit or off), however many answers hit it."""
    # once per process: as if this process had not met such a server before
    monkeypatch.setattr("bot.chat.streaming.displays._drafts_unsupported_warned", False)
    bot = app_factory(env=env_for(tmp_path, fake_telegram, fake_providers, ("groq",)))
    await bot.start()
    fake_telegram.fail_next("sendMessageDraft", 404, "Not Found", count=1000)
    fake_providers.default("groq", {"text": LONG, "interval_s": 0.01})
    for user in (1501, 1502, 1503):
        mark = fake_telegram.mark()
        fake_telegram.inject_message(user, "Tell me a long story")
        [final] = await fake_telegram.wait_sent(user, since=mark, timeout=30)
        assert final.text == LONG
    assert len(fake_telegram.requests("sendMessageDraft")) >= 3  # each answer tried
    lines = [
        line for line in bot.logs().splitlines() if "sendMessageDraft is not supported" in line
    ]
    assert len(lines) == 1
    assert "WARNING" in lines[0] and "STREAM_MODE_PRIVATE=edit" in lines[0] and "off" in lines[0]
    assert await bot.stop() == 0
