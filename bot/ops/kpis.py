"""The figures an operator quotes: users, digests sent, channels followed, uptime.

Shown on the dashboard (``kpis`` of ``api/state``) and in the spend reports. Each is a
count of the bot's own rows, read when asked (nothing is counted on the side):

* ``users`` — ``user_profiles`` rows (everyone who ever wrote to the bot), and
  ``active_users`` those not marked inactive (Telegram answered 403: they blocked it);
* ``digests_sent`` — ``digest_runs`` with status ``sent`` (one per user and local date),
  and ``digests_sent_in_span`` those sent in a span of time (the dashboard: today in
  BUDGET_TZ; a report: its days);
* ``channels`` — sources (channels and feeds) with at least one subscription;
* ``uptime_s`` — seconds since this process's bot started (the injected clock's
  monotonic reading; each replica has its own).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import distinct, func, select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from budget.kernel.clock import Clock
from scheduler.tables import DigestRun, DigestSubscription, RunStatus, UserProfile

__all__ = ["KpiReader", "Kpis", "uptime_text"]


@dataclass(frozen=True, slots=True)
class Kpis:
    """The counts (see the module docstring)."""

    users: int
    active_users: int
    digests_sent: int
    digests_sent_in_span: int
    channels: int
    uptime_s: int

    def as_json(self) -> dict[str, int | str]:
        """The dashboard's ``kpis`` panel, read with today's span (``uptime`` also as text)."""
        return {
            "users": self.users,
            "active_users": self.active_users,
            "digests_sent": self.digests_sent,
            "digests_sent_today": self.digests_sent_in_span,
            "channels": self.channels,
            "uptime_s": self.uptime_s,
            "uptime": uptime_text(self.uptime_s),
        }


def uptime_text(seconds: int) -> str:
    """``93784`` → ``1d 2h 3m`` (whole minutes; ``0m`` under a minute)."""
    days, rest = divmod(max(0, seconds), 86_400)
    hours, rest = divmod(rest, 3_600)
    minutes = rest // 60
    parts = [f"{days}d"] if days else []
    if days or hours:
        parts.append(f"{hours}h")
    parts.append(f"{minutes}m")
    return " ".join(parts)


class KpiReader:
    """Reads :class:`Kpis`.

    Args:
        sessions: async sessions on the bot's engine.
        clock: the one clock.
        started_monotonic: the clock's monotonic reading when the bot was built.
    """

    __slots__ = ("_clock", "_sessions", "_started")

    def __init__(
        self, sessions: async_sessionmaker[AsyncSession], clock: Clock, started_monotonic: float
    ) -> None:
        self._sessions = sessions
        self._clock = clock
        self._started = started_monotonic

    def __repr__(self) -> str:
        return "KpiReader()"

    async def read(self, since: datetime, until: datetime | None = None) -> Kpis:
        """The counts now, the digests sent in ``[since, until)`` apart (aware UTC;
        ``until=None``: up to now).

        Raises:
            sqlalchemy.exc.SQLAlchemyError: the database cannot be read.
        """
        sent = DigestRun.status == RunStatus.SENT.value
        async with self._sessions() as session:
            users = (await session.execute(select(func.count()).select_from(UserProfile))).scalar()
            active = (
                await session.execute(select(func.count()).where(UserProfile.active.is_(True)))
            ).scalar()
            digests = (await session.execute(select(func.count()).where(sent))).scalar()
            in_span = sent & (DigestRun.sent_at >= since)
            if until is not None:
                in_span = in_span & (DigestRun.sent_at < until)
            span = (await session.execute(select(func.count()).where(in_span))).scalar()
            channels = (
                await session.execute(select(func.count(distinct(DigestSubscription.source_id))))
            ).scalar()
        return Kpis(
            users=int(users or 0),
            active_users=int(active or 0),
            digests_sent=int(digests or 0),
            digests_sent_in_span=int(span or 0),
            channels=int(channels or 0),
            uptime_s=int(self._clock.monotonic() - self._started),
        )
