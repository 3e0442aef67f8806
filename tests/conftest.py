"""Fixtures shared by every test package: a real PostgreSQL server (``tests/support/pg.py``).

* ``pg_server`` — one :class:`tests.support.pg.PgServer` per pytest process (so one per xdist
  worker), started on first use on a free loopback port and a Unix socket
  (:meth:`tests.support.pg.PgServer.socket_url`) and stopped at the end of the
  session. It never skips: a server that cannot start fails the tests that need it.
* ``pg_url`` — a new empty database on that server for each test:
  ``postgresql+asyncpg://postgres@127.0.0.1:<port>/<name>``, dropped afterwards.
* ``pg_migrated_url`` — the same, with the whole Alembic chain applied (a copy of a
  template database migrated once per session: ~20 ms per test).
* ``pg_password_url`` — a new empty database owned by :data:`tests.support.pg.PASSWORD_ROLE`,
  whose login needs its password (:data:`PG_PASSWORD`, with characters that must be
  percent-encoded in the URL): ``postgresql+asyncpg://kopek_password:<encoded>@…``.
"""

from __future__ import annotations

import concurrent.futures
import os
import shlex
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url

from tests.support.pg import PgServer, start_server

#: The password of :data:`tests.support.pg.PASSWORD_ROLE` (``@`` and ``/`` must be encoded in a
#: URL).
PG_PASSWORD = "Kp@ss/w0rd-4f9e1c"


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    """A PostgreSQL server for this pytest process (see ``tests/support/pg.py``)."""
    server = start_server(unix_socket=True)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def pg_template(pg_server: PgServer) -> str:
    """Name of a database with every migration applied (``alembic upgrade head``)."""
    from bot.storage.migrate import migrate

    url = pg_server.create_database(prefix="template")
    # in a thread of its own: Alembic's env.py runs its own event loop, and the first
    # test to ask for the template may be running in one (an async fixture)
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        pool.submit(migrate, url).result()
    name = make_url(url).database
    assert name is not None
    return name


def _fresh(pg_server: PgServer, template: str | None) -> Iterator[str]:
    url = pg_server.create_database(template=template)
    yield url
    name = make_url(url).database
    assert name is not None
    pg_server.drop_database(name)


@pytest.fixture
def pg_url(pg_server: PgServer) -> Iterator[str]:
    """A new empty PostgreSQL database for this test (its SQLAlchemy asyncpg URL)."""
    yield from _fresh(pg_server, None)


@pytest.fixture
def pg_migrated_url(pg_server: PgServer, pg_template: str) -> Iterator[str]:
    """A new PostgreSQL database at the migrations' head for this test."""
    yield from _fresh(pg_server, pg_template)


@pytest.fixture
def pg_password_url(pg_server: PgServer) -> Iterator[str]:
    """A new empty database owned by the password role; its URL carries the password."""
    url = pg_server.create_password_database(PG_PASSWORD)
    yield url
    name = make_url(url).database
    assert name is not None
    pg_server.drop_database(name)


#: Set (to anything) to start pytest-xdist's workers as fresh interpreters.
FRESH_WORKERS_ENV = "KOPEK_TEST_FRESH_WORKERS"


def pytest_configure(config: pytest.Config) -> None:
    """An xdist controller (``-n N``) starts one bot fork server for all its workers
    (``tests/support/forked.py``): its imports cost ~5 s of CPU once instead of once a
    worker. The workers themselves are forked from it too
    (``tests/support/worker_launcher.py``): each skips ~5 s of CPU importing aiogram."""
    if getattr(config.option, "numprocesses", None) and not hasattr(config, "workerinput"):
        from tests.support.forked import start_shared_server

        config.add_cleanup(start_shared_server().close)
        if not os.environ.get(FRESH_WORKERS_ENV):
            launcher = Path(__file__).parent / "support" / "worker_launcher.py"
            forked = f"popen//python={shlex.join([sys.executable, '-I', '-S', str(launcher)])}"
            config.option.tx = [forked if tx == "popen" else tx for tx in config.option.tx]
