"""The daily digest runner: who is due, fetch, summarise (paced, cached), deliver once.

One APScheduler interval job (every minute; created in :meth:`DigestRunner.start`, never
at import) calls :meth:`DigestRunner.tick`, which finds the users whose digest is due
(:mod:`scheduler.due`) and queues them. A worker starts the queued digests one after
another, ``stagger_s`` seconds apart (start to start); their LLM requests go through one
semaphore of ``llm_concurrency`` slots shared by every digest, and each request is paced
by :func:`scheduler.timing.decide` against the cascade's capacity readings: wait for a
free provider's reset rather than spill onto the paid anchor, unless waiting would push
the digest past due time + ``latest_delay_minutes``.

One user's digest is one ledger operation (origin ``digest``, ``max_musd``,
``max_requests``), opened only when a post is not in the summary cache — a digest made
entirely of cached summaries costs nothing and touches no provider.

Guarantees:

* exactly one digest per (user, local date): the ``digest_runs`` row is unique on that
  pair and marked ``sent`` in the same transaction that records ``sent_at``;
* a ledger refusal defers the digest (``deferred``) until the refusing window's
  ``resets_at`` (a kill switch: re-checked every ``kill_recheck_s`` seconds, i.e. until
  the unkill); the user is told once; the (user, date) key is kept, so it goes out late,
  once;
* a feed entry is delivered once, in the first digest after it first appears in the
  feed, whatever its date says: entries are identified by id/guid, else link, else a
  hash of title + content, and each subscription remembers the entries it delivered
  (``digest_delivered``, the last max(4 × feed size, 200) seen), recorded in the same
  transaction as the generated digest. Dates only order and label entries; the one
  exception is a subscription's first digest, which leaves out (and remembers) entries
  dated before ``lookback_hours`` (or before the last digest, for subscriptions older
  than this memory);
* a digest is generated once: the generated sections are stored (``ready``) before
  delivery; Telegram's 429 delays that chat only (a per-chat timer, other users go on);
  403 marks the user inactive and ends that digest as ``failed_delivery``;
* several processes on one database (replicas; a ``claimant`` given): every process
  ticks, but a run is worked on only by the process that claimed it
  (:mod:`scheduler.claims`); a claim of a process whose heartbeat is older than
  PROCESS_DEAD_AFTER_SECONDS is taken over at the next tick and the run made again
  (the summaries it stored are reused; its holds are the ledger sweep's), and a process
  that finds its run taken over stops before moving it on or sending it. A summary is
  made once across processes (:class:`scheduler.cache.SummaryCache`). At stop a process
  lets go of the runs it holds.

Statuses: pending → (deferred ↺) → ready → sent | failed_delivery; or pending → empty.

This module holds the queue and one digest's course; each step lives beside it:

1. **due** — :mod:`scheduler.due` (who is due at an instant; pure), read at each tick;
2. **fetch** — :mod:`scheduler.gather` (each subscription's new posts, the cap);
3. **summarise** — :mod:`scheduler.summariser` (the sections: the summary cache, paced
   requests in the digest's one ledger operation, or a deferral);
4. **deliver** — :mod:`scheduler.delivery` (once, with its per-chat retry).

:mod:`scheduler.run_store` keeps the digest tables between the steps (``ready`` before
the first delivery) and :mod:`scheduler.job` the values they pass (knobs, counters,
outcomes).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any
from zoneinfo import ZoneInfo

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from budget.kernel.clock import Clock
from budget.types import Refusal, RefusalReason
from llm.types import Message
from scheduler.cache import SummaryCache
from scheduler.claims import Claimant
from scheduler.delivery import DigestDelivery
from scheduler.due import due_instant, due_jobs, local_date
from scheduler.gather import Gatherer, cap_posts
from scheduler.job import DigestConfig, DigestOutcome, Job, Progress, RunKey, RunnerStats
from scheduler.payload import sections_from_json
from scheduler.profiles import parse_digest_time
from scheduler.run_store import ClaimLost, RunStore
from scheduler.sources.fetch import SourceFetcher
from scheduler.summariser import Deferred, Summariser
from scheduler.tables import DigestRun, RunStatus, UserProfile
from scheduler.types import (
    Deliverer,
    Notice,
    NoticeKind,
    OperationPort,
    Post,
    ProgressStep,
    Step,
    SummaryBackend,
)

__all__ = [
    "DigestConfig",
    "DigestOutcome",
    "DigestRunner",
    "Progress",
    "RunnerStats",
    "cap_posts",
]

log = logging.getLogger(__name__)


class DigestRunner:
    """Runs daily digests. See the module docstring for the guarantees.

    Args:
        clock: the one clock (wall time for due/late/retry; monotonic for pacing).
        session_factory: async sessions on the app's engine.
        ledger: the budget ledger (one operation per digest).
        backend: the cascade (``complete`` + ``capacity``).
        deliverer: the bot's delivery port.
        fetcher: channel/feed reader.
        config: knobs.
        count_tokens: ``str -> tokens`` for pacing estimates (default: cl100k × 1.25).
        claimant: this process's id and dead-after time when other processes may share
            the database (each run and each summary is then claimed); ``None``: alone.
        recipient_allowed: ``user id -> bool``, whether that user may be sent a digest
            (the bot's access rules: allowed in a private chat, not banned); a user it
            refuses is not queued, and nothing is fetched, summarised or sent for them
            (decision 296). ``None``: everyone.
    """

    def __init__(
        self,
        *,
        clock: Clock,
        session_factory: async_sessionmaker[AsyncSession],
        ledger: OperationPort,
        backend: SummaryBackend,
        deliverer: Deliverer,
        fetcher: SourceFetcher,
        config: DigestConfig | None = None,
        count_tokens: Callable[[str], int] | None = None,
        claimant: Claimant | None = None,
        recipient_allowed: Callable[[int], Awaitable[bool]] | None = None,
    ) -> None:
        self._clock = clock
        self._recipient_allowed = recipient_allowed
        self._fetcher = fetcher
        self.config = config or DigestConfig()
        self.stats = RunnerStats()
        self._store = RunStore(session_factory, clock, self.config, claimant)
        self._summariser = Summariser(
            clock=clock,
            session_factory=session_factory,
            ledger=ledger,
            backend=backend,
            config=self.config,
            stats=self.stats,
            count_tokens=count_tokens,
            claimant=claimant,
        )
        self._delivery = DigestDelivery(
            deliverer=deliverer,
            store=self._store,
            clock=clock,
            config=self.config,
            stats=self.stats,
            retry=self._retry_later,
        )
        self._gatherer = Gatherer(
            fetcher=fetcher,
            store=self._store,
            clock=clock,
            config=self.config,
            stats=self.stats,
            notify=self._delivery.notify,
        )
        self._parallel = asyncio.Semaphore(self.config.max_parallel_digests)
        self._queue: asyncio.Queue[Job] = asyncio.Queue()
        self._queued: set[RunKey] = set()
        self._active: set[RunKey] = set()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._worker: asyncio.Task[None] | None = None
        self._scheduler: Any = None

    def __repr__(self) -> str:
        return (
            f"DigestRunner(queued={len(self._queued)}, active={len(self._active)}, "
            f"llm_calls={self.stats.llm_calls}, cache_hits={self.stats.cache_hits})"
        )

    @property
    def cache(self) -> SummaryCache:
        """The summary cache (single flight across digests)."""
        return self._summariser.cache

    def prompt(self, post: Post, language: str) -> tuple[Message, ...]:
        """The summary prompt for one post (its version is ``config.prompt_version``)."""
        return self._summariser.prompt(post, language)

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        """Start the once-a-minute job (APScheduler ``AsyncIOScheduler``) and run a tick now.

        The first tick at start sends digests missed while the bot was down (late, once).
        Summaries left pending by processes that died are forgotten first
        (:meth:`scheduler.cache.SummaryCache.prune`).
        """
        pruned = await self.cache.prune()
        if pruned:
            log.info("digest.pending_pruned count=%d", pruned)
        from apscheduler.schedulers.asyncio import AsyncIOScheduler
        from apscheduler.triggers.interval import IntervalTrigger

        scheduler = AsyncIOScheduler(timezone="UTC")
        scheduler.add_job(
            self.tick,
            IntervalTrigger(minutes=1, timezone="UTC"),
            id="digest-tick",
            max_instances=1,
            coalesce=True,
            misfire_grace_time=30,
        )
        scheduler.start()
        self._scheduler = scheduler
        await self.tick()

    async def stop(self, delivery_grace_s: float = 10.0) -> None:
        """Stop the job and the digests in progress: a delivery under way ends first
        (within ``delivery_grace_s`` seconds: a digest is never cut between its send and
        its record), the others are cancelled and resume at the next start, or at once
        on another process (the claims are let go)."""
        if self._scheduler is not None:
            self._scheduler.shutdown(wait=False)
            self._scheduler = None
        if self._worker is not None:
            self._worker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._worker
            self._worker = None
        await self._delivery.close(delivery_grace_s)
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        try:
            await self._store.release()
        except Exception:  # noqa: BLE001 - the claims free themselves when the heartbeat stops
            log.warning("digest.release_failed: other processes take the runs over later")

    @property
    def busy(self) -> bool:
        """True while digests are queued or running, or a delivery retry is pending."""
        return bool(self._queued or self._tasks)

    async def drain(self) -> None:
        """Wait until every queued digest and pending delivery retry has finished."""
        while self._queued or self._tasks:
            pending = list(self._tasks)
            if self._worker is not None and not self._worker.done() and self._queued:
                pending.append(self._worker)
            if not pending:
                await asyncio.sleep(0)
                continue
            await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)

    # ------------------------------------------------------------------ scheduling
    def _tz(self, profile: UserProfile) -> ZoneInfo:
        return ZoneInfo(profile.tz or self.config.default_tz)

    async def due_users(self) -> list[Job]:
        """The digests due now, one job per user and local date (the rules:
        :mod:`scheduler.due`); records the tick, after creating the runs of the
        catch-ups found, so the next process knows which due instants it saw."""
        now = self._clock.now()
        found = await self._store.due_candidates(now.date() - timedelta(days=2))
        due = due_jobs(
            now,
            found,
            default_tz=self.config.default_tz,
            catch_up_s=self.config.catch_up_hours * 3600,
        )
        jobs = [job for job in due.jobs if await self._may_receive(job.user_id)]
        opened = [job for job in due.opened if await self._may_receive(job.user_id)]
        await self._store.record_tick(now, opened)
        for job in opened:
            log.info(
                "digest.catch_up user=%s date=%s: due while no process ran", job.user_id, job.day
            )
        return jobs

    async def _may_receive(self, user_id: int) -> bool:
        """``user_id`` may be sent a digest now (``recipient_allowed``; decision 296)."""
        return self._recipient_allowed is None or await self._recipient_allowed(user_id)

    async def tick(self) -> int:
        """Queue every due digest not already queued or running; returns how many were queued."""
        queued = 0
        for job in await self.due_users():
            if job.key in self._queued or job.key in self._active:
                continue
            self._queued.add(job.key)
            self._queue.put_nowait(job)
            queued += 1
        if queued and (self._worker is None or self._worker.done()):
            self._worker = asyncio.create_task(self._work(), name="digest-worker")
        return queued

    async def _work(self) -> None:
        first = True
        while not self._queue.empty():
            job = self._queue.get_nowait()
            if not first and self.config.stagger_s > 0:
                await self._clock.sleep(self.config.stagger_s)
            first = False
            await self._parallel.acquire()
            self._spawn(self._run_job(job), release=True)

    def _spawn(self, coro: Awaitable[Any], *, release: bool = False) -> None:
        async def wrapped() -> None:
            try:
                await coro
            except Exception:
                log.exception("digest.task_failed")
            finally:
                if release:
                    self._parallel.release()

        task = asyncio.create_task(wrapped())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run_job(self, job: Job) -> DigestOutcome:
        try:
            return await self._run(job)
        finally:
            self._queued.discard(job.key)

    async def run_now(self, user_id: int, progress: Progress | None = None) -> DigestOutcome:
        """Run ``user_id``'s digest for their current local date at once (admin /digest_now).

        Ignores the digest time and the stagger; keeps every other guarantee (one digest
        per local date: if today's was sent already, nothing is sent and the step
        ``already_sent`` is reported; a user ``recipient_allowed`` refuses gets the step
        ``not_allowed`` and nothing else).

        Args:
            user_id: the user.
            progress: receives the steps listed at :data:`Progress`.
        """
        profile = await self._store.profile(user_id)
        now = self._clock.now()
        if profile is None:
            if progress is not None:
                await progress(ProgressStep(Step.NO_PROFILE))
            return DigestOutcome(user_id, now.date(), RunStatus.FAILED_DELIVERY)
        tz = self._tz(profile)
        day = local_date(now, tz)
        due_at = min(now, due_instant(day, parse_digest_time(profile.digest_time), tz))
        return await self._run(Job(user_id, day, due_at, progress))

    # ------------------------------------------------------------------ one digest
    async def _run(self, job: Job) -> DigestOutcome:
        if job.key in self._active:
            return DigestOutcome(job.user_id, job.day, RunStatus.PENDING)
        if not await self._may_receive(job.user_id):
            # not one fetch, summary or send for a user the bot does not serve (a stranger
            # who subscribed from an allowed group, a user denied or banned since)
            log.info("digest.not_allowed user=%s date=%s: nothing made", job.user_id, job.day)
            await job.report(ProgressStep(Step.NOT_ALLOWED))
            return DigestOutcome(job.user_id, job.day, RunStatus.PENDING)
        self._active.add(job.key)
        try:
            return await self._run_locked(job)
        finally:
            self._active.discard(job.key)

    async def _run_locked(self, job: Job) -> DigestOutcome:
        loaded = await self._store.load(job)
        run = loaded.run
        outcome = DigestOutcome(job.user_id, job.day, RunStatus(run.status), late=run.late)
        if outcome.status in (RunStatus.SENT, RunStatus.EMPTY, RunStatus.FAILED_DELIVERY):
            await job.report(ProgressStep(Step.ALREADY_SENT))
            return outcome
        if not loaded.claimed:
            await job.report(ProgressStep(Step.ELSEWHERE))
            return outcome
        try:
            return await self._claimed(job, run, loaded.profile, outcome)
        except ClaimLost as lost:
            log.warning(
                "digest.taken_over user=%s date=%s by=%s: this process stops it",
                job.user_id,
                job.day,
                lost.holder,
            )
            await job.report(ProgressStep(Step.ELSEWHERE))
            return outcome

    async def _claimed(
        self, job: Job, run: DigestRun, profile: UserProfile | None, outcome: DigestOutcome
    ) -> DigestOutcome:
        if profile is None:
            await job.report(ProgressStep(Step.NO_PROFILE))
            return outcome
        await job.report(ProgressStep(Step.STARTED))
        if outcome.status is RunStatus.READY and run.payload is not None:
            sections = sections_from_json(run.payload)
            return await self._delivery.deliver(job, run, profile, sections, outcome)
        try:
            return await self._generate(job, run, profile, outcome)
        except Deferred as deferred:
            return await self._defer(job, run, profile, deferred.refusal, outcome)

    async def _generate(
        self, job: Job, run: DigestRun, profile: UserProfile, outcome: DigestOutcome
    ) -> DigestOutcome:
        """Fetch, summarise, store (``ready``), deliver: one digest's course.

        Raises:
            Deferred: the ledger refused for now (nothing stored; the run waits).
            ClaimLost: another process took the run over.
        """
        gathered = await self._gatherer.gather(job, profile)
        kept = cap_posts([g.posts for g in gathered], self.config.max_posts)
        total = sum(len(posts) for posts in kept)
        await job.report(ProgressStep(Step.FETCHED, count=total))
        if total == 0:
            await self._store.finish_empty(run, gathered)
            outcome.status = RunStatus.EMPTY
            await job.report(ProgressStep(Step.EMPTY))
            return outcome
        written = await self._summariser.write(job, profile.language, gathered, kept, outcome)
        outcome.posts = total
        await self._store.store_ready(run, gathered, written.sections, total)
        notices: list[Notice] = []
        if written.not_summarised:
            cause = written.stopped or "providers"
            notices.append(
                Notice(NoticeKind.UNAVAILABLE, count=written.not_summarised, cause=cause)
            )
        return await self._delivery.deliver(job, run, profile, written.sections, outcome, notices)

    async def _defer(
        self,
        job: Job,
        run: DigestRun,
        profile: UserProfile,
        refusal: Refusal,
        outcome: DigestOutcome,
    ) -> DigestOutcome:
        now = self._clock.now()
        if refusal.resets_at is not None and refusal.resets_at > now:
            retry_at = refusal.resets_at
        elif refusal.reason is RefusalReason.KILL:
            retry_at = now + timedelta(seconds=self.config.kill_recheck_s)
        else:
            retry_at = now + timedelta(seconds=self.config.retry_fallback_s)
        notify = not run.deferred_notified
        await self._store.defer(run, refusal.reason, retry_at, now)
        self.stats.digests_deferred += 1
        log.info(
            "digest.deferred user=%s date=%s reason=%s until=%s",
            job.user_id,
            job.day,
            refusal.reason,
            retry_at.isoformat(),
        )
        if notify:
            notice = Notice(
                NoticeKind.DEFERRED,
                reason=refusal.reason,
                level=refusal.level,
                window=refusal.window,
                resets_at=refusal.resets_at,
                local_date=job.day,
            )
            if await self._delivery.notify(profile, notice):
                await self._store.deferred_notified(run)
        outcome.status = RunStatus.DEFERRED
        outcome.refusal = refusal
        await job.report(ProgressStep(Step.DEFERRED, reason=refusal.reason))
        return outcome

    def _retry_later(self, job: Job, retry_after_s: float) -> None:
        """Run ``job`` again after ``retry_after_s`` seconds (a delivery's flood wait);
        this chat waits, the worker goes on with other users."""

        async def retry() -> None:
            await self._clock.sleep(retry_after_s)
            await self._run(job)

        self._spawn(retry())
