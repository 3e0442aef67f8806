"""Trial of issues 9/16 with new inputs: the one-process lock must catch the same
database file reached by another path (a symlink to it), through real
``python -m bot`` processes."""

from __future__ import annotations

from pathlib import Path

from tests.e2e.harness import BotFactory
from tests.fakes.telegram import FakeTelegram


async def test_second_process_through_a_symlink_to_the_same_file_exits_2(
    bot_factory: BotFactory,
    fake_telegram: FakeTelegram,
    bot_env: dict[str, str],
    tmp_path: Path,
) -> None:
    """``other/alias.db -> ../kopek.db`` names the running bot's file: refused, exit 2,
    one line naming the holder's PID; the first keeps running."""
    database = tmp_path / "kopek.db"
    first = bot_factory()
    await first.start()
    (tmp_path / "other").mkdir()
    alias = tmp_path / "other" / "alias.db"
    alias.symlink_to(database)
    env = dict(bot_env, DATABASE_URL=f"sqlite+aiosqlite:///{alias}")
    second = bot_factory(env=env)
    await second.spawn()
    assert await second.wait_exit(60) == 2
    err = second.stderr()
    [line] = [x for x in err.splitlines() if x.startswith("kopek:")]
    assert "Traceback" not in err
    assert f"process {first.pid}" in line
    assert "Running upgrade" not in second.logs()
    assert not (tmp_path / "other" / "alias.db.lock").exists()
    assert first.running
    assert await first.stop() == 0
