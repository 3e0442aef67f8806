"""The sums retention kept of the attempts it pruned (``budget_attempt_sums``), read
beside the attempts still in ``budget_holds`` by the export's totals, the
reconciliation and the dashboard's daily chart
(``docs/decisions/140-retention-keeps-sums.md``).

A sum covers one 15-minute UTC slot, ledger day, provider key and model; every UTC
offset in use is a multiple of 15 minutes, so a period cut in any zone takes whole
slots. Money is integer µUSD; tokens as the provider reported them.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator
from typing import NamedTuple

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from budget.books.periods import Period
from budget.storage.sql.retention import SLOT_S
from budget.storage.tables import attempt_sums

__all__ = ["PrunedSum", "pruned_sums"]


class PrunedSum(NamedTuple):
    """One row of ``budget_attempt_sums``: ``slot`` (its start is ``slot * 900`` epoch
    seconds), ``day_key``, ``provider`` (the key), ``model``, then the sums."""

    slot: int
    day_key: str
    provider: str
    model: str
    attempts: int
    input_tokens: int
    cached_input_tokens: int
    output_tokens: int
    reasoning_tokens: int
    cost_musd: int
    list_price_musd: int
    free_list_musd: int

    @property
    def at(self) -> float:
        """The slot's start, epoch seconds."""
        return float(self.slot * SLOT_S)


async def pruned_sums(
    engine: AsyncEngine, period: Period, *, key_name: str | None = None
) -> AsyncIterator[PrunedSum]:
    """The sums of the slots starting in ``period`` (oldest first); ``key_name`` limits
    to one provider key.

    Raises:
        sqlalchemy.exc.SQLAlchemyError: the database could not be read.
    """
    lo = math.ceil(period.start.timestamp() / SLOT_S)
    hi = math.ceil(period.end.timestamp() / SLOT_S)
    c = attempt_sums.c
    stmt = (
        sa.select(*(c[name] for name in PrunedSum._fields))
        .where(c.slot >= lo, c.slot < hi)
        .order_by(c.slot, c.provider, c.model, c.day_key)
    )
    if key_name is not None:
        stmt = stmt.where(c.provider == key_name)
    async with engine.connect() as conn:
        for row in (await conn.execute(stmt)).all():
            slot, day, provider, model, *sums = row
            yield PrunedSum(int(slot), day, provider, model, *(int(v) for v in sums))
