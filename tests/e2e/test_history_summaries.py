"""History summaries, through the bot built by create_app and the provider fakes: a long
conversation folds its oldest turns into a running summary — one charged summary call
per fold, booked with ``origin=summary`` in the message's own operation — later prompts
carry the summary and the recent turns, /reset clears it, topics keep their own, and a
summary that cannot be afforded leaves the old cut-oldest-first history with the answer
still delivered and nothing charged for it."""

from __future__ import annotations

import itertools
import sqlite3
from pathlib import Path
from typing import Any

from bot.chat.folding import SUMMARISER_PROMPT, SUMMARY_PREFIX
from tests.support.groups import BOT, mention
from tests.support.inprocess import AppFactory
from tests.support.providers import FakeProviders, RecordedRequest
from tests.support.telegram import FakeTelegram, SentMessage

USER = 601
FORUM = -100888
#: many messages a minute, as a long conversation in a test sends them
FAST = {"USER_MAX_PER_MINUTE": "1000", "USER_MAX_UPDATES_PER_MINUTE": "1000"}


def _is_summary(request: RecordedRequest) -> bool:
    messages = request.body["messages"]
    return bool(messages) and messages[0]["content"] == SUMMARISER_PROMPT


def _prompt(request: RecordedRequest) -> str:
    return "\n".join(str(m["content"]) for m in request.body["messages"])


async def _say(
    tg: FakeTelegram,
    providers: FakeProviders,
    text: str,
    *,
    chat_id: int = USER,
    thread_id: int | None = None,
) -> tuple[SentMessage, list[RecordedRequest]]:
    """``USER`` says ``text``; the reply and the provider requests made for it."""
    before = len(providers.requests)
    mark = tg.mark()
    if chat_id == USER:
        tg.inject_message(USER, text)
    else:
        tg.inject_message(
            USER, f"@{BOT} {text}", chat_id=chat_id, chat_type="supergroup",
            entities=mention(f"@{BOT}"), thread_id=thread_id, is_forum=True,
        )  # fmt: skip
    [reply] = await tg.wait_sent(chat_id, since=mark, timeout=20)
    return reply, providers.requests[before:]


def _holds(db: Path) -> list[dict[str, Any]]:
    with sqlite3.connect(db) as conn:
        conn.row_factory = sqlite3.Row
        rows = conn.execute(
            "SELECT operation_id, origin, state, model, actual_musd FROM budget_holds"
            " ORDER BY granted_at"
        ).fetchall()
    return [dict(r) for r in rows]


def _db(env: dict[str, str]) -> Path:
    return Path(env["DATABASE_URL"].split("///", 1)[1])


async def test_thirty_turns_fold_once_per_fold_charged_and_reset_clears_it(
    app_factory: AppFactory,
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
    bot_env: dict[str, str],
) -> None:
    """30 messages under a 240-token history: every summary call is its own held and
    settled hold (origin ``summary``) in the operation of the message that needed it,
    no two messages in a row fold, later prompts carry the summary and the newest
    turns, and /reset clears the summary with the turns."""
    bot_env.update({"CHAT_HISTORY_MAX_TOKENS": "240", "CHAT_SUMMARY_MAX_TOKENS": "40", **FAST})
    bot = app_factory()
    await bot.start()
    folded_at: list[int] = []
    last: list[RecordedRequest] = []
    for n in range(30):
        reply, requests = await _say(
            fake_telegram, fake_providers, f"note {n}: my locker code is {1000 + n}"
        )
        assert reply.text.startswith("echo: note"), reply.text
        summaries = [r for r in requests if _is_summary(r)]
        assert len(summaries) <= 1 and len(requests) == len(summaries) + 1
        if summaries:
            folded_at.append(n)
            assert "Conversation to add:" in _prompt(summaries[0])
        last = [r for r in requests if not _is_summary(r)]
    assert len(folded_at) >= 3, folded_at
    assert all(b - a >= 2 for a, b in itertools.pairwise(folded_at)), folded_at

    [answer] = last
    prompt = _prompt(answer)
    assert SUMMARY_PREFIX in prompt, "the summary is sent in later prompts"
    assert answer.body["messages"][1]["content"].startswith(SUMMARY_PREFIX)
    assert "note 28" in prompt and prompt.endswith("note 29: my locker code is 1029")
    assert "note 0:" not in prompt.split(SUMMARY_PREFIX, 1)[1].split("\n", 1)[-1]

    holds = _holds(_db(bot_env))
    summary_holds = [h for h in holds if h["origin"] == "summary"]
    assert len(summary_holds) == len(folded_at)
    assert all(h["state"] == "settled" for h in summary_holds)
    chat_ops = {h["operation_id"] for h in holds if h["origin"] == "chat"}
    assert {h["operation_id"] for h in summary_holds} <= chat_ops, "a step of the message"
    assert {h["model"] for h in summary_holds} == {"llama-3.1-8b-instant"}, "the small model"

    mark = fake_telegram.mark()
    fake_telegram.inject_message(USER, "/history")
    [told] = await fake_telegram.wait_sent(USER, since=mark, timeout=20)
    assert "older turns here are summarised" in told.text

    mark = fake_telegram.mark()
    fake_telegram.inject_message(USER, "/reset")
    await fake_telegram.wait_sent(USER, since=mark, timeout=20)
    _, requests = await _say(fake_telegram, fake_providers, "fresh start")
    [fresh] = requests
    assert SUMMARY_PREFIX not in _prompt(fresh) and "locker" not in _prompt(fresh)
    with sqlite3.connect(_db(bot_env)) as conn:
        assert conn.execute("SELECT COUNT(*) FROM chat_summaries").fetchone() == (0,)
    mark = fake_telegram.mark()
    fake_telegram.inject_message(USER, "/history")
    [told] = await fake_telegram.wait_sent(USER, since=mark, timeout=20)
    assert "Nothing of your conversation here is summarised" in told.text
    assert await bot.stop() == 0


async def test_two_topics_keep_their_own_summaries(
    app_factory: AppFactory,
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
    bot_env: dict[str, str],
) -> None:
    """Two forum topics of one group fold separately: topic 12's summary and prompt
    never carry topic 11's turns."""
    bot_env.update({"CHAT_HISTORY_MAX_TOKENS": "160", "CHAT_SUMMARY_MAX_TOKENS": "32", **FAST})
    bot = app_factory()
    await bot.start()
    for n in range(8):
        await _say(fake_telegram, fake_providers, f"alpha {n}", chat_id=FORUM, thread_id=11)
        await _say(fake_telegram, fake_providers, f"beta {n}", chat_id=FORUM, thread_id=12)
    _, requests = await _say(fake_telegram, fake_providers, "beta end", chat_id=FORUM, thread_id=12)
    prompt = "\n".join(_prompt(r) for r in requests)
    assert "alpha" not in prompt
    with sqlite3.connect(_db(bot_env)) as conn:
        rows = conn.execute(
            "SELECT thread_id, content FROM chat_summaries WHERE chat_id = ? ORDER BY thread_id",
            (FORUM,),
        ).fetchall()
    assert [r[0] for r in rows] == [11, 12]
    assert "alpha" in rows[0][1] and "beta" not in rows[0][1]
    assert "beta" in rows[1][1] and "alpha" not in rows[1][1]
    assert await bot.stop() == 0


async def test_a_summary_nobody_can_afford_cuts_and_the_answer_still_goes_out(
    app_factory: AppFactory,
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
    bot_env: dict[str, str],
) -> None:
    """Every free provider answers the summary with a 429 and the paid anchor's hold for
    it is over the user's daily limit: the older turns are cut (the answer's prompt has
    no summary and not the oldest turn), the answer still goes out (the paid anchor,
    shrunk to fit), with a note naming the limit; nothing is charged for the summary."""
    long = " ".join(["word"] * 40)
    warm = app_factory(env={**bot_env, "CHAT_HISTORY_MAX_TOKENS": "5000"})
    await warm.start()
    for n in range(6):
        await _say(fake_telegram, fake_providers, f"story {n}: {long}")
    assert await warm.stop() == 0

    fake_providers.script("groq", {"status": 429}, {"status": 429})
    fake_providers.script("mistral", {"status": 429})
    fake_providers.script("cerebras", {"status": 429})
    env = {
        **bot_env,
        "CHAT_HISTORY_MAX_TOKENS": "600",
        "CHAT_SUMMARY_MAX_TOKENS": "40",
        # room for the answer shrunk to fit (16 tokens of output, the last turns), not for
        # the summary's folded turns: its ceiling is ~2-3 times the answer's smallest
        "BUDGET_USER_DAILY_USD": "0.0003",
        "DEGRADED_MIN_OUTPUT_TOKENS": "16",
    }
    bot = app_factory(env=env)
    await bot.start()
    reply, requests = await _say(fake_telegram, fake_providers, "what was story 5 about?")
    summary_calls = [r for r in requests if _is_summary(r)]
    assert {r.provider for r in summary_calls} <= {"groq", "mistral", "cerebras"}
    answers = [r for r in requests if not _is_summary(r)]
    assert [r.provider for r in answers] == ["deepseek"]
    prompt = _prompt(answers[0])
    assert SUMMARY_PREFIX not in prompt and "story 0" not in prompt
    assert reply.text.startswith("echo: what was story 5 about?")
    assert "not summarised" in reply.text and "daily user limit" in reply.text

    holds = _holds(_db(bot_env))
    assert sum(h["actual_musd"] or 0 for h in holds if h["origin"] == "summary") == 0
    assert not [h for h in holds if h["origin"] == "summary" and h["state"] == "settled"]
    assert await bot.stop() == 0
