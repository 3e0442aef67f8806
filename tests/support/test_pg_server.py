"""The test suite's own PostgreSQL server (``tests/support/pg.py``, fixtures in
``tests/conftest.py``)."""

from __future__ import annotations

import os
from pathlib import Path

import asyncpg
from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import create_async_engine

from tests.support.pg import PgServer, PgStartError, _start_problem


async def test_a_test_database_is_empty_and_takes_sql(pg_url: str) -> None:
    """The URL names a fresh database on loopback, reachable through SQLAlchemy's asyncpg
    driver, with no table in it; a written row reads back."""
    url = make_url(pg_url)
    assert url.drivername == "postgresql+asyncpg"
    assert url.host == "127.0.0.1"
    engine = create_async_engine(pg_url)
    try:
        async with engine.begin() as conn:
            tables = (
                await conn.execute(
                    text("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'")
                )
            ).scalar_one()
            assert tables == 0
            await conn.execute(text("CREATE TABLE t (musd BIGINT NOT NULL)"))
            await conn.execute(text("INSERT INTO t VALUES (9007199254740993)"))
        async with engine.connect() as conn:
            got = (await conn.execute(text("SELECT musd FROM t"))).scalar_one()
            version = (await conn.execute(text("SHOW server_version"))).scalar_one()
    finally:
        await engine.dispose()
    assert got == 9007199254740993  # BIGINT, exactly
    assert str(version).startswith("18.")


async def test_each_test_gets_its_own_database(pg_server: PgServer, pg_url: str) -> None:
    """Two databases from the fixture's factory are distinct and do not share tables."""
    other = await pg_server.acreate_database()
    try:
        assert other != pg_url
        a = await asyncpg.connect(pg_url.replace("+asyncpg", ""))
        b = await asyncpg.connect(other.replace("+asyncpg", ""))
        try:
            await a.execute("CREATE TABLE only_in_a (x int)")
            assert await b.fetchval("SELECT to_regclass('only_in_a')") is None
            assert await a.fetchval("SELECT current_database()") != await b.fetchval(
                "SELECT current_database()"
            )
        finally:
            await a.close()
            await b.close()
    finally:
        name = make_url(other).database
        assert name is not None
        await pg_server.adrop_database(name)


async def test_a_migrated_database_is_at_head(pg_migrated_url: str) -> None:
    """The migrated copy has Alembic's version row at the chain's head and the tables."""
    from alembic.script import ScriptDirectory

    from budget.kernel.schema import alembic_config

    head = ScriptDirectory.from_config(alembic_config(pg_migrated_url)).get_current_head()
    conn = await asyncpg.connect(pg_migrated_url.replace("+asyncpg", ""))
    try:
        version = await conn.fetchval("SELECT version_num FROM alembic_version")
        holds = await conn.fetchval("SELECT count(*) FROM budget_holds")
    finally:
        await conn.close()
    assert version == head
    assert holds == 0


def test_the_server_runs_unprivileged_on_loopback_only(pg_server: PgServer) -> None:
    """The server process is alive, listens on 127.0.0.1 only, and runs as root never
    (PostgreSQL refuses root; as root the suite starts it as an unprivileged user)."""
    assert pg_server.process.poll() is None
    status = Path(f"/proc/{pg_server.process.pid}/status").read_text()
    uid = int(next(line for line in status.splitlines() if line.startswith("Uid:")).split()[1])
    assert uid != 0
    if os.geteuid() != 0:
        assert uid == os.geteuid()
    # the whole log: the listen lines come first, and the session's server has logged
    # checkpoints and connections since (a tail missed them once other tests had run)
    conf = pg_server.log_path.read_text(errors="replace")
    assert 'listening on IPv4 address "127.0.0.1"' in conf
    # a Unix socket only in the server's own folder (the socket-URL tests use it)
    sockets = [line for line in conf.splitlines() if "listening on Unix socket" in line]
    for line in sockets:
        assert pg_server.socket_dir is not None and str(pg_server.socket_dir) in line, line


def test_a_server_already_running_or_a_taken_port_is_one_line(tmp_path: Path) -> None:
    """``make run-postgres`` while a server runs on the data folder, or on a taken port,
    printed a traceback and 40 lines of server log; the cause is one line."""
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "postmaster.pid").write_text("2474\n/x/data\n")
    locked = PgStartError(
        "PostgreSQL did not start (log below)\n"
        'FATAL:  lock file "postmaster.pid" already exists\n'
        "HINT:  Is another postmaster (PID 2474) running in data directory?"
    )
    assert _start_problem(locked, tmp_path, 5433) == (
        f"a PostgreSQL server already runs on {tmp_path} (PID 2474): stop it first"
    )
    taken = PgStartError("PostgreSQL did not start (log below)\nLOG: could not bind IPv4 address")
    assert _start_problem(taken, tmp_path, 5433).startswith("port 5433 on 127.0.0.1 is taken")
    other = _start_problem(PgStartError("initdb failed (1): x"), tmp_path, 5433)
    assert other == f"initdb failed (1): x; the server log: {tmp_path / 'postgres.log'}"
