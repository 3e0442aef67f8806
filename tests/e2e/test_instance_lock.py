"""Issue 9 §4: one process per SQLite file, through two real ``python -m bot`` processes."""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path

from tests.e2e.harness import BotFactory, wait_provider_requests
from tests.fakes.providers import FakeProviders
from tests.fakes.telegram import FakeTelegram


def _held(database: Path) -> list[tuple[str, str]]:
    """(hold_id, state) of every hold, read straight from the file."""
    with contextlib.closing(sqlite3.connect(database)) as conn:
        rows = conn.execute("SELECT hold_id, state FROM budget_holds").fetchall()
    return [(str(h), str(s)) for h, s in rows]


async def test_second_process_on_the_same_file_exits_2_and_leaves_the_first_alone(
    bot_factory: BotFactory,
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
    bot_env: dict[str, str],
    tmp_path: Path,
) -> None:
    """A second bot on the database of a running one exits 2 with one line naming the
    file and the first's PID, before migrations and before sweeping holds: the first's
    in-flight hold stays held, its answer arrives and is settled normally."""
    database = tmp_path / "kopek.db"
    fake_providers.script("groq", {"text": "still mine", "delay_s": 20.0})
    first = bot_factory()
    await first.start()
    mark = fake_telegram.mark()
    fake_telegram.inject_message(71, "a slow question")
    await wait_provider_requests(fake_providers, 1)
    before = _held(database)
    assert [state for _, state in before] == ["held"]

    second = bot_factory()
    await second.spawn()
    assert await second.wait_exit(60) == 2
    err = second.stderr()
    [line] = [x for x in err.splitlines() if x.startswith("kopek:")]  # LOG_LEVEL is DEBUG here
    assert "Traceback" not in err
    assert str(database) in line
    assert f"process {first.pid}" in line
    assert "Running upgrade" not in second.logs()
    assert _held(database) == before  # nothing swept, nothing booked by the second

    assert first.running
    [answer] = await fake_telegram.wait_sent(71, since=mark, timeout=30)
    assert answer.text == "still mine"
    assert await first.stop() == 0
    assert [state for _, state in _held(database)] == ["settled"]


async def test_lock_is_released_when_the_holder_is_killed(
    bot_factory: BotFactory, fake_telegram: FakeTelegram
) -> None:
    """SIGKILL leaves no stale lock (the OS releases it): the next start succeeds."""
    first = bot_factory()
    await first.start()
    await first.kill()
    again = bot_factory()
    await again.start()
    assert await again.stop() == 0
