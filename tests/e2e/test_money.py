"""The money promise in-process (create_app): no overshoot with a
provider that counts more than we do, errors inside a 200, empty completions, 402,
a deleted database, budget-shortened and oversized answers."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
from pathlib import Path

import pytest

from budget.pricing.tokens import TokenCounter
from llm.types import Message
from tests.support.harness import wait_provider_requests
from tests.support.inprocess import AppFactory, InProcessBot
from tests.support.providers import FakeProviders
from tests.support.telegram import FakeTelegram

ADMIN = 1
DEEPSEEK_KEY = "fake_deepseek_key"


def _deepseek_only(
    bot_env: dict[str, str], fake_providers: FakeProviders, **extra: str
) -> dict[str, str]:
    """The bot's environment with DeepSeek as the only provider and one admin."""
    env = {k: v for k, v in bot_env.items() if not k.startswith(("GROQ_", "MISTRAL_", "CEREBRAS_"))}
    env.update(
        DEEPSEEK_API_KEY=DEEPSEEK_KEY,
        DEEPSEEK_BASE_URL=fake_providers.base_urls["deepseek"],
        ADMIN_IDS=str(ADMIN),
    )
    env.update(extra)
    return env


def _db(env: dict[str, str]) -> Path:
    return Path(env["DATABASE_URL"].split("///", 1)[1])


def _global_day_settled(db: Path) -> int:
    with contextlib.closing(sqlite3.connect(db)) as conn:
        row = conn.execute(
            "SELECT COALESCE(SUM(settled_musd), 0) FROM budget_buckets"
            " WHERE level = 'global' AND win = 'day'"
        ).fetchone()
    return int(row[0])


def _holds(db: Path) -> list[tuple[str, int | None, int]]:
    with contextlib.closing(sqlite3.connect(db)) as conn:
        rows = conn.execute(
            "SELECT state, actual_musd, estimated FROM budget_holds ORDER BY granted_at"
        ).fetchall()
    return [(r[0], r[1], r[2]) for r in rows]


async def _start(app_factory: AppFactory, env: dict[str, str]) -> InProcessBot:
    bot = app_factory(env=env)
    await bot.start()
    return bot


@pytest.mark.parametrize("streaming", [False, True], ids=["one_piece", "streamed"])
async def test_sixty_users_on_deepseek_never_overshoot_the_global_limit(
    streaming: bool,
    app_factory: AppFactory,
    bot_env: dict[str, str],
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
) -> None:
    """DeepSeek only, global day 5,000 µUSD, 60 users at once, answers after 2 s; the
    provider reports prompt_tokens 120 (Kopek counts ~58) and bills all of max_tokens.
    Was 5,204 µUSD settled; now ≤ 5,000 (every hold's provable bound was admitted).
    The same with streaming at its defaults (drafts): the streamed path holds and
    settles under the same limit."""
    env = _deepseek_only(bot_env, fake_providers, BUDGET_GLOBAL_DAILY_USD="0.005")
    if streaming:
        del env["STREAM_MODE_PRIVATE"], env["STREAM_MODE_GROUP"]  # the defaults
    # 4,100 characters of short words: the fake bills min(max_tokens, 1,025) output
    # tokens, i.e. every call uses its whole max_tokens (and counting them stays cheap)
    step = {"prompt_tokens": 120, "delay_s": 2.0, "text": "word " * 820}
    fake_providers.default(DEEPSEEK_KEY, step)
    bot = await _start(app_factory, env)
    marks = fake_telegram.mark()
    users = range(1000, 1060)
    for uid in users:
        fake_telegram.inject_message(uid, f"Question number {uid}, please answer in detail.")
    await asyncio.gather(*(fake_telegram.wait_sent(uid, since=marks, timeout=60) for uid in users))
    assert await bot.stop() == 0
    settled = _global_day_settled(_db(env))
    assert len(fake_providers.requests) >= 5
    assert all(bool(r.body.get("stream")) is streaming for r in fake_providers.requests)
    assert bool(fake_telegram.drafts()) is streaming
    assert 0 < settled <= 5_000
    assert all(state != "held" for state, _, _ in _holds(_db(env)))


async def test_error_in_200_releases_the_hold(
    app_factory: AppFactory,
    bot_env: dict[str, str],
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
) -> None:
    """``200 {"error": {"code": 502, "message": "upstream overloaded"}}`` from DeepSeek:
    the hold is released (0 µUSD, was 446 at the ceiling); the user hears that all
    providers are unavailable — true, nothing was booked."""
    env = _deepseek_only(bot_env, fake_providers)
    fake_providers.script(DEEPSEEK_KEY, {"error_in_200": 502, "message": "upstream overloaded"})
    bot = await _start(app_factory, env)
    mark = fake_telegram.mark()
    fake_telegram.inject_message(42, "hello")
    [reply] = await fake_telegram.wait_sent(42, since=mark, timeout=20)
    assert "unavailable" in reply.text
    assert await bot.stop() == 0
    assert _holds(_db(env)) == [("released", 0, 0)]
    assert _global_day_settled(_db(env)) == 0


async def test_empty_length_completion_gets_could_not_answer(
    app_factory: AppFactory,
    bot_env: dict[str, str],
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
) -> None:
    """An empty completion with finish_reason "length" (all reasoning): the user gets
    the could-not-answer template with no "nothing was charged"; the spend is booked
    as reported (it was billed)."""
    env = _deepseek_only(bot_env, fake_providers)
    fake_providers.script(
        DEEPSEEK_KEY,
        {"text": "", "finish_reason": "length", "completion_tokens": 1024, "prompt_tokens": 40},
    )
    bot = await _start(app_factory, env)
    mark = fake_telegram.mark()
    fake_telegram.inject_message(43, "think hard")
    [reply] = await fake_telegram.wait_sent(43, since=mark, timeout=20)
    assert "could not answer" in reply.text
    assert "charged" not in reply.text.lower()
    assert await bot.stop() == 0
    [(state, actual, estimated)] = _holds(_db(env))
    assert state == "settled" and estimated == 0
    assert actual == _global_day_settled(_db(env)) > 0


async def test_402_disables_deepseek_and_tells_admins_once(
    app_factory: AppFactory,
    bot_env: dict[str, str],
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
) -> None:
    """DeepSeek 402 Insufficient Balance: the key is disabled (the next message makes no
    request to it), admins get exactly one notice naming /providers enable."""
    env = _deepseek_only(bot_env, fake_providers)
    fake_providers.script(
        DEEPSEEK_KEY,
        {"status": 402, "body": {"error": {"message": "Insufficient Balance", "type": "x"}}},
    )
    bot = await _start(app_factory, env)
    admin_mark = fake_telegram.mark()
    for text in ("first", "second"):
        mark = fake_telegram.mark()
        fake_telegram.inject_message(44, text)
        await fake_telegram.wait_sent(44, since=mark, timeout=20)
    assert len(fake_providers.requests_for(key=DEEPSEEK_KEY)) == 1
    [notice] = await fake_telegram.wait_sent(ADMIN, since=admin_mark, timeout=10)
    assert "deepseek" in notice.text and "/providers enable deepseek" in notice.text
    await bot.idle()  # both messages handled: a second notice would have been sent
    notices = [e for e in fake_telegram.sent_events(ADMIN, since=admin_mark) if not e.is_edit]
    assert len(notices) == 1
    assert await bot.stop() == 0


async def test_deleted_database_fails_closed_and_alerts_admins(
    app_factory: AppFactory,
    bot_env: dict[str, str],
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
) -> None:
    """The database file is deleted under the running bot: no provider call, the user
    gets the ledger-unavailable template, admins are told once."""
    env = _deepseek_only(bot_env, fake_providers)
    bot = await _start(app_factory, env)
    db = _db(env)
    for suffix in ("", "-wal", "-shm"):
        with contextlib.suppress(FileNotFoundError):
            os.remove(f"{db}{suffix}")
    admin_mark = fake_telegram.mark()
    for text in ("one", "two"):
        mark = fake_telegram.mark()
        fake_telegram.inject_message(45, text)
        [reply] = await fake_telegram.wait_sent(45, since=mark, timeout=20)
        assert "ledger is unavailable" in reply.text
    assert fake_providers.requests == []
    [notice] = await fake_telegram.wait_sent(ADMIN, since=admin_mark, timeout=10)
    assert "deleted" in notice.text
    await asyncio.sleep(0.5)
    notices = [e for e in fake_telegram.sent_events(ADMIN, since=admin_mark) if not e.is_edit]
    assert len(notices) == 1
    await bot.stop()


async def test_budget_shortened_answer_says_so(
    app_factory: AppFactory,
    bot_env: dict[str, str],
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
) -> None:
    """Global day 300 µUSD: the full hold (max_tokens 1024) does not fit, the ladder
    shrinks max_tokens; the answer stopped at that limit ends with a short note."""
    env = _deepseek_only(bot_env, fake_providers, BUDGET_GLOBAL_DAILY_USD="0.0003")
    fake_providers.script(DEEPSEEK_KEY, {"text": "A partial answer", "finish_reason": "length"})
    bot = await _start(app_factory, env)
    mark = fake_telegram.mark()
    fake_telegram.inject_message(46, "Tell me everything")
    [reply] = await fake_telegram.wait_sent(46, since=mark, timeout=20)
    await wait_provider_requests(fake_providers, 1)
    assert fake_providers.requests[0].body["max_tokens"] < 1024
    assert reply.text.startswith("A partial answer")
    assert "shortened to fit the remaining budget" in reply.text
    assert await bot.stop() == 0


async def test_oversized_answer_is_cut_and_stored_cut(
    app_factory: AppFactory,
    bot_env: dict[str, str],
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
) -> None:
    """~300 KB claiming 1,024 tokens: delivered cut to 8,192 characters with a note (3
    messages, not 74); history keeps the cut text with the tokens Kopek counted for it,
    not the provider's claimed 1,024."""
    env = _deepseek_only(bot_env, fake_providers)
    huge = "ab " * 100_000  # ~300 KB of short words (cheap to count once cut)
    fake_providers.script(DEEPSEEK_KEY, {"text": huge, "completion_tokens": 1024})
    bot = await _start(app_factory, env)
    mark = fake_telegram.mark()
    fake_telegram.inject_message(47, "Write a lot")
    parts = await fake_telegram.wait_sent(47, 3, since=mark, timeout=30)
    await bot.idle()  # the answer's handler returned: every part it sends was sent
    sent = [e for e in fake_telegram.sent_events(47, since=mark) if not e.is_edit]
    assert len(sent) == len(parts) == 3
    assert "cut here" in sent[-1].text
    assert await bot.stop() == 0
    with contextlib.closing(sqlite3.connect(_db(env))) as conn:
        [(content, tokens)] = conn.execute(
            "SELECT content, tokens FROM chat_turns WHERE role = 'assistant'"
        ).fetchall()
    assert content == huge[:8192]
    assert tokens == TokenCounter().messages([Message("assistant", content)])


#: $10 in / $1 cached / $20 out per 1M tokens: 10, 1 and 20 µUSD a token.
_CARD = '{"deepseek:deepseek-chat": {"input": "10", "cached_input": "1", "output": "20"}}'


@pytest.mark.parametrize("chat", ["private", "group"])
async def test_streamed_answer_settles_exactly_the_reported_usage(
    chat: str,
    app_factory: AppFactory,
    bot_env: dict[str, str],
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
) -> None:
    """Streaming at its defaults (drafts in a private chat, a message edited in place in
    a group): DeepSeek streams the answer and reports 57 prompt (8 of them cached) and
    33 completion tokens on its finish chunk. The hold settles exactly that usage at the
    card's prices — 49×10 + 8×1 + 33×20 = 1,158 µUSD, not estimated, not stopped — and
    the global day's spend is that amount; the user has the whole answer once."""
    env = _deepseek_only(bot_env, fake_providers, PRICE_OVERRIDES=_CARD)
    del env["STREAM_MODE_PRIVATE"], env["STREAM_MODE_GROUP"]  # the defaults: draft, edit
    answer = "Streamed, and billed as the provider reported. " * 4
    usage = {"prompt_tokens": 57, "cached_tokens": 8, "completion_tokens": 33}
    fake_providers.script(DEEPSEEK_KEY, {"text": answer, "interval_s": 0.01, **usage})
    bot = await _start(app_factory, env)
    mark = fake_telegram.mark()
    if chat == "private":
        where = 48
        fake_telegram.inject_message(where, "Tell me something")
    else:
        where = -1004800
        text = "@kopek_test_bot tell me something"
        fake_telegram.inject_message(
            48, text, chat_id=where, chat_type="supergroup",
            entities=[{"type": "mention", "offset": 0, "length": 15}],
        )  # fmt: skip

    def whole() -> bool:
        events = fake_telegram.sent_events(where, since=mark)
        return bool(events) and events[-1].text == answer.strip()

    await fake_telegram.wait_until(whole, 20)
    assert fake_providers.requests[0].body["stream"] is True
    if chat == "private":
        assert fake_telegram.drafts(where), "the answer streamed as drafts"
        assert len(fake_telegram.sent_events(where, since=mark)) == 1
    else:
        [sent, *edits] = fake_telegram.sent_events(where, since=mark)
        assert sent.reply_markup and edits and all(e.is_edit for e in edits)
    assert await bot.stop() == 0
    with contextlib.closing(sqlite3.connect(_db(env))) as conn:
        [row] = conn.execute(
            "SELECT state, usage_input, usage_cached_input, usage_output, actual_musd, estimated,"
            " stopped FROM budget_holds"
        ).fetchall()
    assert row == ("settled", 57, 8, 33, 49 * 10 + 8 * 1 + 33 * 20, 0, 0)
    assert _global_day_settled(_db(env)) == 1158
