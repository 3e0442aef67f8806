"""Groups, anonymous admins, forum topics, refused sends, long pastes —
in-process (create_app) against the fake Bot API; the exit on service ids in ADMIN_IDS
through the real process (an exit code), the resend notice in a topic after a crash in
``test_admin.py``'s crash test (one process pair for both)."""

from __future__ import annotations

import asyncio
import sqlite3
import urllib.request
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from bot.handlers.chat import TYPING_DELAY_S
from tests.e2e.test_admin import _free_port
from tests.support.groups import BOT, drain, mention
from tests.support.harness import BotFactory, wait_provider_requests
from tests.support.inprocess import AppFactory
from tests.support.providers import FakeProviders
from tests.support.telegram import FakeTelegram

ADMIN = 1
ANONYMOUS_ADMIN = 1087968824  # GroupAnonymousBot
TELEGRAM_SERVICE = 777000  # channel posts forwarded into a discussion group
CHANNEL_BOT = 136817688  # channel-signed messages


def _group(chat_id: int, title: str = "Group") -> dict[str, Any]:
    return {"id": chat_id, "type": "supergroup", "title": title}


def _rows(db: Path, sql: str, *params: object) -> list[tuple[Any, ...]]:
    with sqlite3.connect(db) as conn:
        return list(conn.execute(sql, params).fetchall())


async def test_service_ids_in_admin_ids_exit_2_with_one_line(
    bot_factory: BotFactory, bot_env: dict[str, str]
) -> None:
    """ADMIN_IDS with GroupAnonymousBot's id → exit 2, one line naming it and why."""
    bot = bot_factory(env=dict(bot_env, ADMIN_IDS=f"{ADMIN},{ANONYMOUS_ADMIN}"))
    await bot.spawn()
    assert await bot.wait_exit(60) == 2
    lines = [line for line in bot.logs().splitlines() if line.strip()]
    assert len(lines) == 1, lines
    assert "ADMIN_IDS" in lines[0] and str(ANONYMOUS_ADMIN) in lines[0]
    assert "anonymous" in lines[0]


async def test_anonymous_admins_are_one_payer_per_group_and_never_admins(
    app_factory: AppFactory,
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
    bot_env: dict[str, str],
    tmp_path: Path,
) -> None:
    """Anonymous admins of two groups (both arrive as user 1087968824) are counted under
    their group's id: with USER_DAILY_MESSAGES=1 each group gets one answer, and group
    A's second message is refused without touching group B. An unrelated group's
    anonymous admin — and even an ADMIN_IDS user posting with sender_chat — cannot run
    /budget or /kill (no reply, kill switch off). No profile row for the service id;
    the ledger's operations are keyed by the group ids."""
    bot = app_factory(env=dict(bot_env, ADMIN_IDS=str(ADMIN), USER_DAILY_MESSAGES="1"))
    await bot.start()
    group_a, group_b, group_c = -1001001, -1001002, -1001003

    async def anonymous(chat: int, text: str) -> None:
        fake_telegram.inject_message(
            ANONYMOUS_ADMIN,
            text,
            entities=mention(text) if text.startswith("@") else None,
            chat_id=chat,
            chat_type="supergroup",
            sender_chat=_group(chat),
            user_is_bot=True,
            username="GroupAnonymousBot",
            first_name="Group",
        )

    mark = fake_telegram.mark()
    await anonymous(group_a, f"@{BOT} question from A")
    [a1] = await fake_telegram.wait_sent(group_a, since=mark, timeout=20)
    assert a1.text.startswith("echo:"), a1.text
    mark = fake_telegram.mark()
    await anonymous(group_b, f"@{BOT} question from B")
    [b1] = await fake_telegram.wait_sent(group_b, since=mark, timeout=20)
    assert b1.text.startswith("echo:"), b1.text
    mark = fake_telegram.mark()
    await anonymous(group_a, f"@{BOT} second from A")
    [a2] = await fake_telegram.wait_sent(group_a, since=mark, timeout=20)
    assert "today's messages" in a2.text, a2.text
    assert len(fake_providers.requests) == 2

    mark = fake_telegram.mark()
    await anonymous(group_c, "/budget")
    await anonymous(group_c, "/kill because I can")
    await anonymous(group_c, f"/kill@{BOT} because I can")
    fake_telegram.inject_message(
        ADMIN, "/kill via sender_chat", chat_id=group_c, chat_type="supergroup",
        sender_chat=_group(group_c),
    )  # fmt: skip
    fake_telegram.inject_message(
        TELEGRAM_SERVICE, "/budget", chat_id=group_c, chat_type="supergroup",
        sender_chat={"id": -1005555, "type": "channel", "title": "Linked"},
    )  # fmt: skip
    fake_telegram.inject_message(
        CHANNEL_BOT, "/unkill", chat_id=group_c, chat_type="supergroup",
        sender_chat={"id": -1006666, "type": "channel", "title": "Signed"},
    )  # fmt: skip
    await drain(fake_telegram, -1009999)
    assert fake_telegram.sent_events(group_c, since=mark) == []
    mark = fake_telegram.mark()
    fake_telegram.inject_message(ADMIN, "/budget")
    [report] = await fake_telegram.wait_sent(ADMIN, since=mark, timeout=20)
    assert "Kill switch: off" in report.text
    assert await bot.stop() == 0

    db = tmp_path / "kopek.db"
    profiles = {r[0] for r in _rows(db, "SELECT user_id FROM user_profiles")}
    assert not profiles & {ANONYMOUS_ADMIN, TELEGRAM_SERVICE, CHANNEL_BOT}, profiles
    payers = {r[0] for r in _rows(db, "SELECT user_id FROM budget_operations")}
    assert payers == {group_a, group_b}, payers


async def test_topic_messages_are_answered_in_their_topic_and_general_in_general(
    app_factory: AppFactory,
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
    bot_env: dict[str, str],
) -> None:
    """A mention in topic 7: typing action, answer and a refusal template carry
    message_thread_id 7; the stale template too; a message in General carries none.
    (After a crash the resend notice goes to topic 7 as well: test_admin.py.)"""
    bot = app_factory()
    await bot.start()
    forum = -1007000

    def in_topic(text: str, **kwargs: Any) -> None:
        fake_telegram.inject_message(
            30, text, chat_id=forum, chat_type="supergroup", thread_id=7,
            entities=mention(text), **kwargs,
        )  # fmt: skip

    fake_providers.script("groq", {"text": "topic answer", "delay_s": TYPING_DELAY_S + 0.3})
    mark = fake_telegram.mark()
    requests_mark = len(fake_telegram.requests())
    in_topic(f"@{BOT} hello topic")
    [answer] = await fake_telegram.wait_sent(forum, since=mark, timeout=20)
    assert answer.text == "topic answer" and answer.message_thread_id == 7
    actions = [r for r in fake_telegram.requests("sendChatAction") if r.chat_id == forum]
    assert actions and all(int(r.params["message_thread_id"]) == 7 for r in actions)
    assert all(
        int(r.params.get("message_thread_id", 0)) == 7
        for r in fake_telegram.requests()[requests_mark:]
        if r.chat_id == forum
    )

    mark = fake_telegram.mark()
    in_topic(f"@{BOT} \u200b")  # nothing visible to ask: the "looks empty" template
    [empty] = await fake_telegram.wait_sent(forum, since=mark, timeout=20)
    assert "empty" in empty.text and empty.message_thread_id == 7

    mark = fake_telegram.mark()
    in_topic(f"@{BOT} old question", date=datetime.now(UTC) - timedelta(hours=2))
    [stale] = await fake_telegram.wait_sent(forum, since=mark, timeout=20)
    assert "offline" in stale.text and stale.message_thread_id == 7

    mark = fake_telegram.mark()
    fake_telegram.inject_message(
        31, f"@{BOT} hello general", chat_id=forum, chat_type="supergroup", is_forum=True,
        entities=mention(f"@{BOT}"),
    )  # fmt: skip
    [general] = await fake_telegram.wait_sent(forum, since=mark, timeout=20)
    assert general.text.startswith("echo:") and general.message_thread_id is None
    last = fake_telegram.requests("sendMessage")[-1]
    assert "message_thread_id" not in last.params

    assert await bot.stop() == 0


async def _metric(port: int, name: str) -> str:
    """The lines of ``/metrics`` starting with ``name`` (read in a thread: the bot serves
    them from this process)."""

    def scrape() -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
            return str(resp.read().decode())

    body = await asyncio.to_thread(scrape)
    return "\n".join(line for line in body.splitlines() if line.startswith(name))


async def test_undeliverable_paid_answer_is_not_called_free_nor_generated_again(
    app_factory: AppFactory,
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
    bot_env: dict[str, str],
    tmp_path: Path,
) -> None:
    """Paid DeepSeek answer, settled, then 400 TOPIC_CLOSED: one sendMessage attempt,
    no "nothing was charged" anywhere, one provider call; the same update delivered
    again is not answered again. CHAT_WRITE_FORBIDDEN and "not enough rights" the same.
    Each failure is logged with Telegram's description and counted in the metric."""
    port = _free_port()
    env = dict(bot_env, METRICS_PORT=str(port))
    for name in ("GROQ_API_KEY", "GROQ_API_KEY_2", "MISTRAL_API_KEY", "CEREBRAS_API_KEY"):
        env.pop(name, None)
    fake_providers.script(
        "deepseek",
        *[{"text": "paid answer", "prompt_tokens": 200, "completion_tokens": 300}] * 3,
    )
    bot = app_factory(env=env)
    await bot.start()
    forum, closed = -1008000, 7
    fake_telegram.close_topic(forum, closed)
    mark = fake_telegram.mark()
    requests_mark = len(fake_telegram.requests())
    update = {
        "message": {
            "message_id": 501,
            "from": {"id": 40, "is_bot": False, "first_name": "U"},
            "chat": {"id": forum, "type": "supergroup", "title": "F", "is_forum": True},
            "date": int(datetime.now(UTC).timestamp()),
            "text": f"@{BOT} paid question",
            "entities": [{"type": "mention", "offset": 0, "length": len(BOT) + 1}],
            "message_thread_id": closed,
            "is_topic_message": True,
        }
    }
    fake_telegram.inject_update(update)
    await wait_provider_requests(fake_providers, 1)
    await drain(fake_telegram, -1009999)
    sends = [r for r in fake_telegram.requests("sendMessage") if r.chat_id == forum]
    assert len(sends) == 1 and sends[0].status == 400
    assert sends[0].response is not None
    assert sends[0].response["description"] == "Bad Request: TOPIC_CLOSED"
    assert int(sends[0].params["message_thread_id"]) == closed
    assert fake_telegram.sent_events(forum, since=mark) == []
    assert len(fake_providers.requests) == 1

    # the same message delivered again (e.g. after a crash): never generated again
    fake_telegram.inject_update(update)
    await drain(fake_telegram, -1009999)
    assert len(fake_providers.requests) == 1

    # two more chats that refuse the bot's messages
    for chat, description in (
        (-1008001, "Bad Request: CHAT_WRITE_FORBIDDEN"),
        (-1008002, "Bad Request: not enough rights to send text messages to the chat"),
    ):
        fake_telegram.restrict(chat, description)
        fake_telegram.inject_message(
            41, f"@{BOT} q", chat_id=chat, chat_type="supergroup", entities=mention(f"@{BOT}")
        )
    await wait_provider_requests(fake_providers, 3)
    await drain(fake_telegram, -1009999)
    for chat in (-1008001, -1008002):
        attempts = [r for r in fake_telegram.requests("sendMessage") if r.chat_id == chat]
        assert len(attempts) == 1 and attempts[0].status == 400
    assert len(fake_providers.requests) == 3
    everything = [r for r in fake_telegram.requests()[requests_mark:] if "text" in r.params]
    assert not any("othing was charged" in str(r.params["text"]) for r in everything)

    failures = await _metric(port, "kopek_delivery_failures_total")
    assert 'reason="TOPIC_CLOSED",what="answer"} 1.0' in failures, failures
    assert 'reason="CHAT_WRITE_FORBIDDEN",what="answer"} 1.0' in failures, failures
    assert 'reason="not_enough_rights",what="answer"} 1.0' in failures, failures
    assert await bot.stop() == 0
    logs = bot.logs()
    assert "TOPIC_CLOSED" in logs and "not enough rights to send text" in logs

    db = tmp_path / "kopek.db"
    [(settled,)] = _rows(db, "SELECT SUM(actual_musd) FROM budget_holds WHERE state='settled'")
    assert settled > 0  # the answers were paid for: no template could say otherwise
    statuses = {
        r[0] for r in _rows(db, "SELECT status FROM seen_messages WHERE chat_id = ?", forum)
    }
    assert statuses == {"undeliverable"}


def _paste_parts(sizes: tuple[int, ...]) -> list[str]:
    words = "".join(f"word{i} " for i in range(4000))
    text = (words * 3)[: sum(sizes)]
    parts, at = [], 0
    for size in sizes:
        parts.append(text[at : at + size])
        at += size
    return parts


async def test_long_paste_split_by_telegram_is_one_question_with_one_answer(
    app_factory: AppFactory,
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
    bot_env: dict[str, str],
) -> None:
    """9,392 characters as 4096 + 4096 + 1200, 0.2 s apart → one provider call whose
    last user turn is the three parts joined in order, one answer. Two short messages
    0.2 s apart are two questions. (Summaries off: the 9,392-character turn fills the
    history, and the next message would fold it with a summary request of its own —
    tests/e2e/test_history_summaries.py is about that.)"""
    bot = app_factory(env={**bot_env, "CHAT_SUMMARY_MAX_TOKENS": "0"})
    await bot.start()
    parts = _paste_parts((4096, 4096, 1200))
    assert sum(map(len, parts)) == 9392
    fake_providers.script("groq", {"text": "one answer"}, {"text": "a"}, {"text": "b"})
    mark = fake_telegram.mark()
    for i, part in enumerate(parts):
        if i:
            await asyncio.sleep(0.2)
        fake_telegram.inject_message(50, part)
    [reply] = await fake_telegram.wait_sent(50, since=mark, timeout=20)
    assert reply.text == "one answer"
    await drain(fake_telegram, -1009999)
    assert len(fake_telegram.sent_events(50, since=mark)) == 1
    [request] = fake_providers.requests
    assert request.body["messages"][-1] == {"role": "user", "content": "".join(parts)}

    mark = fake_telegram.mark()
    fake_telegram.inject_message(50, "short one")
    await asyncio.sleep(0.2)
    fake_telegram.inject_message(50, "short two")
    replies = await fake_telegram.wait_sent(50, 2, since=mark, timeout=20)
    assert sorted(r.text for r in replies) == ["a", "b"]
    asked = sorted(r.body["messages"][-1]["content"] for r in fake_providers.requests[1:])
    assert asked == ["short one", "short two"]
    assert await bot.stop() == 0
