"""Governed chat through the real bot process, the fakes and the real ledger."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime, timedelta

from bot.chat.delivery import split_markdown
from bot.handlers.chat import TYPING_DELAY_S
from tests.support.harness import wait_provider_requests
from tests.support.inprocess import AppFactory
from tests.support.providers import FakeProviders
from tests.support.telegram import FakeTelegram, SentMessage

TELEGRAM_LIMIT = 4096


def _utf16(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


async def test_chat_answered_by_first_free_provider_with_typing(
    app_factory: AppFactory, fake_telegram: FakeTelegram, fake_providers: FakeProviders
) -> None:
    """A private message is answered by Groq key 1 (first free provider); a typing
    action is sent while the model takes longer than TYPING_DELAY_S; exactly one
    provider request; /me then shows the user's levels."""
    bot = app_factory()
    await bot.start()
    fake_providers.script(
        "groq",
        {
            "text": "Four.",
            "prompt_tokens": 30,
            "completion_tokens": 2,
            "delay_s": TYPING_DELAY_S + 0.5,
        },
    )
    mark = fake_telegram.mark()
    fake_telegram.inject_message(42, "What is 2+2?")
    [reply] = await fake_telegram.wait_sent(42, since=mark, timeout=20)
    assert reply.text == "Four."
    [request] = fake_providers.requests
    assert request.provider == "groq" and request.key == "gsk_fake_groq_key_1"
    assert request.body["max_tokens"] == 1024
    assert request.body["messages"][-1] == {"role": "user", "content": "What is 2+2?"}
    assert fake_telegram.requests("sendChatAction"), "typing was shown"

    mark = fake_telegram.mark()
    fake_telegram.inject_message(42, "/me")
    [me] = await fake_telegram.wait_sent(42, since=mark)
    assert "user" in me.text or "global" in me.text
    assert len(fake_providers.requests) == 1, "/me makes no LLM call"
    assert await bot.stop() == 0


async def test_history_is_sent_and_reset_clears_it(
    app_factory: AppFactory, fake_telegram: FakeTelegram, fake_providers: FakeProviders
) -> None:
    """The second message carries the first turn as history; /reset clears it."""
    bot = app_factory()
    await bot.start()
    for text in ("My name is Ada.", "What is my name?"):
        mark = fake_telegram.mark()
        fake_telegram.inject_message(9, text)
        await fake_telegram.wait_sent(9, since=mark, timeout=20)
    second = fake_providers.requests[1].body["messages"]
    assert [m["content"] for m in second if m["role"] == "user"] == [
        "My name is Ada.",
        "What is my name?",
    ]
    mark = fake_telegram.mark()
    fake_telegram.inject_message(9, "/reset")
    await fake_telegram.wait_sent(9, since=mark)
    mark = fake_telegram.mark()
    fake_telegram.inject_message(9, "Hello again")
    await fake_telegram.wait_sent(9, since=mark, timeout=20)
    third = fake_providers.requests[2].body["messages"]
    assert [m["content"] for m in third if m["role"] == "user"] == ["Hello again"]
    await bot.stop()


def _long_markdown() -> str:
    parts = []
    for i in range(12):
        parts.append(f"## Section {i}\n\nSome **bold** text and `inline code` 🙂 number {i}.\n")
        parts.append("```python\n" + "".join(f"print({i}, {j})\n" for j in range(25)) + "```\n")
        parts.append("Plain paragraph. " * 30 + "\n")
    text = "\n".join(parts)
    assert len(text) >= 10_000
    return text


async def test_long_markdown_answer_is_split_within_telegram_limits(
    app_factory: AppFactory,
    bot_env: dict[str, str],
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
) -> None:
    """10,000+ characters of Markdown with code blocks arrive as several messages, each
    within 4096 UTF-16 units, entities accepted by the fake's parser, no code line lost.
    (max_tokens 2048: 10,925 characters are more than 1,024 tokens could produce at the
    plausibility rule of 8 characters a token, and would be cut.)"""
    bot = app_factory(env={**bot_env, "CHAT_MAX_OUTPUT_TOKENS": "2048"})
    await bot.start()
    fake_providers.script("groq", {"text": _long_markdown(), "completion_tokens": 1900})
    mark = fake_telegram.mark()
    fake_telegram.inject_message(11, "Write a long answer")
    expected = len(split_markdown(_long_markdown()))
    parts = await fake_telegram.wait_sent(11, expected, since=mark, timeout=20)
    assert len(parts) >= 3
    assert all(_utf16(p.text) <= TELEGRAM_LIMIT for p in parts)
    joined = "\n".join(p.text for p in parts)
    for i in range(12):
        for j in range(25):
            assert f"print({i}, {j})" in joined
    assert any(e.type == "pre" for p in parts for e in p.entities)
    assert len(fake_providers.requests) == 1
    await bot.stop()


async def test_a_long_paragraph_arrives_in_messages_that_end_between_words(
    app_factory: AppFactory,
    bot_env: dict[str, str],
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
) -> None:
    """An answer of 9,000 characters with no newline (streamed, as private chats are by
    default) arrives as messages that each end at a whole word; joined, every word."""
    bot = app_factory(env={**bot_env, "CHAT_MAX_OUTPUT_TOKENS": "2048"})
    await bot.start()
    words = [f"token{i}" for i in range(1100)]
    fake_providers.script("groq", {"text": " ".join(words), "completion_tokens": 1900})
    mark = fake_telegram.mark()
    fake_telegram.inject_message(13, "One long paragraph, please")
    expected = len(split_markdown(" ".join(words)))
    parts = await fake_telegram.wait_sent(13, expected, since=mark, timeout=20)
    assert expected >= 3
    assert " ".join(p.text.strip() for p in parts).split(" ") == words
    assert len(fake_providers.requests) == 1
    await bot.stop()


async def test_parse_entities_error_resends_plain_text_without_second_llm_call(
    app_factory: AppFactory, fake_telegram: FakeTelegram, fake_providers: FakeProviders
) -> None:
    """Telegram refusing the entities (400 can't parse entities) → the same answer as
    plain text; exactly one LLM call."""
    bot = app_factory()
    await bot.start()
    fake_providers.script("groq", {"text": "Here is **bold** and `code`."})
    fake_telegram.fail_next(
        "sendMessage",
        400,
        "Bad Request: can't parse entities: Can't find end of the entity starting at byte offset 8",
        chat_id=12,
    )
    mark = fake_telegram.mark()
    fake_telegram.inject_message(12, "format something")
    [reply] = await fake_telegram.wait_sent(12, since=mark, timeout=20)
    assert "bold" in reply.text and "code" in reply.text
    assert reply.entities == ()
    assert len(fake_providers.requests) == 1
    await bot.stop()


async def test_same_message_delivered_twice_reaches_the_llm_once(
    app_factory: AppFactory, fake_telegram: FakeTelegram, fake_providers: FakeProviders
) -> None:
    """Telegram re-delivering an update (same chat_id, message_id) is dropped."""
    bot = app_factory()
    await bot.start()
    mark = fake_telegram.mark()
    fake_telegram.inject_message(13, "only once please")
    await fake_telegram.wait_sent(13, since=mark, timeout=20)
    original = next(
        r for r in fake_telegram.requests("getUpdates") if r.response and r.response.get("result")
    )
    raw = original.response["result"][0] if original.response else {}
    duplicate = {k: v for k, v in raw.items() if k != "update_id"}
    fake_telegram.inject_update(duplicate)
    fake_telegram.inject_message(13, "/help")  # a marker processed after the duplicate
    await fake_telegram.wait_for(lambda m: m.chat_id == 13 and "/me" in m.text, since=mark)
    assert len(fake_providers.requests) == 1
    await bot.stop()


async def test_stale_message_gets_resend_template_and_no_llm_call(
    app_factory: AppFactory, fake_telegram: FakeTelegram, fake_providers: FakeProviders
) -> None:
    """A message older than STALE_MESSAGE_SECONDS is answered by a template; a command
    of the same age is still processed."""
    bot = app_factory()
    await bot.start()
    old = datetime.now(UTC) - timedelta(hours=1)
    mark = fake_telegram.mark()
    fake_telegram.inject_message(14, "question from the past", date=old)
    [reply] = await fake_telegram.wait_sent(14, since=mark)
    assert "offline" in reply.text
    mark = fake_telegram.mark()
    fake_telegram.inject_message(14, "/help", date=old)
    [help_reply] = await fake_telegram.wait_sent(14, since=mark)
    assert "/me" in help_reply.text
    assert fake_providers.requests == []
    await bot.stop()


async def test_too_long_message_is_refused_before_any_llm_call(
    app_factory: AppFactory,
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
    bot_env: dict[str, str],
) -> None:
    """A message over CHAT_MAX_INPUT_TOKENS gets the too-long template (ru too)."""
    bot = app_factory(env=dict(bot_env, CHAT_MAX_INPUT_TOKENS="50"))
    await bot.start()
    mark = fake_telegram.mark()
    fake_telegram.inject_message(15, "word " * 200, language_code="ru")
    [reply] = await fake_telegram.wait_sent(15, since=mark)
    assert "слишком длинное" in reply.text
    assert fake_providers.requests == []
    await bot.stop()


async def test_group_messages_answered_only_when_mentioned_or_replied(
    app_factory: AppFactory, fake_telegram: FakeTelegram, fake_providers: FakeProviders
) -> None:
    """In a group, plain chatter is ignored; a mention of the bot is answered."""
    bot = app_factory()
    await bot.start()
    me = fake_telegram.bot_username
    group = -100500
    fake_telegram.inject_message(16, "just people talking", chat_id=group, chat_type="group")
    mention = f"@{me} what is the capital of France?"
    mark = fake_telegram.mark()
    fake_telegram.inject_message(
        16,
        mention,
        chat_id=group,
        chat_type="group",
        entities=[{"type": "mention", "offset": 0, "length": len(me) + 1}],
    )
    [reply] = await fake_telegram.wait_sent(group, since=mark, timeout=20)
    assert "capital of France" in reply.text  # the fake echoes the prompt
    assert len(fake_providers.requests) == 1
    assert fake_providers.requests[0].body["messages"][-1]["content"].startswith("what is")
    await bot.stop()


def _paid_only_env(bot_env: dict[str, str]) -> dict[str, str]:
    return dict(
        bot_env,
        BUDGET_GLOBAL_HOURLY_USD="0.05",
        AUTO_KILL_FRACTION="0",
        DEGRADED_MIN_OUTPUT_TOKENS="1024",
        CHAT_MAX_OUTPUT_TOKENS="1024",
        # An expensive paid anchor so that the limit binds: $10 in / $20 out per 1M
        # tokens → a ceiling of at least 1024 × 20 = 20,480 µUSD.
        PRICE_OVERRIDES='{"deepseek:deepseek-chat": '
        '{"input": "10", "cached_input": "1", "output": "20"}}',
        USER_MAX_PER_MINUTE="100",
    )


async def test_paid_anchor_only_twenty_users_never_exceed_the_global_limit(
    app_factory: AppFactory,
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
    bot_env: dict[str, str],
) -> None:
    """Free providers answer 429; DeepSeek answers; global hourly limit $0.05. Twenty
    users write at once: each gets an answer or a refusal naming the global limit (or
    busy); answers ≤ floor(50,000 µUSD ÷ 20,480 µUSD) = 2; DeepSeek saw no request for a
    refused message; a later message is refused naming the global limit and its reset."""
    for target in ("groq", "mistral", "cerebras"):
        fake_providers.script(target, *[{"status": 429, "retry_after": "600"}] * 40)
    fake_providers.script("deepseek", *[{"text": "paid answer", "completion_tokens": 1024}] * 40)
    bot = app_factory(env=_paid_only_env(bot_env))
    await bot.start()
    users = list(range(1000, 1020))
    mark = fake_telegram.mark()
    for uid in users:
        fake_telegram.inject_message(uid, f"hello from {uid}")
    replies: dict[int, SentMessage] = {}
    for uid in users:
        [replies[uid]] = await fake_telegram.wait_sent(uid, since=mark, timeout=60)
    answered = [u for u, m in replies.items() if m.text == "paid answer"]
    refused = [u for u, m in replies.items() if m.text != "paid answer"]
    for uid in refused:
        text = replies[uid].text
        assert "global" in text or "Busy" in text, text
    assert 1 <= len(answered) <= 2
    deepseek = fake_providers.requests_for("deepseek")
    assert len(deepseek) == len(answered)
    answered_prompts = {f"hello from {u}" for u in answered}
    assert {r.body["messages"][-1]["content"] for r in deepseek} == answered_prompts

    # everything has settled now: a new message is refused by the global limit
    mark = fake_telegram.mark()
    fake_telegram.inject_message(2000, "one more")
    [late] = await fake_telegram.wait_sent(2000, since=mark, timeout=20)
    assert "global" in late.text and "resets at" in late.text and "UTC" in late.text
    assert len(fake_providers.requests_for("deepseek")) == len(answered)

    # the ledger agrees: total settled ≤ $0.05 (admin view)
    await bot.stop()


async def test_kill_with_slow_requests_in_flight_then_restart_then_unkill(
    app_factory: AppFactory,
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
    bot_env: dict[str, str],
) -> None:
    """/kill while 3 slow paid requests run: they are answered and settled; new messages
    get the "paused" template and cause no provider request; /budget shows the exposure;
    after a restart the kill still holds; /unkill restores service with no stuck holds."""
    admin = 1
    env = dict(bot_env, ADMIN_IDS=str(admin), AUTO_KILL_FRACTION="0")
    for name in ("GROQ_API_KEY", "GROQ_API_KEY_2", "MISTRAL_API_KEY", "CEREBRAS_API_KEY"):
        env.pop(name, None)
    fake_providers.script("deepseek", *[{"text": "slow answer", "delay_s": 3.0}] * 3)
    bot = app_factory(env=env)
    await bot.start()
    mark = fake_telegram.mark()
    for uid in (21, 22, 23):
        fake_telegram.inject_message(uid, f"slow question {uid}")
    await wait_provider_requests(fake_providers, 3)
    fake_telegram.inject_message(admin, "/kill incident drill")
    kill_reply = await fake_telegram.wait_for(
        lambda m: m.chat_id == admin and "Kill switch ON" in m.text, since=mark
    )
    exposure = kill_reply.text.rsplit("$", 1)[1]
    assert exposure != "0.000000", kill_reply.text
    fake_telegram.inject_message(admin, "/budget")
    budget = await fake_telegram.wait_for(
        lambda m: m.chat_id == admin and "Budget" in m.text, since=mark
    )
    assert "KILLED" in budget.text and "exposure" in budget.text
    fake_telegram.inject_message(24, "new work during the kill")
    paused = await fake_telegram.wait_for(lambda m: m.chat_id == 24, since=mark, timeout=20)
    assert "paused" in paused.text
    for uid in (21, 22, 23):

        def in_chat(m: SentMessage, u: int = uid) -> bool:
            return m.chat_id == u

        answer = await fake_telegram.wait_for(in_chat, since=mark)
        assert answer.text == "slow answer"
    assert len(fake_providers.requests) == 3

    assert await bot.stop() == 0
    again = app_factory(env=env)
    await again.start()
    mark = fake_telegram.mark()
    fake_telegram.inject_message(25, "after restart")
    still = await fake_telegram.wait_for(lambda m: m.chat_id == 25, since=mark, timeout=20)
    assert "paused" in still.text
    fake_telegram.inject_message(admin, "/unkill")
    unkill = await fake_telegram.wait_for(
        lambda m: m.chat_id == admin and "OFF" in m.text, since=mark
    )
    assert "no holds are stuck" in unkill.text
    fake_telegram.inject_message(admin, "/unkill")
    await fake_telegram.wait_for(
        lambda m: m.chat_id == admin and "already off" in m.text, since=mark
    )
    fake_telegram.inject_message(25, "after unkill")
    served = await fake_telegram.wait_for(
        lambda m: m.chat_id == 25 and m.text != still.text, since=mark, timeout=20
    )
    assert served.text.endswith("after unkill")
    assert await again.stop() == 0


ADMIN_COMMANDS = [
    "/budget",
    "/budget chart",
    "/kill now",
    "/unkill",
    "/limit global day 0",
    "/team x add 5",
    "/team list",
    "/providers",
    "/providers enable groq",
    "/digest_now",
]


async def test_admin_commands_from_non_admin_look_unknown_and_change_nothing(
    app_factory: AppFactory,
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
    bot_env: dict[str, str],
) -> None:
    """Every admin command from a user not in ADMIN_IDS gets exactly the unknown-command
    reply; afterwards the bot is not killed and limits are unchanged (chat still works)."""
    bot = app_factory(env=dict(bot_env, ADMIN_IDS="1"))
    await bot.start()
    mark = fake_telegram.mark()
    fake_telegram.inject_message(77, "/definitely_unknown")
    [unknown] = await fake_telegram.wait_sent(77, since=mark)
    for command in ADMIN_COMMANDS:
        mark = fake_telegram.mark()
        fake_telegram.inject_message(77, command)
        [reply] = await fake_telegram.wait_sent(77, since=mark)
        assert reply.text == unknown.text, command
        assert reply.method == "sendMessage"
    mark = fake_telegram.mark()
    fake_telegram.inject_message(77, "still working?")
    [answer] = await fake_telegram.wait_sent(77, since=mark, timeout=20)
    assert answer.text.endswith("still working?")
    mark = fake_telegram.mark()
    fake_telegram.inject_message(1, "/budget")
    [budget] = await fake_telegram.wait_sent(1, since=mark)
    assert "Kill switch: off" in budget.text
    assert "Teams" not in budget.text
    await bot.stop()


async def test_courtesy_daily_message_limit(
    app_factory: AppFactory,
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
    bot_env: dict[str, str],
) -> None:
    """USER_DAILY_MESSAGES=1: the second message of the day gets the template with its
    reset time and no LLM call; /me shows 0 messages left."""
    bot = app_factory(env=dict(bot_env, USER_DAILY_MESSAGES="1"))
    await bot.start()
    mark = fake_telegram.mark()
    fake_telegram.inject_message(17, "first")
    await fake_telegram.wait_sent(17, since=mark, timeout=20)
    mark = fake_telegram.mark()
    fake_telegram.inject_message(17, "second")
    [refused] = await fake_telegram.wait_sent(17, since=mark)
    assert "today's messages" in refused.text and "resets at 00:00 UTC" in refused.text
    assert len(fake_providers.requests) == 1
    mark = fake_telegram.mark()
    fake_telegram.inject_message(17, "/me")
    [me] = await fake_telegram.wait_sent(17, since=mark)
    assert "Messages left today: 0 of 1" in me.text
    await bot.stop()


async def test_each_lost_message_gets_its_own_notice_as_a_reply_to_it(
    app_factory: AppFactory, fake_telegram: FakeTelegram, bot_env: dict[str, str]
) -> None:
    """A user whose three messages a process took in and never answered
    (two running, one queued, say) gets three notices at the next start, each a reply
    to the message it concerns and none saying "your last message"."""
    bot = app_factory(env=bot_env)
    await bot.start()
    assert await bot.stop() == 0
    path = bot_env["DATABASE_URL"].removeprefix("sqlite+aiosqlite:///")
    with sqlite3.connect(path) as conn:
        conn.executemany(
            "INSERT INTO seen_messages (chat_id, message_id, user_id, status, language,"
            " received_at) VALUES (90, ?, 90, 'received', 'en', '2026-01-01 00:00:00')",
            [(501,), (502,), (503,)],
        )
    mark = fake_telegram.mark()
    again = app_factory(env=bot_env)
    await again.start()
    notices = await fake_telegram.wait_sent(90, count=3, since=mark, timeout=20)
    assert sorted(n.reply_to_message_id or 0 for n in notices) == [501, 502, 503]
    for notice in notices:
        assert notice.text == "🕰 I was interrupted while answering this message. " + (
            "If no answer to it arrived, please send it again."
        )
    assert await again.stop() == 0
