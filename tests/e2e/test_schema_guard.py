"""A schema that is not this code's: refused at start on both engines, also
when another process migrated it past this code after this one's migrations ran; and
noticed, once, while the bot runs (``bot.ops.schema_watch``).

In process: :func:`bot.app.polling.run` returns before aiogram's import when the migration
refuses, and the start-up hook refuses before anything reaches Telegram; the process's
own output for the PostgreSQL case is ``test_postgres_start``'s.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import text

from bot.app.polling import _poll, run
from bot.ops.schema_watch import SchemaWatch
from bot.storage.migrate import migrate
from budget.kernel.db import create_engine
from budget.kernel.schema import SchemaMismatch, head_revision
from tests.support.clocks import VirtualClock
from tests.support.inprocess import settings_from_env
from tests.support.telegram import FakeTelegram

FUTURE = "9999_from_a_newer_kopek"


@pytest.fixture(params=["sqlite", "postgresql"])
def env(request: pytest.FixtureRequest, bot_env: dict[str, str]) -> dict[str, str]:
    """The bot's environment on each engine (PostgreSQL: a new empty database)."""
    if request.param == "sqlite":
        return bot_env
    url: str = request.getfixturevalue("pg_url")
    return dict(bot_env, DATABASE_URL=url)


async def _set_version(url: str, version: str) -> None:
    engine = create_engine(url)
    try:
        async with engine.begin() as conn:
            await conn.execute(text("UPDATE alembic_version SET version_num = :v"), {"v": version})
    finally:
        await engine.dispose()


async def _version(url: str) -> str:
    engine = create_engine(url)
    try:
        async with engine.connect() as conn:
            found = (await conn.execute(text("SELECT version_num FROM alembic_version"))).scalar()
    finally:
        await engine.dispose()
    assert isinstance(found, str)
    return found


def _kopek_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("kopek:")]


async def test_a_schema_ahead_of_the_code_is_refused_at_start_untouched(
    env: dict[str, str], capsys: pytest.CaptureFixture[str], fake_telegram: FakeTelegram
) -> None:
    """A database a newer version migrated: ``run`` returns 2 with one line naming both
    revisions; the database keeps that revision; nothing reached Telegram."""
    settings = settings_from_env(env)
    await asyncio.to_thread(migrate, settings.database_url)
    await _set_version(settings.database_url, FUTURE)
    assert await run(settings) == 2
    [line] = _kopek_lines(capsys.readouterr().err)
    assert FUTURE in line and head_revision() in line and "does not have" in line
    assert await _version(settings.database_url) == FUTURE
    assert fake_telegram.requests() == []


async def test_a_schema_migrated_past_the_code_after_its_migrations_ends_the_start(
    env: dict[str, str], capsys: pytest.CaptureFixture[str], fake_telegram: FakeTelegram
) -> None:
    """This process migrated to its head; before its start-up hook ran, a newer version
    beside it migrated further: the start ends with exit 2 and one line, before any
    Bot API call or ledger start (no process registered)."""
    settings = settings_from_env(env)
    await asyncio.to_thread(migrate, settings.database_url)
    await _set_version(settings.database_url, FUTURE)
    assert await _poll(settings) == 2
    [line] = _kopek_lines(capsys.readouterr().err)
    assert FUTURE in line and "does not have" in line
    assert fake_telegram.requests() == []


class Counted(SchemaWatch):
    """The watch, telling when a check has finished (its loop logs right after)."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.checked = asyncio.Event()

    async def check(self) -> SchemaMismatch | None:
        try:
            return await super().check()
        finally:
            self.checked.set()


@pytest.fixture
def watch_logs(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    caplog.set_level(logging.WARNING, logger="bot.ops.schema_watch")
    yield caplog


async def test_a_running_process_notices_once_that_the_schema_moved(
    env: dict[str, str], watch_logs: pytest.LogCaptureFixture
) -> None:
    """While running, the watch reads the revision every interval (injected clock): at
    head, nothing; migrated past this code, one WARNING naming both revisions and the
    mismatch kept (``problem.ahead``); the same state again, no second line; back at
    head, the problem clears."""
    url = settings_from_env(env).database_url
    await asyncio.to_thread(migrate, url)
    engine = create_engine(url)
    clock = VirtualClock(datetime(2026, 3, 2, tzinfo=UTC))
    watch = Counted(engine, clock, interval_s=60)

    async def after_check() -> None:
        """One interval passes; returns once the watch has checked (and logged)."""
        watch.checked.clear()
        clock.advance(60)
        await asyncio.wait_for(watch.checked.wait(), 30)

    try:
        assert await watch.check() is None
        watch.start()
        await asyncio.sleep(0)  # the watch's task starts and sleeps its first interval
        await after_check()
        assert watch.problem is None and watch_logs.records == []
        await _set_version(url, FUTURE)
        await after_check()
        assert watch.problem is not None and watch.problem.ahead
        [record] = watch_logs.records
        assert FUTURE in record.getMessage() and head_revision() in record.getMessage()
        await after_check()
        assert len(watch_logs.records) == 1
        await _set_version(url, head_revision())
        await after_check()
        assert watch.problem is None
    finally:
        await watch.stop()
        await engine.dispose()


def test_schema_watch_repr_names_its_head(tmp_path: Path) -> None:
    """The watch shows its head and whether it saw a problem."""
    engine = create_engine(f"sqlite+aiosqlite:///{tmp_path / 'x.db'}")
    watch = SchemaWatch(engine, VirtualClock(datetime(2026, 3, 2, tzinfo=UTC)))
    assert repr(watch) == f"SchemaWatch(head={head_revision()!r}, problem=False)"
