"""Issue 9 §4 and its trial (issue 16): one process per SQLite file, through real
``python -m bot`` processes (a lock held by a process, refused exits, a SIGKILL).

One test, since every process start costs seconds: two refused starts (the same file,
and the same file through a symlink) run at once beside the holder, and the holder is
then SIGKILLed to show that no stale lock is left."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from pathlib import Path

from tests.e2e.harness import BotFactory, BotProcess, wait_provider_requests
from tests.fakes.providers import FakeProviders
from tests.fakes.telegram import FakeTelegram


def _held(database: Path) -> list[tuple[str, str]]:
    """(hold_id, state) of every hold, read straight from the file."""
    with contextlib.closing(sqlite3.connect(database)) as conn:
        rows = conn.execute("SELECT hold_id, state FROM budget_holds").fetchall()
    return [(str(h), str(s)) for h, s in rows]


async def _refused_line(bot: BotProcess) -> str:
    """Wait for ``bot`` to exit 2 and return its one ``kopek:`` line (no traceback, no
    migration ran: LOG_LEVEL is DEBUG here, so other lines may precede it)."""
    assert await bot.wait_exit(60) == 2
    err = bot.stderr()
    [line] = [x for x in err.splitlines() if x.startswith("kopek:")]
    assert "Traceback" not in err
    assert "Running upgrade" not in bot.logs()
    return line


async def test_second_process_exits_2_leaves_the_first_alone_and_a_kill_leaves_no_lock(
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
    lock file appears beside the alias. Then SIGKILL of the holder leaves no stale lock
    (the OS releases it): the next start succeeds."""
    database = tmp_path / "kopek.db"
    fake_providers.script("groq", {"text": "still mine", "gate": "slow"})
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

    await first.kill()
    again = bot_factory()
    await again.start()
    assert await again.stop() == 0
