"""PostgreSQL through a Unix socket: ``DATABASE_URL=postgresql+asyncpg://user@/kopek?host=/folder``,
the form for a server on the same machine (peer authentication) and for managed-database
socket proxies. It was refused at start ("a PostgreSQL URL names a host and a database");
here the bot, ``python -m budget`` and the start-failure line all take it, against the
suite's own server listening on a socket folder (``tests/support/pg.py``).
"""

from __future__ import annotations

import asyncio
import csv
import io
import logging
from collections.abc import Iterator
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import asyncpg
import pytest
from sqlalchemy.engine import make_url

import budget.__main__ as budget_cli
from bot.app.polling import run
from bot.ops.logs import setup_logging
from budget.config import LedgerConfig
from budget.ledger import Ledger
from budget.pricing.prices import PriceCard, ProviderModel
from budget.types import Origin, Usage
from tests.support.clocks import ManualClock
from tests.support.inprocess import AppFactory, settings_from_env
from tests.support.pg import PgServer
from tests.support.providers import FakeProviders
from tests.support.telegram import FakeTelegram

MODEL = "deepseek-chat"
CONFIG = LedgerConfig(tz="UTC", auto_kill_fraction=Decimal(0))


@pytest.fixture
def socket_url(pg_server: PgServer, pg_url: str) -> str:
    """``pg_url``'s database through the server's Unix socket."""
    database = make_url(pg_url).database
    assert database is not None
    return pg_server.socket_url(database)


@pytest.fixture
def root_logging() -> Iterator[None]:
    """Put the root logger back after a test that called ``setup_logging``."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


async def test_the_bot_answers_and_books_through_a_unix_socket(
    app_factory: AppFactory,
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
    bot_env: dict[str, str],
    pg_url: str,
    socket_url: str,
) -> None:
    """On an empty database named by a socket URL the bot migrates, answers a message
    and settles its hold; every one of its connections to that database is a socket
    one (no client address), none went over TCP."""
    fake_providers.script("groq", {"text": "over the socket"})
    bot = app_factory(env=dict(bot_env, DATABASE_URL=socket_url))
    await bot.start()
    mark = fake_telegram.mark()
    fake_telegram.inject_message(41, "hello")
    [reply] = await fake_telegram.wait_sent(41, since=mark, timeout=30)
    assert reply.text == "over the socket"
    database = make_url(pg_url).database
    conn = await asyncpg.connect(pg_url.replace("postgresql+asyncpg://", "postgresql://"))
    try:
        sessions = await conn.fetch(
            "SELECT client_addr IS NULL AS local FROM pg_stat_activity"
            " WHERE datname = $1 AND pid <> pg_backend_pid() AND backend_type = 'client backend'",
            database,
        )
        assert sessions and all(s["local"] for s in sessions), sessions
        assert await conn.fetchval("SELECT count(*) FROM budget_processes") == 1
        states = await conn.fetch("SELECT state FROM budget_holds")
        assert [s["state"] for s in states] == ["settled"]
    finally:
        await conn.close()
    assert await bot.stop() == 0


async def test_the_ledger_and_python_m_budget_work_through_a_unix_socket(
    pg_server: PgServer, pg_migrated_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The PostgreSQL ledger opened on a socket URL books a settled attempt (its
    location names the folder, not the user), and ``python -m budget export`` reads it
    back through the same URL (it refused it: "names no host or no database")."""
    database = make_url(pg_migrated_url).database
    assert database is not None
    url = pg_server.socket_url(database)
    clock = ManualClock(datetime(2026, 1, 14, 12, 0, tzinfo=UTC))
    ledger = Ledger.open(url, CONFIG, PriceCard([ProviderModel("deepseek", MODEL, "paid")]), clock)
    await ledger.start(run_sweeper=False)
    try:
        assert (
            ledger.store.location
            == f"postgresql:///{database}?host={pg_server.socket_dir}&port={pg_server.port}"
        )
        op = await ledger.begin_operation(5, Origin.CHAT)
        req = await ledger.begin_request(op, "fp")
        hold = await ledger.reserve(
            op, req, provider="deepseek", model=MODEL, input_tokens=1200, max_tokens=400
        )
        await ledger.settle(hold.hold_id, Usage(1200, 0, 300))
        await ledger.end_operation(op)
    finally:
        await ledger.close()
    monkeypatch.setenv("DATABASE_URL", url)
    out = tmp_path / "books.csv"
    args = ["export", "--period", "2026-01-14", "--tz", "UTC", "--out", str(out)]
    assert await asyncio.to_thread(budget_cli.main, args) == 0
    rows = list(csv.DictReader(io.StringIO(out.read_text(encoding="utf-8"))))
    assert [r["hold_id"] for r in rows] == [hold.hold_id]
    assert int(rows[0]["cost_musd"]) > 0


@pytest.mark.usefixtures("root_logging")
async def test_a_socket_folder_without_a_server_is_one_line_naming_it(
    bot_env: dict[str, str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No server behind the socket folder: the bot exits 1 with one line naming the
    folder and the database, never the password; ``python -m budget`` says the same."""
    folder = tmp_path / "no-server"
    folder.mkdir()
    url = f"postgresql+asyncpg://kopek:s3cret-sock@/kopek?host={folder}&port=5999"
    monkeypatch.setenv("DATABASE_URL", url)
    assert await asyncio.to_thread(budget_cli.main, ["export"]) == 2
    output = capsys.readouterr()
    [line] = output.err.strip().splitlines()
    assert f"cannot reach the ledger database postgresql:///kopek?host={folder}&port=5999" in line
    assert "s3cret-sock" not in output.out + output.err
    settings = settings_from_env(dict(bot_env, DATABASE_URL=url))
    setup_logging("DEBUG", settings.secret_values())
    assert await run(settings) == 1
    output = capsys.readouterr()
    lines = [line for line in output.err.splitlines() if line.startswith("kopek:")]
    assert len(lines) == 1, output.err
    assert f"cannot reach the database postgresql:///kopek?host={folder}&port=5999" in lines[0]
    assert "s3cret-sock" not in output.out + output.err
