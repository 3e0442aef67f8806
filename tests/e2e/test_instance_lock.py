"""One process per SQLite file, through real
``python -m bot`` processes (a lock held by a process, refused exits, a SIGKILL).

One test, since every process start costs seconds: two refused starts (the same file,
and the same file through a symlink) run at once beside the holder, and the holder is
then SIGKILLed with two calls in flight to show that no stale lock is left and that the
next start asks those users to resend (a crash mid-call) without repeating the
calls."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from pathlib import Path

from tests.support.groups import BOT, mention
from tests.support.harness import READY_TIMEOUT_S, BotFactory, BotProcess, wait_provider_requests
from tests.support.providers import FakeProviders
from tests.support.telegram import FakeTelegram


def _held(database: Path) -> list[tuple[str, str]]:
    """(hold_id, state) of every hold, read straight from the file."""
    with contextlib.closing(sqlite3.connect(database)) as conn:
        rows = conn.execute("SELECT hold_id, state FROM budget_holds").fetchall()
    return [(str(h), str(s)) for h, s in rows]


async def _refused_line(bot: BotProcess) -> str:
    """Wait for ``bot`` to exit 2 and return its one ``kopek:`` line (no traceback, no
    migration ran: LOG_LEVEL is DEBUG here, so other lines may precede it)."""
    assert await bot.wait_exit(READY_TIMEOUT_S) == 2
    err = bot.stderr()
    [line] = [x for x in err.splitlines() if x.startswith("kopek:")]
    assert "Traceback" not in err
    assert "Running upgrade" not in bot.logs()
    return line


async def test_second_process_exits_2_and_a_kill_mid_call_leaves_no_lock_and_asks_to_resend(
    bot_factory: BotFactory,
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
    bot_env: dict[str, str],
    tmp_path: Path,
) -> None:
    """A second bot on the database of a running one — by its path, or by a symlink
    ``other/alias.db -> ../kopek.db`` — exits 2 with one line naming the first's PID
    (and the file, for the same path), before migrations and before sweeping holds: the
    first's in-flight hold stays held, its answer arrives and is settled normally, no
    lock file appears beside the alias. Then SIGKILL of the holder while two calls are in
    flight (a private chat, and a mention in topic 7 of a forum) leaves no stale lock (the
    OS releases it): the next start succeeds, each of the two gets the resend template —
    the forum's in topic 7 — and no LLM call is repeated."""
    database = tmp_path / "kopek.db"
    fake_providers.script(
        "groq",
        {"text": "still mine", "gate": "slow"},
        {"text": "too late", "delay_s": 30},
        {"text": "never", "delay_s": 30},
    )
    first = bot_factory()
    await first.start()
    mark = fake_telegram.mark()
    fake_telegram.inject_message(71, "a slow question")
    await wait_provider_requests(fake_providers, 1)
    before = _held(database)
    assert [state for _, state in before] == ["held"]

    (tmp_path / "other").mkdir()
    alias = tmp_path / "other" / "alias.db"
    alias.symlink_to(database)
    second = bot_factory()
    by_alias = bot_factory(env=dict(bot_env, DATABASE_URL=f"sqlite+aiosqlite:///{alias}"))
    await asyncio.gather(second.spawn(), by_alias.spawn())
    line, alias_line = await asyncio.gather(_refused_line(second), _refused_line(by_alias))
    assert str(database) in line
    assert f"process {first.pid}" in line
    assert f"process {first.pid}" in alias_line
    assert not (tmp_path / "other" / "alias.db.lock").exists()
    assert _held(database) == before  # nothing swept, nothing booked by the others

    assert first.running
    fake_providers.open_gate("slow")
    [answer] = await fake_telegram.wait_sent(71, since=mark, timeout=30)
    assert answer.text == "still mine"
    async with asyncio.timeout(30):  # settled by the first
        while [state for _, state in _held(database)] != ["settled"]:  # noqa: ASYNC110 - another process writes it
            await asyncio.sleep(0.05)
    assert first.running

    forum, question = -1007000, f"@{BOT} long question"
    fake_telegram.inject_message(31, "a question before the crash")
    await wait_provider_requests(fake_providers, 2)
    fake_telegram.inject_message(
        30, question, chat_id=forum, chat_type="supergroup", thread_id=7,
        entities=mention(f"@{BOT}"),
    )  # fmt: skip
    await wait_provider_requests(fake_providers, 3)
    await first.kill()
    again = bot_factory()
    mark = fake_telegram.mark()
    await again.start()
    [notice] = await fake_telegram.wait_sent(31, since=mark, timeout=20)
    assert "while answering this message" in notice.text
    [topic_notice] = await fake_telegram.wait_sent(forum, since=mark, timeout=20)
    assert "while answering this message" in topic_notice.text
    assert topic_notice.message_thread_id == 7
    assert len(fake_providers.requests) == 3
    assert await again.stop() == 0
