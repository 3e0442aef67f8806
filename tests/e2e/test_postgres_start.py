"""Starting on PostgreSQL: a refused login, an unreachable server and a schema
ahead of the code each end the start with one line, and the URL's password reaches no
output, also at ``LOG_LEVEL=DEBUG``.

The first two call :func:`bot.app.polling.run` in the test process with logging set up as
``python -m bot`` does (``bot.ops.logs.setup_logging`` at DEBUG onto the captured stderr);
only the third starts a process (exit code of ``python -m bot``, the excepthook, the
whole output of a process).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import asyncpg
import pytest
from sqlalchemy.engine import make_url

from bot.app.polling import run
from bot.ops.logs import setup_logging
from bot.storage.migrate import migrate
from tests.conftest import PG_PASSWORD
from tests.support.harness import run_bot_to_exit
from tests.support.inprocess import settings_from_env

_SECRETS = (PG_PASSWORD, quote(PG_PASSWORD, safe=""), "w0rd-4f9e1c")


@pytest.fixture
def root_logging(capsys: pytest.CaptureFixture[str]) -> Iterator[None]:
    """Put the root logger back after a test that called ``setup_logging`` (before
    ``capsys`` closes the stream its handler writes to)."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def _no_secret(output: str) -> None:
    for secret in _SECRETS:
        assert secret not in output, output


@pytest.mark.usefixtures("root_logging")
async def test_refused_login_and_unreachable_server_are_one_line_without_the_password(
    bot_env: dict[str, str], pg_password_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A wrong password: exit 2, one ``kopek:`` line naming host and database and the
    server's reason. A server that is not there (a closed port): exit 1, one line. At
    DEBUG, neither the password given nor the role's real one is in the output."""
    wrong = pg_password_url.replace(quote(PG_PASSWORD, safe=""), quote("x" + PG_PASSWORD, safe=""))
    url = make_url(pg_password_url)
    closed = pg_password_url.replace(f":{url.port}/", ":9/")
    cases = ((wrong, 2, "password authentication failed"), (closed, 1, "cannot reach"))
    for database_url, code, reason in cases:
        settings = settings_from_env(dict(bot_env, DATABASE_URL=database_url))
        setup_logging("DEBUG", settings.secret_values())
        assert await run(settings) == code
        output = capsys.readouterr()
        lines = [line for line in output.err.splitlines() if line.startswith("kopek:")]
        assert len(lines) == 1, output.err  # the rest are DEBUG log lines
        assert reason in lines[0]
        assert f"127.0.0.1:{url.port if code == 2 else 9}/{url.database}" in lines[0]
        assert "Traceback" not in output.err
        _no_secret(output.out + output.err)


async def test_a_schema_ahead_of_the_code_exits_2_with_one_line(
    bot_env: dict[str, str], pg_password_url: str, tmp_path: Path
) -> None:
    """``python -m bot`` on a PostgreSQL database a newer version migrated (an unknown
    revision in ``alembic_version``), logging in with a password, at DEBUG: exit 2 and
    one line saying so; the database is left as it was; the password is nowhere in the
    process's output."""
    await asyncio.to_thread(migrate, pg_password_url)  # the role owns the tables, as deployed
    dsn = pg_password_url.replace("postgresql+asyncpg://", "postgresql://")
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute("UPDATE alembic_version SET version_num = '9999_from_the_future'")
    finally:
        await conn.close()
    env = dict(bot_env, DATABASE_URL=pg_password_url, LOG_LEVEL="DEBUG")
    code, output = await run_bot_to_exit(env, tmp_path)
    lines = [line for line in output.splitlines() if line.startswith("kopek:")]
    assert code == 2, output
    assert len(lines) == 1 and "Traceback" not in output, output  # and DEBUG log lines
    assert "9999_from_the_future" in lines[0] and "does not have" in lines[0]
    _no_secret(output)
    conn = await asyncpg.connect(dsn)
    try:
        assert await conn.fetchval("SELECT version_num FROM alembic_version") == (
            "9999_from_the_future"
        )
    finally:
        await conn.close()
