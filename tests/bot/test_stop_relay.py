"""The rows of relayed stops fit ``runtime_signals.name`` (32 characters) for any
Telegram ids: a group's ``-100…`` chat id, a user id of 52 bits, the longest button
token — on the real PostgreSQL, where a longer name is refused and nothing is relayed."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

import asyncpg

from bot.chat.streaming.registry import StopResult, StreamRegistry, new_token
from bot.ops.stop_relay import StopRelay
from budget.kernel.clock import SystemClock
from budget.storage.postgres.timestamps import use_epoch_seconds

GROUP = -1_009_999_999_999_999
USER = 2**52 - 1


class _Connection:
    """The control connection's ``tx`` over one asyncpg connection."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn

    async def tx(
        self, now: datetime, body: Callable[[Any], Awaitable[Any]], *, single: bool = False
    ) -> Any:
        del now, single
        return await body(self.conn)


async def test_relayed_stops_of_the_largest_ids_are_written_and_read_back(
    pg_migrated_url: str,
) -> None:
    """A button press, a /stop in a group and a draft's Stop with the largest ids are
    each one row; nothing streams anywhere, so no answer comes: "gone", none stopped."""
    conn = await asyncpg.connect(pg_migrated_url.replace("postgresql+asyncpg", "postgresql"))
    try:
        await use_epoch_seconds(conn)
        clock = SystemClock()
        relay = StopRelay(_Connection(conn), clock, StreamRegistry(clock), answer_wait_s=0.2)
        assert await relay.relay(new_token(), USER, is_admin=True) is StopResult.GONE
        assert await relay.relay_user(GROUP, USER, is_admin=True) == 0
        await relay.relay_draft(USER, 2**31)
        await relay.look()  # reads them back: nothing of theirs streams here
        names = [r["name"] for r in await conn.fetch("SELECT name FROM runtime_signals")]
    finally:
        await conn.close()
    assert len(names) == 3, names
    assert all(len(name) <= 32 for name in names)
