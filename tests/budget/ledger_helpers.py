"""Shared pieces of the ledger tests (imported as ``tests.budget.ledger_helpers``):
the base ledger config and a test price card with exact rates (``test:m`` costs
1 µUSD per input token and 1 µUSD per output token, so a ceiling equals
input_tokens + max_tokens µUSD)."""

from __future__ import annotations

import importlib.util
import sqlite3
from collections.abc import Awaitable, Callable
from decimal import Decimal
from pathlib import Path

from budget.config import LedgerConfig
from budget.kernel.schema import head_revision
from budget.ledger import Ledger
from budget.pricing.prices import ModelRates, PriceCard, ProviderModel
from budget.storage.tables import metadata

__all__ = [
    "BACKENDS",
    "BASE_CONFIG",
    "LedgerFactory",
    "card",
    "create_pg_schema",
    "stamp_head",
]

#: Backends the contract suite runs against: the SQLite file, and a real PostgreSQL
#: server (``tests/support/pg.py``, a fresh database per test).
BACKENDS = ["sqlite", "postgres"]

BASE_CONFIG = LedgerConfig(
    tz="UTC",
    user_max_inflight=1000,
    user_max_per_minute=100_000,
    auto_kill_fraction=Decimal(0),
    hold_ttl_s=300.0,
    max_call_s=60.0,
    # the contract's bursts (1,000 holds at once in one process, on 8 pool connections,
    # on a loaded machine) measure exact counts, not the bot's deadlines: a queued step
    # waits (tests/e2e/test_pg_lock_waits.py tests the deadlines at their defaults)
    db_lock_timeout_s=120.0,
    db_pool_timeout_s=600.0,
)


def card() -> PriceCard:
    """``test:m`` paid at 1 µUSD/token in and out (cached 0.5), ``free:f`` free with
    list price, ``free:nolist`` free without one, ``cap:m`` paid like test:m."""
    one = ModelRates(Decimal(1), Decimal(1), Decimal("0.5"))
    return PriceCard(
        [
            ProviderModel("test", "m", "paid"),
            ProviderModel("cap", "m", "paid"),
            ProviderModel("free", "f", "free"),
            ProviderModel("free", "nolist", "free"),
        ],
        overrides={"test:m": one, "cap:m": one, "free:f": one},
        use_default_overrides=False,
    )


LedgerFactory = Callable[..., Awaitable[Ledger]]


#: The migration that creates the admission's functions (decision 318).
_ADMISSION_MIGRATION = (
    Path(__file__).resolve().parents[2] / "bot/migrations/versions/0056_admission_at_once.py"
)


def _admission_functions() -> tuple[str, ...]:
    """The ``CREATE FUNCTION`` statements of :data:`_ADMISSION_MIGRATION`, as it runs them."""
    spec = importlib.util.spec_from_file_location("admission_at_once", _ADMISSION_MIGRATION)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return (module._DIGEST, module._UNCHANGED)


async def create_pg_schema(url: str) -> None:
    """The ledger tables in the PostgreSQL database ``url`` (as ``create_schema``), every
    integer column 64-bit (user ids and µUSD need BIGINT on PostgreSQL, as the migrations
    make them), and the admission's functions (the migrations' own statements)."""
    from sqlalchemy import Integer, text
    from sqlalchemy.ext.asyncio import create_async_engine

    engine = create_async_engine(url)
    try:
        async with engine.begin() as conn:
            await conn.run_sync(metadata.create_all)
            for table in metadata.sorted_tables:
                for column in table.columns:
                    if isinstance(column.type, Integer):
                        await conn.execute(
                            text(f"ALTER TABLE {table.name} ALTER COLUMN {column.name} TYPE BIGINT")
                        )
            for function in _admission_functions():
                await conn.exec_driver_sql(function)
    finally:
        await engine.dispose()


def stamp_head(db: Path, revision: str | None = None) -> None:
    """Record ``revision`` (default: the code's head) in the SQLite file ``db``'s
    ``alembic_version``, as ``alembic stamp`` does: a file made by ``create_schema``
    then passes the schema check of ``python -m budget``."""
    with sqlite3.connect(db) as conn:
        conn.execute(
            "CREATE TABLE IF NOT EXISTS alembic_version "
            "(version_num VARCHAR(32) NOT NULL PRIMARY KEY)"
        )
        conn.execute("DELETE FROM alembic_version")
        conn.execute("INSERT INTO alembic_version VALUES (?)", (revision or head_revision(),))
