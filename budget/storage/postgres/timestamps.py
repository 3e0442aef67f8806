"""The PostgreSQL ledger's one time conversion: ``timestamptz`` ⇄ epoch seconds.

The ledger keeps its times as epoch seconds (UTC, a ``float`` read from the injected
clock: ``now.timestamp()``) in Python and in the SQL it shares with SQLite
(:mod:`budget.storage.sql.statements`, the ``budget.sqlite_*`` row modules run through
:class:`budget.storage.postgres.rows.PgCursor`). On PostgreSQL its time columns are ``timestamptz``
(migration ``0022_ledger_timestamptz``). The conversion is done here, once, by the
driver: :func:`use_epoch_seconds` sets a codec on every connection of the ledger's
pool (:class:`budget.storage.postgres.store.PgStore`) so that a ``timestamptz`` parameter is sent
from epoch seconds and a ``timestamptz`` value (a column, ``MIN(…)``, an element of
a ``ROW(…)`` or of an array) comes back as epoch seconds. The SQL text needs no
change: comparisons, ``GREATEST``, ``COALESCE``, ``MIN`` stay between two
``timestamptz`` (a parameter's type is inferred from the column it meets), and the
ledger does no interval arithmetic in SQL (it computes ``t + ttl`` in Python).

Everything on that pool that reads a ``timestamptz`` gets epoch seconds: the ledger,
and the replicas' shared-state rows run on the same pool (``llm.keys.postgres``,
``llm.keys.claims``, ``bot.ops.signals``, ``bot.storage.pg_rates``, ``bot.chat.lanes``), which
compare
epoch seconds with ``budget_processes.heartbeat_at``, and the message path's statements
on the bot's tables (``bot.storage.pg_hot``), which write their times as epoch seconds
and read none. No other statement on it touches the bot's or the scheduler's
``timestamptz`` columns (those go through SQLAlchemy, with datetimes). SQLAlchemy
readers of the ledger's columns (reports, export, reconcile, ``export-config``) convert
through :class:`budget.storage.tables.EpochSeconds`.

Precision: ``timestamptz`` keeps microseconds. An instant of the clock (a datetime,
microseconds) round-trips exactly: ``now.timestamp()`` is the float nearest to its
microseconds ÷ 10⁶ (at most 0.24 µs off before 2106), :func:`encode` rounds it back
to those microseconds (its whole seconds and its fraction are scaled apart, so no
further error), and :func:`decode` divides them again — the same float. A computed
time with a fraction of a microsecond (``t + ttl`` for a TTL such as 0.1234567 s) is
stored rounded to the nearest microsecond; nothing compares such times for equality.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from typing import Any

__all__ = ["PG_EPOCH_US", "UNIX", "decode", "encode", "instant", "micros", "use_epoch_seconds"]

#: 1970-01-01T00:00:00Z: epoch seconds count from here.
UNIX = datetime(1970, 1, 1, tzinfo=UTC)

#: 2000-01-01T00:00:00Z (PostgreSQL's epoch) in microseconds since 1970-01-01T00:00:00Z.
PG_EPOCH_US = 946_684_800_000_000


def micros(seconds: float) -> int:
    """Epoch seconds → the nearest whole microseconds since 1970-01-01 UTC (exact for
    an instant of the clock: module docstring).

    Raises:
        TypeError: ``seconds`` is not a number (a ``datetime`` is refused: on this pool
            times are epoch seconds).
    """
    if type(seconds) is not float and (
        isinstance(seconds, bool) or not isinstance(seconds, int | float)
    ):
        raise TypeError(f"epoch seconds expected for a timestamptz, got {type(seconds).__name__}")
    whole = math.floor(seconds)
    return whole * 1_000_000 + round((seconds - whole) * 1_000_000)


def instant(seconds: float) -> datetime:
    """Epoch seconds → the aware UTC datetime a ``timestamptz`` holds (the microsecond
    of :func:`micros`): what :class:`budget.storage.tables.EpochSeconds` sends through
    SQLAlchemy."""
    return UNIX + timedelta(microseconds=micros(seconds))


def encode(seconds: float) -> tuple[int]:
    """Epoch seconds → asyncpg's ``tuple`` form of a ``timestamptz``: (microseconds
    since 2000-01-01 UTC,), rounded to the nearest microsecond.

    Raises:
        TypeError: as :func:`micros`.
    """
    return (micros(seconds) - PG_EPOCH_US,)


def decode(value: tuple[int]) -> float:
    """asyncpg's ``tuple`` form of a ``timestamptz`` → epoch seconds (a ``float``; the
    same float as ``datetime.timestamp()`` of that instant)."""
    return (value[0] + PG_EPOCH_US) / 1_000_000


async def use_epoch_seconds(conn: Any) -> None:
    """Make ``conn`` (an asyncpg connection) send and return ``timestamptz`` values as
    epoch seconds (the pool's ``init``: once per new connection, one catalog query)."""
    await conn.set_type_codec(
        "timestamptz", schema="pg_catalog", encoder=encode, decoder=decode, format="tuple"
    )
