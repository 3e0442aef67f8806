"""The digest tables as the runner uses them: runs (``digest_runs``), subscriptions and
their sources, and the feed entries each subscription delivered (``digest_delivered``).

Each method is one short transaction on the app's engine (its own session); the runner
never holds a session across a provider call or a delivery. Times are aware datetimes
from the injected clock.

With a :class:`~scheduler.claims.Claimant` (several processes may share the database) a
run is worked on only by the process that claimed it (``claimed_by``, taken in
:meth:`RunStore.load`); the writes that move a run on (``ready``, ``sent``…) apply only
while the claim is still this process's, and a run that ends or is deferred is let go.
Without one (a process alone on its database) nothing is claimed.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date, datetime, timedelta
from typing import Any

from sqlalchemy import Select, case, delete, func, insert, or_, select, update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from sqlalchemy.sql.dml import Insert

from budget.kernel.clock import Clock
from budget.types import RefusalReason
from scheduler.claims import Claimant, insert_ignore
from scheduler.job import (
    DigestConfig,
    DueCandidates,
    Gathered,
    Job,
    LoadedRun,
    RunKey,
    SubscriptionCursor,
)
from scheduler.payload import sections_to_json
from scheduler.tables import (
    DeliveredEntry,
    DigestRun,
    DigestSource,
    DigestSubscription,
    DigestTick,
    RunStatus,
    UserProfile,
)
from scheduler.types import DigestSection, SourceKind

__all__ = ["ClaimLost", "RunStore"]

#: Entries remembered per feed subscription: at least ``DigestConfig.delivered_min``
#: and at least this many times the feed's current size.
_DELIVERED_FEED_FACTOR = 4
#: Ids per ``IN (...)`` (SQLite's variable limit is far above; this keeps statements small).
_ID_BATCH = 500


class ClaimLost(Exception):
    """Another process took this run over (this process's heartbeat had gone stale):
    this one must not move it on.

    Attributes:
        user_id: the run's user.
        local_date: the run's local date.
        holder: the process that holds it now (``None``: it was let go).
    """

    def __init__(self, user_id: int, local_date: date, holder: str | None) -> None:
        super().__init__(f"digest {user_id}/{local_date} is now held by {holder}")
        self.user_id = user_id
        self.local_date = local_date
        self.holder = holder


#: The one row of ``digest_ticks``.
_TICK_ID = 1

#: Statuses a process may claim (and work on).
_OPEN = (RunStatus.PENDING.value, RunStatus.DEFERRED.value, RunStatus.READY.value)


class RunStore:
    """Reads and writes of one digest run (see the module docstring).

    Args:
        session_factory: async sessions on the app's engine.
        clock: the one clock (``updated_at`` and the like).
        config: the runner's knobs (``delivered_min``).
        claimant: this process's claims (``None``: alone on the database, no claims).
    """

    __slots__ = ("_claimant", "_clock", "_config", "_sessions")

    def __init__(
        self,
        session_factory: async_sessionmaker[AsyncSession],
        clock: Clock,
        config: DigestConfig,
        claimant: Claimant | None = None,
    ) -> None:
        self._sessions = session_factory
        self._clock = clock
        self._config = config
        self._claimant = claimant

    def __repr__(self) -> str:
        return f"RunStore(delivered_min={self._config.delivered_min})"

    async def due_candidates(self, since: date) -> DueCandidates:
        """What a tick decides from: active users with digests on and a subscription; the
        runs of local dates from ``since`` on; the ``ready`` runs of active users, of any
        date, whose flood wait (if any) is over; the keys of those runs that a live other
        process holds (never with no claimant); and the last tick of any process."""
        now = self._clock.now()
        async with self._sessions() as session:
            profiles = (
                await session.execute(
                    select(UserProfile).where(
                        UserProfile.active.is_(True),
                        UserProfile.digest_enabled.is_(True),
                        UserProfile.user_id.in_(select(DigestSubscription.user_id)),
                    )
                )
            ).scalars()
            runs = {
                RunKey(r.user_id, r.local_date): r
                for r in (
                    await session.execute(select(DigestRun).where(DigestRun.local_date >= since))
                ).scalars()
            }
            ready = list((await session.execute(self._ready(now))).scalars())
            held = await self._held(session, [*runs.values(), *ready], now)
            tick = await session.get(DigestTick, _TICK_ID)
            return DueCandidates(
                list(profiles), runs, ready, held, tick.ticked_at if tick is not None else None
            )

    @staticmethod
    def _ready(now: datetime) -> Select[DigestRun]:
        """The ``ready`` runs of active users whose retry time (if any) has come."""
        return select(DigestRun).where(
            DigestRun.status == RunStatus.READY.value,
            DigestRun.payload.is_not(None),
            or_(DigestRun.retry_not_before.is_(None), DigestRun.retry_not_before <= now),
            DigestRun.user_id.in_(select(UserProfile.user_id).where(UserProfile.active.is_(True))),
        )

    async def _held(
        self, session: AsyncSession, runs: Sequence[DigestRun], now: datetime
    ) -> frozenset[RunKey]:
        """The keys of ``runs`` that a live other process holds."""
        if self._claimant is None:
            return frozenset()
        found = await session.execute(self._claimant.alive(now))
        alive = {str(process_id) for process_id in found.scalars()}
        alive.discard(self._claimant.process_id)
        return frozenset(RunKey(r.user_id, r.local_date) for r in runs if r.claimed_by in alive)

    async def record_tick(self, now: datetime, opened: Sequence[Job]) -> None:
        """Record a tick at ``now`` (the last tick only moves forward) and, first in the
        same transaction, create the runs of ``opened`` (catch-ups: ``pending``, not yet
        claimed), so a stop right after the tick loses none of them."""
        async with self._sessions() as session, session.begin():
            dialect = (await session.connection()).dialect.name
            for job in opened:
                await session.execute(self._new_run(dialect, job, now))
            await session.execute(
                insert_ignore(dialect, DigestTick.__table__).values(id=_TICK_ID, ticked_at=now)
            )
            await session.execute(
                update(DigestTick)
                .where(DigestTick.id == _TICK_ID, DigestTick.ticked_at < now)
                .values(ticked_at=now)
                .execution_options(synchronize_session=False)
            )

    @staticmethod
    def _new_run(dialect: str, job: Job, now: datetime) -> Insert:
        """``INSERT`` of the job's run, ``pending``, unless it exists."""
        return insert_ignore(dialect, DigestRun.__table__).values(
            user_id=job.user_id,
            local_date=job.day,
            status=RunStatus.PENDING.value,
            due_at=job.due_at,
            late=False,
            deferred_notified=False,
            attempts=0,
            delivery_attempts=0,
            messages_sent=0,
            post_count=0,
            created_at=now,
            updated_at=now,
        )

    async def profile(self, user_id: int) -> UserProfile | None:
        """The user's profile, ``None`` for a user never seen."""
        async with self._sessions() as session:
            return await session.get(UserProfile, user_id)

    async def load(self, job: Job) -> LoadedRun:
        """The job's run (created ``pending`` if new; a pending or deferred run counts
        one more attempt), the user's profile, both detached, and whether this process
        may work on the run: it claimed it (or there are no claims). A run that another
        live process holds is returned unclaimed and unchanged (no attempt counted); so
        is a run that has ended (``sent``, ``empty``, ``failed_delivery``)."""
        now = self._clock.now()
        async with self._sessions() as session, session.begin():
            dialect = (await session.connection()).dialect.name
            await session.execute(self._new_run(dialect, job, now))
            mine = DigestRun.user_id == job.user_id, DigestRun.local_date == job.day
            values: dict[str, Any] = {
                "attempts": DigestRun.attempts
                + case((DigestRun.status.in_(_OPEN[:2]), 1), else_=0),
                "updated_at": now,
            }
            condition = [*mine, DigestRun.status.in_(_OPEN)]
            if self._claimant is not None:
                values.update(claimed_by=self._claimant.process_id, claimed_at=now)
                condition.append(self._claimant.may_take(DigestRun.claimed_by, now))
            claimed = await session.execute(
                update(DigestRun)
                .where(*condition)
                .values(**values)
                .execution_options(synchronize_session=False)
            )
            run = (await session.execute(select(DigestRun).where(*mine))).scalar_one()
            profile = await session.get(UserProfile, job.user_id)
            session.expunge_all()
            return LoadedRun(run, profile, claimed.rowcount == 1)  # type: ignore[attr-defined]

    async def release(self, run: DigestRun | None = None) -> int:
        """Let go of this process's claim on ``run`` (``None``: on every run it holds
        that has not ended — at shutdown, so another process need not wait for this
        one's heartbeat to go stale). Returns how many claims were let go."""
        if self._claimant is None:
            return 0
        condition = [DigestRun.claimed_by == self._claimant.process_id]
        if run is not None:
            condition.append(DigestRun.id == run.id)
        async with self._sessions() as session, session.begin():
            result = await session.execute(
                update(DigestRun)
                .where(*condition)
                .values(claimed_by=None, claimed_at=None)
                .execution_options(synchronize_session=False)
            )
            return int(result.rowcount)  # type: ignore[attr-defined]

    async def _own(self, session: AsyncSession, run: DigestRun) -> DigestRun:
        """The run's row, locked for this transaction's update, if this process still
        holds its claim (or there are no claims).

        Raises:
            ClaimLost: another process took the run over (this one's heartbeat went
                stale); this process must not move the run on.
        """
        stmt = select(DigestRun).where(DigestRun.id == run.id).with_for_update()
        row = (await session.execute(stmt)).scalar_one()
        if self._claimant is not None and row.claimed_by != self._claimant.process_id:
            raise ClaimLost(run.user_id, run.local_date, row.claimed_by)
        return row

    async def still_mine(self, run: DigestRun) -> None:
        """Check, just before a delivery, that this process still holds the run.

        Raises:
            ClaimLost: another process took it over.
        """
        async with self._sessions() as session, session.begin():
            await self._own(session, run)

    async def subscriptions(self, user_id: int) -> list[SubscriptionCursor]:
        """The user's subscriptions with their sources, in subscription order (detached)."""
        async with self._sessions() as session:
            rows = (
                await session.execute(
                    select(DigestSubscription, DigestSource)
                    .join(DigestSource, DigestSource.id == DigestSubscription.source_id)
                    .where(DigestSubscription.user_id == user_id)
                    .order_by(DigestSubscription.id)
                )
            ).all()
            subs = [
                SubscriptionCursor(s.id, s.last_post_id, s.last_digest_at, s.lost_notified, src)
                for s, src in rows
            ]
            session.expunge_all()
        return subs

    async def delivered(self, sub_id: int) -> set[int]:
        """Entry ids this feed subscription has delivered (the remembered window)."""
        async with self._sessions() as session:
            rows = await session.execute(
                select(DeliveredEntry.post_id).where(DeliveredEntry.subscription_id == sub_id)
            )
            return set(rows.scalars())

    async def _remember(
        self, session: AsyncSession, sub_id: int, seen_ids: Sequence[int], now: datetime
    ) -> None:
        """Record every entry now in the feed as delivered; prune beyond the window."""
        known = set(
            (
                await session.execute(
                    select(DeliveredEntry.post_id).where(DeliveredEntry.subscription_id == sub_id)
                )
            ).scalars()
        )
        fresh = list(dict.fromkeys(i for i in seen_ids if i not in known))
        if fresh:
            await session.execute(
                insert(DeliveredEntry),
                [{"subscription_id": sub_id, "post_id": i, "seen_at": now} for i in fresh],
            )
        still = [i for i in seen_ids if i in known]
        for start in range(0, len(still), _ID_BATCH):
            await session.execute(
                update(DeliveredEntry)
                .where(
                    DeliveredEntry.subscription_id == sub_id,
                    DeliveredEntry.post_id.in_(still[start : start + _ID_BATCH]),
                )
                .values(seen_at=now)
            )
        keep = max(self._config.delivered_min, _DELIVERED_FEED_FACTOR * len(seen_ids))
        total = (
            await session.execute(
                select(func.count())
                .select_from(DeliveredEntry)
                .where(DeliveredEntry.subscription_id == sub_id)
            )
        ).scalar_one()
        if total > keep:
            oldest = (
                select(DeliveredEntry.id)
                .where(DeliveredEntry.subscription_id == sub_id)
                .order_by(DeliveredEntry.seen_at, DeliveredEntry.id)
                .limit(total - keep)
            )
            await session.execute(
                delete(DeliveredEntry).where(DeliveredEntry.id.in_(oldest.scalar_subquery()))
            )

    async def source_lost(self, source_id: int) -> None:
        """Mark the source as having no public preview."""
        async with self._sessions() as session, session.begin():
            row = await session.get(DigestSource, source_id)
            if row is not None:
                row.preview_lost = True
                row.checked_at = self._clock.now()

    async def lost_notified(self, sub_id: int) -> None:
        """Record that the subscriber was told the source is lost."""
        async with self._sessions() as session, session.begin():
            sub = await session.get(DigestSubscription, sub_id)
            if sub is not None:
                sub.lost_notified = True

    async def source_back(self, sub_id: int, source_id: int) -> None:
        """The source has a preview again: clear the lost marks."""
        async with self._sessions() as session, session.begin():
            row = await session.get(DigestSource, source_id)
            if row is not None:
                row.preview_lost = False
            sub = await session.get(DigestSubscription, sub_id)
            if sub is not None:
                sub.lost_notified = False

    async def finish_empty(self, run: DigestRun, gathered: Sequence[Gathered]) -> None:
        """Nothing to send: the run ends ``empty`` and the cursors advance."""
        now = self._clock.now()
        async with self._sessions() as session, session.begin():
            row = await self._own(session, run)
            row.status = RunStatus.EMPTY.value
            row.claimed_by = None
            row.updated_at = now
            row.retry_not_before = None
            await self._advance_cursors(session, gathered, now)

    async def _advance_cursors(
        self, session: AsyncSession, gathered: Sequence[Gathered], now: datetime
    ) -> None:
        # sources in id order: two digests (two processes on PostgreSQL) that share
        # sources lock their rows in one order, so their transactions never deadlock
        for g in sorted(gathered, key=lambda g: g.source_id):
            sub = await session.get(DigestSubscription, g.sub_id)
            if sub is not None and g.kind is SourceKind.FEED:
                await self._remember(session, g.sub_id, g.seen_ids, now)
            if sub is not None:
                newest = g.newest_id
                if newest is not None and (sub.last_post_id is None or newest > sub.last_post_id):
                    sub.last_post_id = newest
                sub.last_digest_at = now
            source = await session.get(DigestSource, g.source_id)
            if source is not None:
                if g.title:
                    source.title = g.title[:256]
                if g.newest_id is not None:
                    source.last_seen_post_id = max(source.last_seen_post_id or 0, g.newest_id)
                source.checked_at = now

    async def store_ready(
        self,
        run: DigestRun,
        gathered: Sequence[Gathered],
        sections: Sequence[DigestSection],
        total: int,
    ) -> None:
        """Store the generated digest (``ready``) and advance the cursors in one
        transaction; ``run`` is updated to match."""
        now = self._clock.now()
        payload = sections_to_json(sections)
        async with self._sessions() as session, session.begin():
            row = await self._own(session, run)
            row.status = RunStatus.READY.value
            row.payload = payload
            row.post_count = total
            row.retry_not_before = None
            row.updated_at = now
            await self._advance_cursors(session, gathered, now)
        run.status = RunStatus.READY.value
        run.payload = payload

    async def defer(
        self, run: DigestRun, reason: RefusalReason, retry_at: datetime, now: datetime
    ) -> None:
        """The ledger refused at ``now``: ``deferred`` until ``retry_at``."""
        async with self._sessions() as session, session.begin():
            row = await self._own(session, run)
            row.status = RunStatus.DEFERRED.value
            row.claimed_by = None  # any process may retry it at retry_at
            row.retry_not_before = retry_at
            row.refusal_reason = reason.value
            row.updated_at = now

    async def deferred_notified(self, run: DigestRun) -> None:
        """Record that the user was told of the deferral (told once per run)."""
        async with self._sessions() as session, session.begin():
            row = await session.get(DigestRun, run.id)
            if row is not None:
                row.deferred_notified = True

    async def sent(self, run: DigestRun, now: datetime, *, late: bool) -> None:
        """The digest went out at ``now``: ``sent``."""
        async with self._sessions() as session, session.begin():
            row = await self._own(session, run)
            row.status = RunStatus.SENT.value
            row.claimed_by = None
            row.sent_at = now
            row.late = late
            row.retry_not_before = None
            row.updated_at = now

    async def set_status(self, run: DigestRun, status: RunStatus) -> None:
        """Set the run's status."""
        async with self._sessions() as session, session.begin():
            row = await self._own(session, run)
            row.status = status.value
            if status not in _OPEN:
                row.claimed_by = None
            row.updated_at = self._clock.now()

    async def delivery_retry(
        self,
        run: DigestRun,
        attempts: int,
        retry_after_s: float,
        *,
        messages_sent: int,
        give_up: bool,
    ) -> None:
        """A delivery met a flood wait: count the attempt (``attempts`` in all), keep how
        many of the digest's messages are delivered (``messages_sent``: the retry, in any
        process, sends the rest), retry not before ``retry_after_s`` seconds from now
        (``give_up``: the run ends ``failed_delivery``)."""
        now = self._clock.now()
        async with self._sessions() as session, session.begin():
            row = await self._own(session, run)
            row.delivery_attempts = attempts
            row.messages_sent = messages_sent
            row.retry_not_before = now + timedelta(seconds=retry_after_s)
            row.updated_at = now
            if give_up:
                row.status = RunStatus.FAILED_DELIVERY.value
                row.claimed_by = None

    async def mark_inactive(self, user_id: int) -> None:
        """The user blocked the bot: no more digests for them."""
        async with self._sessions() as session, session.begin():
            row = await session.get(UserProfile, user_id)
            if row is not None:
                row.active = False
