"""``python -m budget export`` and ``reconcile`` on a PostgreSQL ledger.

They refused every PostgreSQL DATABASE_URL with "no ledger database at …", a false
sentence: the books could not be exported from the command line on PostgreSQL. The
ledger here is written through ``Ledger.open`` on a PostgreSQL URL, as the bot writes it.
"""

from __future__ import annotations

import asyncio
import csv
import io
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import make_url

import budget.__main__ as budget_cli
from budget.books.export import EXPORT_COLUMNS
from budget.config import LedgerConfig
from budget.kernel.db import create_engine
from budget.ledger import Ledger
from budget.pricing.prices import PriceCard, ProviderModel
from budget.storage.tables import holds
from budget.types import Origin, Usage
from tests.conftest import PG_PASSWORD
from tests.support.clocks import ManualClock

KEY = "deepseek"
MODEL = "deepseek-chat"
CONFIG = LedgerConfig(
    tz="UTC", user_max_inflight=1000, user_max_per_minute=100_000, auto_kill_fraction=Decimal(0)
)


async def _book_two(url: str) -> int:
    """Two settled DeepSeek attempts on 2026-01-14 (UTC); returns their booked µUSD."""
    clock = ManualClock(datetime(2026, 1, 14, 21, 30, tzinfo=UTC))
    card = PriceCard([ProviderModel(KEY, MODEL, "paid")])
    ledger = Ledger.open(url, CONFIG, card, clock)
    await ledger.start(run_sweeper=False)
    try:
        for usage in (Usage(1200, 400, 300), Usage(2345, 0, 77)):
            op = await ledger.begin_operation(5, Origin.CHAT)
            req = await ledger.begin_request(op, f"fp{clock.now().timestamp()}")
            hold = await ledger.reserve(
                op, req, provider=KEY, model=MODEL, input_tokens=usage.input_tokens, max_tokens=4000
            )
            await ledger.settle(hold.hold_id, usage)
            await ledger.end_operation(op)
            clock.advance(600)
    finally:
        await ledger.close()
    engine = create_engine(url)
    try:
        async with engine.connect() as conn:
            total = await conn.scalar(sa.select(sa.func.sum(holds.c.actual_musd)))
    finally:
        await engine.dispose()
    return int(total or 0)


def _provider_file(rows: list[dict[str, str]], *, cached_as_input: bool = False) -> str:
    """The provider's daily usage export for the CLI's exported ``rows`` (optionally
    with the cached input tokens reported as plain input)."""
    cost = Decimal(sum(int(r["cost_musd"]) for r in rows)) / 1_000_000
    tokens = {c: sum(int(r[c]) for r in rows) for c in EXPORT_COLUMNS if c.endswith("_tokens")}
    cached = 0 if cached_as_input else tokens["cached_input_tokens"]
    return (
        "date,model,input_tokens,cached_input_tokens,output_tokens,cost_usd\n"
        f"2026-01-14,{MODEL},{tokens['input_tokens']},{cached},{tokens['output_tokens']},{cost}\n"
    )


async def test_export_and_reconcile_read_a_postgres_ledger(
    pg_migrated_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Export writes every attempt the ledger booked on PostgreSQL (count and µUSD equal
    to the ledger's own sum); reconcile exits 0 on the matching provider file and 1 when
    the provider reports the cached tokens as plain input."""
    total = await _book_two(pg_migrated_url)
    monkeypatch.setenv("DATABASE_URL", pg_migrated_url)
    out = tmp_path / "jan.csv"
    args = ["export", "--period", "2026-01-14", "--tz", "UTC", "--out", str(out)]
    assert await asyncio.to_thread(budget_cli.main, args) == 0
    rows = list(csv.DictReader(io.StringIO(out.read_text(encoding="utf-8"))))
    assert len(rows) == 2 and sum(int(r["cost_musd"]) for r in rows) == total > 0

    clean, stale = tmp_path / "clean.csv", tmp_path / "stale.csv"
    clean.write_text(_provider_file(rows), encoding="utf-8")
    stale.write_text(_provider_file(rows, cached_as_input=True), encoding="utf-8")
    for file, code in ((clean, 0), (stale, 1)):
        args = ["reconcile", str(file), "--provider", KEY]
        assert await asyncio.to_thread(budget_cli.main, args) == code


async def test_postgres_failures_are_one_true_line_without_the_password(
    pg_url: str,
    pg_password_url: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A database without the bot's tables, a refused login, a server that does not
    answer and a password not percent-encoded each give exit 2 and one line (naming
    host, port and database where it can) — never a password (neither the right one
    nor a wrong one, encoded or not)."""
    empty = make_url(pg_url)
    cases = [
        (pg_url, f"no ledger in the database postgresql://127.0.0.1:{empty.port}/{empty.database}"),
        (
            pg_password_url.replace(":Kp%40ss", ":wr0ng%40pw"),
            'password authentication failed for user "kopek_password"',
        ),
        (
            pg_password_url.replace(f":{empty.port}/", ":1/"),
            "cannot reach the ledger database postgresql://127.0.0.1:1/",
        ),
        ("postgresql+asyncpg://kopek:Kp@ss:w0rd@127.0.0.1:1/kopek", "percent-encode @ : /"),
    ]
    for url, needle in cases:
        monkeypatch.setenv("DATABASE_URL", url)
        assert await asyncio.to_thread(budget_cli.main, ["export"]) == 2
        captured = capsys.readouterr()
        lines = captured.err.strip().splitlines()
        assert len(lines) == 1 and needle in lines[0], lines
        for secret in (PG_PASSWORD, "Kp%40ss", "wr0ng", "ss/w0rd", "ss:w0rd"):
            assert secret not in captured.err + captured.out
