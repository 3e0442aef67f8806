"""The PostgreSQL ledger's time codec (:mod:`budget.storage.postgres.timestamps`): epoch seconds of
the
clock ⇄ ``timestamptz``, exact to the microsecond."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import asyncpg
import pytest
from hypothesis import given
from hypothesis import strategies as st

from budget.storage.postgres.rows import asyncpg_dsn
from budget.storage.postgres.timestamps import (
    PG_EPOCH_US,
    decode,
    encode,
    instant,
    use_epoch_seconds,
)

UNIX = datetime(1970, 1, 1, tzinfo=UTC)


#: Microseconds from 1970 to the end of 2105 (epoch seconds below 2**32).
LAST_US = (datetime(2106, 1, 1, tzinfo=UTC) - UNIX) // timedelta(microseconds=1)


@given(st.integers(min_value=0, max_value=LAST_US))
def test_an_instant_of_the_clock_round_trips_exactly(micros: int) -> None:
    """Any microsecond instant (1970–2105): its epoch seconds encode to its exact
    microseconds and decode to the very float ``timestamp()`` gave."""
    t = (UNIX + timedelta(microseconds=micros)).timestamp()
    assert encode(t) == (micros - PG_EPOCH_US,)
    assert decode(encode(t)) == t


def test_a_time_between_microseconds_is_rounded_to_the_nearest() -> None:
    """A computed time (``t + ttl``) is kept to the nearest microsecond."""
    t = datetime(2026, 1, 14, 12, tzinfo=UTC).timestamp()
    assert decode(encode(t + 0.1234567)) == t + 0.123457
    assert decode(encode(t + 0.1234564)) == t + 0.123456


def test_only_numbers_are_times_on_the_ledger_pool() -> None:
    """A datetime sent to the ledger's pool is a programming error, said at once."""
    with pytest.raises(TypeError, match="epoch seconds"):
        encode(datetime(2026, 1, 14, tzinfo=UTC))  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        encode(True)


async def test_the_server_sees_the_same_instants(pg_url: str) -> None:
    """On a connection with the codec, PostgreSQL stores the clock's instant (its text
    form), ``to_timestamp`` of the same seconds is the same value, and a
    ``timestamptz`` comes back as epoch seconds in a column, an aggregate, a ``ROW``
    and an array alike."""
    t = datetime(2026, 1, 14, 12, 0, 0, 123457, tzinfo=UTC).timestamp()
    conn = await asyncpg.connect(asyncpg_dsn(pg_url))
    try:
        await use_epoch_seconds(conn)
        await conn.execute("SET TIME ZONE 'UTC'")
        assert await conn.fetchval("SELECT $1::timestamptz::text", t) == (
            "2026-01-14 12:00:00.123457+00"
        )
        assert await conn.fetchval("SELECT to_timestamp($1::float8) = $2::timestamptz", t, t)
        await conn.execute("CREATE TEMP TABLE k (s text, at timestamptz, gone timestamptz)")
        await conn.execute("INSERT INTO k VALUES ('g', $1, NULL)", t)
        row = await conn.fetchrow(
            "SELECT at, MIN(at) OVER (), (SELECT ROW(s, at, gone) FROM k),"
            " ARRAY(SELECT ROW(at) FROM k), GREATEST(at, $1), at > $2 FROM k",
            t + 1,
            t - 60.0,
        )
        assert row is not None
        assert tuple(row) == (t, t, ("g", t, None), [(t,)], t + 1, True)
    finally:
        await conn.close()


@given(st.integers(min_value=0, max_value=LAST_US))
def test_sqlalchemy_sends_the_same_instant_as_the_pool(micros: int) -> None:
    """:func:`instant` (``budget.storage.tables.EpochSeconds`` on PostgreSQL) is the datetime of
    the microseconds the pool's codec sends."""
    at = UNIX + timedelta(microseconds=micros)
    assert instant(at.timestamp()) == at
    assert encode(at.timestamp()) == (
        (instant(at.timestamp()) - UNIX) // timedelta(microseconds=1) - PG_EPOCH_US,
    )
