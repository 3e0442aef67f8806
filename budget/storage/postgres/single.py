"""The PostgreSQL ledger's steps that are one statement each, run by
:meth:`budget.storage.postgres.runner.PgRunner.tx` with ``single`` (the statement is its
own transaction: no ``BEGIN``/``COMMIT`` round trips, no worker thread): the courtesy
message counter, a user's plan, one model's calibration sample — each once per chat
message. The portable bodies of :mod:`budget.storage.sql` they stand for (run through
:class:`~budget.storage.postgres.rows.PgCursor` in a thread, a round trip per statement
plus the transaction's) are what SQLite runs; the answers and the rows are the same
(``docs/decisions/220-postgres-hot-path.md``).

Times are epoch seconds (the pool's ``timestamptz`` codec); money is not touched here.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

from budget.config import LedgerConfig
from budget.policy.levels import plan_now
from budget.policy.windows import window_keys
from budget.storage.sql.admin import messages_refusal
from budget.storage.store import RefusedStep

__all__ = ["record_calibration", "record_message", "user_plan"]

#: Counts a message unless the cap ($3, NULL: none) is reached; locks the user's counter
#: row of the day (creating it, at 0 when the cap is 0) exactly as the portable step's
#: lock does. Returns the new count; no row (or a count of 0) when refused.
_COUNT_MESSAGE = (
    "INSERT INTO budget_messages AS m (user_id, day_key, count)"
    " VALUES ($1, $2, CASE WHEN $3::bigint IS NULL OR $3::bigint > 0 THEN 1 ELSE 0 END)"
    " ON CONFLICT (user_id, day_key) DO UPDATE SET count = m.count + 1"
    " WHERE $3::bigint IS NULL OR m.count < $3::bigint RETURNING m.count"
)
_PLAN = "SELECT plan, until FROM budget_user_plans WHERE user_id = $1"
_CALIBRATION = (
    "INSERT INTO budget_calibration (provider, model, ratio_ppm, samples, updated_at)"
    " VALUES ($1, $2, $3, $4, $5) ON CONFLICT (provider, model) DO UPDATE SET"
    " ratio_ppm = excluded.ratio_ppm, samples = excluded.samples,"
    " updated_at = excluded.updated_at"
)

#: A statement body on one asyncpg connection.
Statement = Callable[[Any], Awaitable[Any]]


def record_message(cfg: LedgerConfig, now: datetime, user_id: int) -> Statement:
    """The body counting one message against USER_DAILY_MESSAGES: today's count
    (:func:`budget.storage.sql.admin.record_message`).

    Raises (from the body): RefusedStep(messages) when the cap is reached; the refused
    message is not counted (``PgRunner.tx`` records the refusal event).
    """
    day = window_keys(now, cfg.tz).day_key

    async def body(conn: Any) -> int:
        count = await conn.fetchval(_COUNT_MESSAGE, user_id, day, cfg.user_daily_messages)
        if not count:
            raise RefusedStep(messages_refusal(cfg, now, user_id), user_id)
        return int(count)

    return body


def user_plan(cfg: LedgerConfig, now: datetime, user_id: int) -> Statement:
    """The body reading the plan ``user_id`` is held on now
    (:func:`budget.storage.sql.rows.user_plan`; call it only when ``cfg.plans``)."""

    async def body(conn: Any) -> str | None:
        row = await conn.fetchrow(_PLAN, user_id)
        stored, until = (None, None) if row is None else (str(row[0]), row[1])
        return plan_now(cfg, stored, until, now.timestamp())

    return body


def record_calibration(
    now: datetime, provider: str, model: str, ratio_ppm: int, samples: int
) -> Statement:
    """The body persisting one model's calibration (upsert;
    :func:`budget.storage.sql.admin.record_calibration`)."""

    async def body(conn: Any) -> None:
        await conn.execute(_CALIBRATION, provider, model, ratio_ppm, samples, now.timestamp())

    return body
