"""Fixtures of the ledger tests: a real SQLite file (or PostgreSQL database) per test, a
manual clock, and a test price card with exact rates (``test:m`` costs 1 µUSD per input token and
1 µUSD per output token, so a ceiling equals input_tokens + max_tokens µUSD).

* ``pg_ledger_url`` — a new PostgreSQL database with the ledger tables
  (:func:`tests.budget.ledger_helpers.create_pg_schema`) for each test: a copy of a
  template database made once per worker (``pg_ledger_template``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import shutil
from collections.abc import AsyncIterator, Iterator
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.engine import make_url

from budget.ledger import Ledger
from budget.storage.base import LedgerStore
from budget.storage.postgres.store import PgStore
from budget.storage.sqlite.store import SqliteStore
from budget.storage.tables import create_schema
from tests.budget.ledger_helpers import (
    BACKENDS,
    BASE_CONFIG,
    LedgerFactory,
    card,
    create_pg_schema,
)
from tests.support.clocks import ManualClock
from tests.support.pg import PgServer


@pytest.fixture
def clock() -> ManualClock:
    """A manual clock at 2026-01-14 12:00 UTC."""
    return ManualClock(datetime(2026, 1, 14, 12, 0, tzinfo=UTC))


@pytest.fixture(scope="session")
def ledger_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A ledger database file with the schema, made once per worker for tests to copy:
    ``create_schema`` waits ~0.4 s for the disk (SQLite syncs its DDL commits), a copy
    of its file takes a millisecond and is the same fresh database."""
    path = tmp_path_factory.mktemp("ledger-template") / "ledger.db"
    create_schema(path)
    return path


@pytest.fixture(scope="session")
def pg_ledger_template(pg_server: PgServer) -> str:
    """Name of a PostgreSQL database with the ledger tables, made once per worker for tests
    to copy: measured on the 2-core machine, a new database plus ``create_pg_schema``
    (``create_all`` and one ``ALTER … TYPE BIGINT`` per integer column) costs ~0.17 s of
    CPU (the test process and the server together), a copy of this template ~0.02 s."""
    url = pg_server.create_database(prefix="ledger")
    # in a thread of its own: the first test to ask may be running in an event loop
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        pool.submit(asyncio.run, create_pg_schema(url)).result()
    name = make_url(url).database
    assert name is not None
    return name


@pytest.fixture
def pg_ledger_url(pg_server: PgServer, pg_ledger_template: str) -> Iterator[str]:
    """A new PostgreSQL database with the ledger tables and no rows, for this test."""
    url = pg_server.create_database(template=pg_ledger_template)
    yield url
    name = make_url(url).database
    assert name is not None
    pg_server.drop_database(name)


@pytest.fixture
def db_path(tmp_path: Path, ledger_template: Path) -> Path:
    """A fresh ledger database file (a copy of :func:`ledger_template`)."""
    path = tmp_path / "ledger.db"
    shutil.copyfile(ledger_template, path)
    return path


@pytest.fixture(params=BACKENDS)
async def make_ledger(
    request: pytest.FixtureRequest, db_path: Path, clock: ManualClock
) -> AsyncIterator[LedgerFactory]:
    """Build started ledgers on the same database (``**overrides`` go to LedgerConfig);
    all are closed at the end of the test. Parametrized over :data:`BACKENDS`."""
    made: list[Ledger] = []
    url = ""
    if request.param == "postgres":
        url = request.getfixturevalue("pg_ledger_url")

    async def factory(**overrides: Any) -> Ledger:
        cfg = replace(BASE_CONFIG, **overrides)
        store: LedgerStore
        if request.param == "postgres":
            store = PgStore(url, cfg, process_id=f"p{len(made)}", clock=clock, run_heartbeat=False)
        else:
            store = SqliteStore(db_path, cfg, process_id=f"p{len(made)}")
        ledger = Ledger(store, cfg, card(), clock)
        await ledger.start(run_sweeper=False)
        made.append(ledger)
        return ledger

    yield factory
    for ledger in made:
        await ledger.close()
