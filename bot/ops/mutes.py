"""Alert types the admins muted with ``/alerts`` (docs/decisions/181-alerts-can-be-muted.md).

A muted type is one row of ``ops_alert_mutes``; the watch reads them all at the start of
each tick (:meth:`AlertMutes.refresh`, one small select), so a type muted on one replica
is muted on every replica by its next tick, and a restart keeps it muted. A muted type
is not read and not told; unmuted, the next tick tells what is true then (a threshold
crossed meanwhile in the current window is told then, once).
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from bot.ops.anomaly_watch import ANOMALY_TYPES
from bot.storage.tables import OpsAlertMute
from budget.kernel.clock import Clock
from scheduler.claims import insert_ignore

__all__ = ["ALERT_TYPES", "AlertMutes"]

#: Every alert type, as ``/alerts`` names them: the thresholds of ALERT_AT, then the
#: anomalies (:mod:`bot.ops.anomaly_watch`).
ALERT_TYPES = ("limits", *ANOMALY_TYPES)


class AlertMutes:
    """The muted alert types (see the module docstring).

    Args:
        sessions: async sessions on the bot's engine.
        clock: the one clock (``muted_at``).
        off_by_setting: see the attribute.
    """

    __slots__ = ("_clock", "_muted", "_sessions", "off_by_setting")

    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        clock: Clock,
        off_by_setting: dict[str, str] | None = None,
    ) -> None:
        self._sessions = sessions
        self._clock = clock
        self._muted: frozenset[str] = frozenset()
        #: types a setting turns off, with that setting (``{"loop": "LOOP_ALERT_CALLS=0"}``)
        self.off_by_setting = dict(off_by_setting or {})

    def __repr__(self) -> str:
        return f"AlertMutes(muted={sorted(self._muted)})"

    def is_muted(self, alert_type: str) -> bool:
        """Whether ``alert_type`` was muted at the last :meth:`refresh` (or change here)."""
        return alert_type in self._muted

    async def refresh(self) -> frozenset[str]:
        """Read the muted types from the database; returns them.

        Raises:
            sqlalchemy.exc.SQLAlchemyError: the database cannot be read.
        """
        async with self._sessions() as session:
            rows = await session.scalars(sa.select(OpsAlertMute.alert_type))
            self._muted = frozenset(str(r) for r in rows)
        return self._muted

    async def set_muted(self, alert_type: str, muted: bool, by: int) -> bool:
        """Mute (``muted``) or unmute ``alert_type`` for every replica; returns whether
        that changed anything (False: it already was so).

        Raises:
            ValueError: not one of :data:`ALERT_TYPES`.
            sqlalchemy.exc.SQLAlchemyError: the database cannot be written.
        """
        if alert_type not in ALERT_TYPES:
            raise ValueError(f"unknown alert type {alert_type!r}")
        table = OpsAlertMute.__table__
        async with self._sessions() as session, session.begin():
            if muted:
                dialect = (await session.connection()).dialect.name
                stmt = insert_ignore(dialect, table).values(
                    alert_type=alert_type, muted_by=by, muted_at=self._clock.now()
                )
                result = await session.execute(stmt)
            else:
                result = await session.execute(
                    sa.delete(OpsAlertMute).where(OpsAlertMute.alert_type == alert_type)
                )
        await self.refresh()
        return bool(result.rowcount)  # type: ignore[attr-defined]
