"""The last reconciliation of each provider key, as the spend reports tell it
(docs/decisions/182-reports-say-when-each-key-was-reconciled.md).

``/reconcile`` (:mod:`bot.handlers.books`) records each comparison it replies with
(:meth:`ReconcileLog.record`): one row per key in ``ops_reconciliations``, replaced by
the next one — when, by whom, the period, the file, whether every step matched
(:attr:`budget.books.reconcile.ReconcileReport.ok`) and the period's two totals. A
comparison refused before it ran (a foreign or unreadable file) is not one. The
command-line ``python -m budget reconcile`` does not record (it writes nothing to the
books).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from bot.storage.tables import OpsReconciliation
from budget.books.reconcile import ReconcileReport
from budget.kernel.clock import Clock

__all__ = ["LastReconciliation", "ReconcileLog"]


@dataclass(frozen=True, slots=True)
class LastReconciliation:
    """One key's last reconciliation (``at is None``: never reconciled).

    Attributes:
        key: the provider key; ``at``: when (aware UTC); ``start`` / ``end``: the period.
        matched: every step matched; ``ledger_musd`` / ``export_musd``: the totals.
    """

    key: str
    at: datetime | None = None
    start: datetime | None = None
    end: datetime | None = None
    file_name: str = ""
    matched: bool = False
    ledger_musd: int = 0
    export_musd: int = 0


def _aware(at: datetime) -> datetime:
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)  # SQLite drops the zone


class ReconcileLog:
    """The ``ops_reconciliations`` rows.

    Args:
        sessions: async sessions on the bot's engine.
        clock: the one clock (``at``).
    """

    __slots__ = ("_clock", "_sessions")

    def __init__(self, sessions: async_sessionmaker[AsyncSession], clock: Clock) -> None:
        self._sessions = sessions
        self._clock = clock

    def __repr__(self) -> str:
        return "ReconcileLog()"

    async def record(self, report: ReconcileReport, by: int) -> None:
        """Keep ``report`` as its key's last reconciliation.

        Raises:
            sqlalchemy.exc.SQLAlchemyError: the database cannot be written.
        """
        async with self._sessions() as session, session.begin():
            await session.execute(
                sa.delete(OpsReconciliation).where(OpsReconciliation.key_name == report.key_name)
            )
            session.add(
                OpsReconciliation(
                    key_name=report.key_name[:32],
                    at=self._clock.now(),
                    by_user=by,
                    period_start=report.start,
                    period_end=report.end,
                    file_name=report.export.file_name[:128],
                    matched=report.ok,
                    ledger_musd=report.ledger_musd,
                    export_musd=report.export_musd,
                )
            )

    async def read(self, keys: Sequence[str]) -> list[LastReconciliation]:
        """The last reconciliation of each of ``keys``, in that order.

        Raises:
            sqlalchemy.exc.SQLAlchemyError: the database cannot be read.
        """
        async with self._sessions() as session:
            rows = {
                r.key_name: r
                for r in await session.scalars(
                    sa.select(OpsReconciliation).where(OpsReconciliation.key_name.in_(list(keys)))
                )
            }
        out = []
        for key in keys:
            row = rows.get(key)
            if row is None:
                out.append(LastReconciliation(key))
                continue
            out.append(
                LastReconciliation(
                    key,
                    _aware(row.at),
                    _aware(row.period_start),
                    _aware(row.period_end),
                    row.file_name,
                    row.matched,
                    row.ledger_musd,
                    row.export_musd,
                )
            )
        return out
