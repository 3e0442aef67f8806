"""Delivery of a generated digest, once, with a per-chat retry after a flood wait.

The digest's sections are stored (``ready``) before the first attempt, so a retry sends
the same content and never asks a provider again. Telegram's 429 delays that chat only:
the runner schedules the retry (its own timer), other users go on; the run keeps its
retry time and how many of its messages are delivered, so after a restart any process
delivers the rest once the wait is over (``docs/decisions/031-digests-across-restarts.md``).
403 marks the user inactive and ends the run ``failed_delivery``.

A delivery under way is never cut: its sends and the write that records them (``sent``,
or the retry and the messages delivered) run in their own task, which a cancelled
caller does not cancel; at stop, :meth:`DigestDelivery.close` refuses new deliveries
and waits (bounded) for those under way, so a restart never sends a digest twice.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

from budget.kernel.clock import Clock
from scheduler.due import is_late
from scheduler.errors import DeliveryRetryAfter, RecipientGone
from scheduler.job import DigestConfig, DigestOutcome, Job, RunnerStats
from scheduler.run_store import RunStore
from scheduler.tables import DigestRun, RunStatus, UserProfile
from scheduler.types import Deliverer, DigestSection, Notice, NoticeKind, ProgressStep, Step

__all__ = ["DigestDelivery"]


class DigestDelivery:
    """Sends digests and notices through the bot's delivery port.

    Args:
        deliverer: the bot's delivery port.
        store: the digest tables.
        clock: the one clock (late or not, retry times).
        config: the runner's knobs (``late_after_s``, ``delivery_max_attempts``).
        stats: the runner's counters (sent, delivery retries).
        retry: ``(job, seconds)``: run ``job`` again after ``seconds`` (the runner's timer).
    """

    __slots__ = (
        "_clock",
        "_closing",
        "_config",
        "_deliverer",
        "_retry",
        "_sending",
        "_stats",
        "_store",
    )

    def __init__(
        self,
        *,
        deliverer: Deliverer,
        store: RunStore,
        clock: Clock,
        config: DigestConfig,
        stats: RunnerStats,
        retry: Callable[[Job, float], None],
    ) -> None:
        self._deliverer = deliverer
        self._store = store
        self._clock = clock
        self._config = config
        self._stats = stats
        self._retry = retry
        self._closing = False
        self._sending: set[asyncio.Task[DigestOutcome]] = set()

    def __repr__(self) -> str:
        return (
            f"DigestDelivery(sent={self._stats.digests_sent}, "
            f"retries={self._stats.delivery_retries})"
        )

    async def notify(self, profile: UserProfile, notice: Notice) -> bool:
        """Send a notice; True when delivered. 403 marks the user inactive."""
        try:
            await self._deliverer.notify(profile.user_id, profile.chat_id, profile.language, notice)
        except DeliveryRetryAfter:
            return False  # not told yet: the next attempt tries again
        except RecipientGone:
            await self._store.mark_inactive(profile.user_id)
            return False
        return True

    async def deliver(
        self,
        job: Job,
        run: DigestRun,
        profile: UserProfile,
        sections: Sequence[DigestSection],
        outcome: DigestOutcome,
        notices: Sequence[Notice] = (),
    ) -> DigestOutcome:
        """Send the digest (first attempt: the late notice and ``notices`` before it) and
        mark it ``sent``. A flood wait schedules another attempt (``ready``; after
        ``delivery_max_attempts``, ``failed_delivery``); a blocked bot marks the user
        inactive and ends the run ``failed_delivery``. Returns ``outcome``, updated.

        After :meth:`close` nothing is sent: the run stays ``ready`` for the next process.

        Raises:
            ClaimLost: another process took the run over; nothing was sent.
        """
        await self._store.still_mine(run)
        if self._closing:
            outcome.status = RunStatus.READY
            return outcome
        sending = asyncio.ensure_future(self._send(job, run, profile, sections, outcome, notices))
        self._sending.add(sending)
        sending.add_done_callback(self._sending.discard)
        return await asyncio.shield(sending)

    async def close(self, grace_s: float) -> None:
        """Start no delivery from now on, and wait up to ``grace_s`` seconds for those
        under way to end (each sent and recorded, or its retry recorded)."""
        self._closing = True
        if not self._sending:
            return
        done, _ = await asyncio.wait(set(self._sending), timeout=grace_s)
        for task in done:
            if not task.cancelled():
                task.exception()  # retrieved: the caller that awaited it may be gone

    async def _send(
        self,
        job: Job,
        run: DigestRun,
        profile: UserProfile,
        sections: Sequence[DigestSection],
        outcome: DigestOutcome,
        notices: Sequence[Notice],
    ) -> DigestOutcome:
        now = self._clock.now()
        late = is_late(now, run.due_at, self._config.late_after_s)
        try:
            if run.delivery_attempts == 0:
                if late:
                    await self._deliverer.notify(
                        profile.user_id,
                        profile.chat_id,
                        profile.language,
                        Notice(NoticeKind.LATE, local_date=job.day, due_at=run.due_at),
                    )
                for notice in notices:
                    await self._deliverer.notify(
                        profile.user_id, profile.chat_id, profile.language, notice
                    )
            await self._deliverer.send_digest(
                profile.user_id,
                profile.chat_id,
                profile.language,
                sections,
                skip_messages=run.messages_sent,
            )
        except DeliveryRetryAfter as exc:
            sent = max(exc.messages_sent, run.messages_sent)
            return await self._retry_later(job, run, exc.retry_after_s, sent, outcome)
        except RecipientGone:
            await self._store.mark_inactive(profile.user_id)
            await self._store.set_status(run, RunStatus.FAILED_DELIVERY)
            outcome.status = RunStatus.FAILED_DELIVERY
            await job.report(ProgressStep(Step.RECIPIENT_GONE))
            return outcome
        await self._store.sent(run, now, late=late)
        self._stats.digests_sent += 1
        outcome.status = RunStatus.SENT
        outcome.late = late
        await job.report(ProgressStep(Step.DELIVERED))
        return outcome

    async def _retry_later(
        self,
        job: Job,
        run: DigestRun,
        retry_after_s: float,
        messages_sent: int,
        outcome: DigestOutcome,
    ) -> DigestOutcome:
        attempts = run.delivery_attempts + 1
        give_up = attempts >= self._config.delivery_max_attempts
        await self._store.delivery_retry(
            run, attempts, retry_after_s, messages_sent=messages_sent, give_up=give_up
        )
        self._stats.delivery_retries += 1
        if give_up:
            outcome.status = RunStatus.FAILED_DELIVERY
            return outcome
        outcome.status = RunStatus.READY
        await job.report(ProgressStep(Step.DELIVERY_RETRY, retry_after_s=retry_after_s))
        # this chat waits; the worker goes on with other users
        self._retry(Job(job.user_id, job.day, job.due_at), retry_after_s)
        return outcome
