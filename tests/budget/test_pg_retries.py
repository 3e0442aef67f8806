"""The PostgreSQL ledger's retry of a step that conflicted (a serialization failure, a
deadlock): tried again up to RETRIES attempts, then failed closed; with the backoff
injected as 0 nothing sleeps (``PgStore(retry_backoff_s=0)``)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest
import stamina

from budget.config import LedgerConfig
from budget.errors import LedgerUnavailable
from budget.storage.postgres.runner import RETRIES
from budget.storage.postgres.store import PgStore
from tests.support.clocks import ManualClock


@pytest.fixture
async def store(pg_migrated_url: str) -> AsyncIterator[PgStore]:
    """An open store on a migrated database, no heartbeat task, no retry pause."""
    made = PgStore(
        pg_migrated_url,
        LedgerConfig(),
        "p-retries",
        ManualClock(),
        run_heartbeat=False,
        retry_backoff_s=0,
    )
    await made.open()
    yield made
    await made.close()


async def test_a_conflicting_step_is_tried_again_until_it_passes(store: PgStore) -> None:
    """Two serialization failures, then the body's answer: three attempts in all."""
    attempts = 0

    async def body(conn: Any) -> int:
        nonlocal attempts
        attempts += 1
        if attempts < 3:
            raise asyncpg.exceptions.SerializationError("could not serialize access")
        return int(await conn.fetchval("SELECT 41 + 1"))

    assert await store.tx(store.clock.now(), body) == 42
    assert attempts == 3


async def test_a_step_still_conflicting_after_the_last_attempt_fails_closed(
    store: PgStore,
) -> None:
    """A deadlock every time: RETRIES attempts, then LedgerUnavailable caused by it."""
    attempts = 0

    async def body(conn: Any) -> None:
        nonlocal attempts
        attempts += 1
        raise asyncpg.exceptions.DeadlockDetectedError("deadlock detected")

    with pytest.raises(LedgerUnavailable) as raised:
        await store.tx(store.clock.now(), body)
    assert attempts == RETRIES
    assert isinstance(raised.value.__cause__, asyncpg.exceptions.DeadlockDetectedError)


async def test_a_storage_error_is_not_retried(store: PgStore) -> None:
    """Any other server error fails closed at once (no second attempt)."""
    attempts = 0

    async def body(conn: Any) -> None:
        nonlocal attempts
        attempts += 1
        await conn.execute("SELECT * FROM no_such_table")

    with pytest.raises(LedgerUnavailable):
        await store.tx(store.clock.now(), body)
    assert attempts == 1


async def test_a_portable_step_is_retried_the_same_way(store: PgStore) -> None:
    """The synchronous bodies (reports, admin steps) run through the same retry."""
    attempts = 0

    def body(cur: Any) -> int:
        nonlocal attempts
        attempts += 1
        if attempts == 1:
            raise asyncpg.exceptions.SerializationError("could not serialize access")
        cur.execute("SELECT 7")
        return int(cur.fetchone()[0])

    assert await store._read(body) == 7
    assert attempts == 2


async def test_a_step_that_passes_at_once_builds_no_retry_context(
    store: PgStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The common case costs one attempt and nothing of stamina's; the first conflict
    enters stamina's context as its first attempt (two attempts in all, as before)."""
    contexts = 0
    real = stamina.retry_context

    def counted(*args: Any, **kwargs: Any) -> Any:
        nonlocal contexts
        contexts += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(stamina, "retry_context", counted)

    async def once(conn: Any) -> int:
        return int(await conn.fetchval("SELECT 1"))

    assert await store.tx(store.clock.now(), once) == 1
    assert contexts == 0
    attempts = 0

    async def conflicts_once(conn: Any) -> int:
        nonlocal attempts
        attempts += 1
        if attempts == 1:
            raise asyncpg.exceptions.SerializationError("could not serialize access")
        return 2

    assert await store.tx(store.clock.now(), conflicts_once) == 2
    assert (contexts, attempts) == (1, 2)
