"""Spend reports: a daily (and optional weekly) summary of a closed period for the admins
(docs/decisions/075-spend-reports.md).

The figures are the books' rows, never a second count: the booked attempts of the
period (:func:`budget.books.export.booked_attempts` — settled and expired holds granted
in it, corrections included, the reader of ``/budget export`` and of the dashboard's
charts) and the ledger's refusal events of its day keys (``budget_events``), summed
here. A day's report therefore says what ``/budget`` said of that day at its end, with
any correction since:

* per provider key, every configured key in cascade order: calls, money settled and
  the list-price equivalent (``/budget``'s "Providers today" figures);
* money spent; the free tiers' calls and their list-price equivalent (calls booked at
  $0: what they would have cost, not spent);
* the top users and teams by money (a team as its members' attempts were booked);
* refusals by reason;
* estimated bookings: attempts booked at an estimate (flag ``estimated``), and of them
  those still uncorrected (an expired hold booked at its bound, no settle since);
* the counts of :mod:`bot.ops.kpis`;
* each configured key's last reconciliation with its provider's bill and its result, or
  that it was never reconciled (:mod:`bot.ops.reconciliations`; read at send time).

When: at REPORT_TIME local in BUDGET_TZ, each day (the previous local day's report) and
on REPORT_WEEKLY's weekday (the seven local days before it). A report is due from that
instant until the end of the local day, so a bot that was down at REPORT_TIME sends it
when it starts; :class:`bot.ops.once.NoticeBook` makes it once across restarts and
replicas. Money is integer µUSD.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from bot.ops.kpis import Kpis
from bot.ops.reconciliations import LastReconciliation
from budget.books.export import Attempt, booked_attempts
from budget.books.periods import Period
from budget.policy.windows import local_instant, zone
from budget.storage.tables import events

__all__ = [
    "TOP_N",
    "KeySpend",
    "ReportPeriod",
    "SpendReport",
    "due_periods",
    "read_refusals",
    "read_report",
    "sum_attempts",
]

#: Users and teams named in a report.
TOP_N = 5


@dataclass(frozen=True, slots=True)
class ReportPeriod:
    """The local days a report covers, ``[first, first + days)`` in ``tz``.

    Attributes:
        kind: ``daily`` or ``weekly``.
        first: the first local day; ``days``: how many (1 or 7).
        tz: BUDGET_TZ.
    """

    kind: str
    first: date
    days: int
    tz: str

    @property
    def last(self) -> date:
        return self.first + timedelta(days=self.days - 1)

    @property
    def key(self) -> str:
        """The claim key (:mod:`bot.ops.once`)."""
        return f"report:{self.kind}:{self.first.isoformat()}"

    def day_keys(self) -> list[str]:
        """The ledger's day keys of the period (ISO dates)."""
        return [(self.first + timedelta(days=i)).isoformat() for i in range(self.days)]

    def period(self) -> Period:
        """The books' period: local midnight of ``first`` to that after ``last``."""
        tz = zone(self.tz)
        start = local_instant(self.first, time(0), tz)
        end = local_instant(self.last + timedelta(days=1), time(0), tz)
        label = self.first.isoformat() if self.days == 1 else f"{self.first}..{self.last}"
        return Period(label, self.tz, start, end)


def due_periods(
    now: datetime, tz: str, report_time: time | None, weekly: int | None
) -> list[ReportPeriod]:
    """The reports due at ``now``: from REPORT_TIME local (``report_time``; ``None``: no
    reports) to the end of that local day, the previous day's, and on weekday
    ``weekly`` (0 = Monday; ``None``: none) the previous seven days'."""
    if report_time is None:
        return []
    zone_info = zone(tz)
    today = now.astimezone(zone_info).date()
    if now < local_instant(today, report_time, zone_info):
        return []
    due = [ReportPeriod("daily", today - timedelta(days=1), 1, tz)]
    if weekly is not None and today.weekday() == weekly:
        due.append(ReportPeriod("weekly", today - timedelta(days=7), 7, tz))
    return due


@dataclass(slots=True)
class KeySpend:
    """One provider key over the period.

    Attributes:
        name: the key (``groq``, ``groq2``, ``deepseek`` …); ``paid``: its tier is paid.
        calls: booked attempts; ``settled_musd`` their money.
        list_musd: their list-price equivalent (``None``: no attempt had a list price).
        free_list_musd: the list-price equivalent of those booked at $0.
        estimated: attempts booked at an estimate.
    """

    name: str
    paid: bool
    calls: int = 0
    settled_musd: int = 0
    list_musd: int | None = None
    free_list_musd: int = 0
    estimated: int = 0


@dataclass(slots=True)
class SpendReport:
    """One report's figures (see the module docstring); money in µUSD."""

    period: ReportPeriod
    keys: list[KeySpend]
    top_users: list[tuple[int, int]]
    top_teams: list[tuple[str, int]]
    refusals: dict[str, int]
    estimated_calls: int
    estimated_musd: int
    uncorrected_calls: int
    uncorrected_musd: int
    kpis: Kpis | None = None
    reconciliations: list[LastReconciliation] | None = None

    @property
    def spent_musd(self) -> int:
        """Money booked over the period."""
        return sum(k.settled_musd for k in self.keys)

    @property
    def free_calls(self) -> int:
        """Calls booked at $0 (the free tiers)."""
        return sum(k.calls for k in self.keys if not k.paid)

    @property
    def saved_musd(self) -> int:
        """The list-price equivalent of the calls booked at $0 (not spent)."""
        return sum(k.free_list_musd for k in self.keys)


def sum_attempts(
    period: ReportPeriod,
    attempts: Sequence[Attempt],
    order: Sequence[str],
    paid: dict[str, bool],
    refusals: dict[str, int],
) -> SpendReport:
    """Sum the booked ``attempts`` of ``period`` into a report: every key of ``order``
    (the configured keys, in cascade order, with 0 calls if none) and any other key
    booked in the period after them, sorted; ``paid``: each key's tier (unknown: paid)."""
    keys: dict[str, KeySpend] = {name: KeySpend(name, paid.get(name, True)) for name in order}
    users: Counter[int] = Counter()
    teams: Counter[str] = Counter()
    estimated = [0, 0]
    uncorrected = [0, 0]
    for row in attempts:
        spend = keys.get(row.provider)
        if spend is None:
            spend = keys[row.provider] = KeySpend(row.provider, paid.get(row.provider, True))
        money = int(row.actual_musd or 0)
        spend.calls += 1
        spend.settled_musd += money
        if row.list_actual_musd is not None:
            spend.list_musd = (spend.list_musd or 0) + int(row.list_actual_musd)
            if money == 0:
                spend.free_list_musd += int(row.list_actual_musd)
        if row.estimated:
            spend.estimated += 1
            estimated[0] += 1
            estimated[1] += money
            if row.state == "expired":
                uncorrected[0] += 1
                uncorrected[1] += money
        if money:
            users[row.user_id] += money
            if row.team:
                teams[row.team] += money
    rank = {name: i for i, name in enumerate(order)}
    names = sorted(keys, key=lambda n: (rank.get(n, len(rank)), n))
    return SpendReport(
        period=period,
        keys=[keys[n] for n in names],
        top_users=sorted(users.items(), key=lambda x: (-x[1], x[0]))[:TOP_N],
        top_teams=sorted(teams.items(), key=lambda x: (-x[1], x[0]))[:TOP_N],
        refusals=dict(sorted(refusals.items())),
        estimated_calls=estimated[0],
        estimated_musd=estimated[1],
        uncorrected_calls=uncorrected[0],
        uncorrected_musd=uncorrected[1],
    )


async def read_refusals(engine: AsyncEngine, day_keys: Sequence[str]) -> dict[str, int]:
    """Refusal events of the ledger's ``day_keys``, per reason (what ``/budget``'s
    "Ledger refusals today" counts for one day).

    Raises:
        sqlalchemy.exc.SQLAlchemyError: the books cannot be read.
    """
    stmt = (
        sa.select(events.c.reason, sa.func.count())
        .where(events.c.kind == "refusal", events.c.day_key.in_(list(day_keys)))
        .group_by(events.c.reason)
    )
    async with engine.connect() as conn:
        rows = (await conn.execute(stmt)).all()
    return {str(reason): int(count) for reason, count in rows}


async def read_report(
    engine: AsyncEngine,
    period: ReportPeriod,
    order: Sequence[str],
    paid: dict[str, bool],
) -> SpendReport:
    """The report of ``period`` from the books (see :func:`sum_attempts`).

    Raises:
        sqlalchemy.exc.SQLAlchemyError: the books cannot be read.
    """
    rows = [row async for row in booked_attempts(engine, period.period())]
    refusals = await read_refusals(engine, period.day_keys())
    return sum_attempts(period, rows, order, paid, refusals)
