"""Stopped answers on the books: which settled holds were stopped by their user (or by
``/kill hard``), and what the stops saved, read back from the holds themselves.

A stopped streamed answer is settled like any interrupted call (the provider's usage if
it came, else the tokens received, estimated); :meth:`StopBook.mark` then flags its hold
``stopped``. Today's figures come from those rows only:

* answers stopped — flagged holds whose ``day_key`` is today;
* output tokens not generated — Σ (``max_tokens`` held − output settled);
* money saved — Σ (ceiling held − actual settled), µUSD: what the ceiling reserved that
  the stop kept from being spent.

Portable SQLAlchemy Core over ``budget_holds`` (SQLite and PostgreSQL alike).
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import func, select, update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from budget.storage.tables import holds

__all__ = ["StopBook", "StopTotals"]


@dataclass(frozen=True, slots=True)
class StopTotals:
    """Stopped answers of one day.

    Attributes:
        stopped: settled holds flagged stopped.
        tokens_not_generated: Σ (max_tokens held − output tokens settled), tokens.
        saved_musd: Σ (ceiling − actual), µUSD.
    """

    stopped: int = 0
    tokens_not_generated: int = 0
    saved_musd: int = 0


class StopBook:
    """Flags stopped holds and totals them (see the module docstring)."""

    def __init__(self, sessions: async_sessionmaker[AsyncSession]) -> None:
        self._sessions = sessions

    def __repr__(self) -> str:
        return "StopBook()"

    async def mark(self, hold_id: str) -> None:
        """Flag a settled hold as a stopped answer (idempotent).

        Raises:
            sqlalchemy.exc.SQLAlchemyError: the database failed (the settlement stands).
        """
        async with self._sessions() as session, session.begin():
            await session.execute(update(holds).where(holds.c.hold_id == hold_id).values(stopped=1))

    async def totals(self, day_key: str) -> StopTotals:
        """Today's (``day_key``, the ledger's day in BUDGET_TZ) stopped answers."""
        settled = holds.c.state.in_(("settled", "expired"))
        query = select(
            func.count(),
            func.coalesce(func.sum(holds.c.max_tokens - func.coalesce(holds.c.usage_output, 0)), 0),
            func.coalesce(
                func.sum(holds.c.ceiling_musd - func.coalesce(holds.c.actual_musd, 0)), 0
            ),
        ).where(holds.c.day_key == day_key, holds.c.stopped == 1, settled)
        async with self._sessions() as session:
            row = (await session.execute(query)).one()
        return StopTotals(int(row[0]), max(0, int(row[1])), max(0, int(row[2])))
