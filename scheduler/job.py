"""The values a digest run passes around: the runner's knobs (:class:`DigestConfig`), its
counters (:class:`RunnerStats`), one run's result (:class:`DigestOutcome`), a run's key
(:class:`RunKey`), a queued run (:class:`Job`), one subscription's fetched posts
(:class:`Gathered`), and what :mod:`scheduler.run_store` reads for them
(:class:`DueCandidates`, :class:`LoadedRun`, :class:`SubscriptionCursor`).

Shared by :mod:`scheduler.runner` (queue and one digest), :mod:`scheduler.summariser`,
:mod:`scheduler.run_store` and :mod:`scheduler.delivery`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import date, datetime

from budget.types import Refusal
from scheduler.tables import DigestRun, DigestSource, RunStatus, UserProfile
from scheduler.types import Post, ProgressStep, SourceKind

__all__ = [
    "DigestConfig",
    "DigestOutcome",
    "DueCandidates",
    "Gathered",
    "Job",
    "LoadedRun",
    "Progress",
    "RunKey",
    "RunnerStats",
    "SubscriptionCursor",
]

#: ``async (step) -> None``: receives each :class:`~scheduler.types.ProgressStep` of a run.
Progress = Callable[[ProgressStep], Awaitable[None]]


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
        catch_up_hours: the previous local date's digest still goes out (late) when
            its due instant is at most this many hours ago and it was missed (the bot
            was down then, or it was deferred past midnight); 0: never
            (``docs/decisions/031-digests-across-restarts.md``).
        pacing_poll_s: re-check interval when no free provider reports a reset time.
        delivery_max_attempts: 429s tolerated for one digest before ``failed_delivery``.
        max_input_chars: a post's text is cut to this many characters in the prompt.
        excerpt_chars: length of the excerpt shown when no summary could be made.
        delivered_min: feed entry ids remembered per subscription at least (the memory
            also always holds 4 × the feed's current size).
        summary_lease_s: seconds another process waits for a live process's summary
            before making it itself (:class:`scheduler.cache.SummaryCache`).
        summary_poll_s: seconds between a waiting process's looks for that summary.
        paid_allowed: ``False`` while the paid anchor may not serve digests (the bot's
            shedding of ``paid_digests``): a request that would need it waits
            ``pacing_poll_s`` and decides again (``None``: always allowed).
        small_model: post summaries go to each provider's small model (the router's
            rule for simple work, ``llm.router``; ``CHAT_ROUTER=off``: the main ones).
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
    catch_up_hours: float = 6.0
    pacing_poll_s: float = 5.0
    paid_allowed: Callable[[], bool] | None = None
    delivery_max_attempts: int = 8
    max_input_chars: int = 4000
    small_model: bool = True
    excerpt_chars: int = 300
    delivered_min: int = 200
    summary_lease_s: float = 900.0
    summary_poll_s: float = 1.0


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
class Gathered:
    """One subscription's fetched posts for a digest (and what the cursors advance to)."""

    sub_id: int
    source_id: int
    kind: SourceKind
    key: str
    title: str
    posts: list[Post]
    newest_id: int | None
    seen_ids: tuple[int, ...] = ()  # feeds: every entry id in the feed now


@dataclass(frozen=True, slots=True)
class RunKey:
    """What identifies one digest run (``digest_runs`` is unique on it): a user and a
    local date in their zone."""

    user_id: int
    local_date: date


@dataclass(slots=True)
class Job:
    """One digest to run: a user's (local date) digest, due at ``due_at`` (UTC)."""

    user_id: int
    day: date
    due_at: datetime
    progress: Progress | None = None
    done: asyncio.Future[DigestOutcome] | None = field(default=None)

    @property
    def key(self) -> RunKey:
        """The run this job works on."""
        return RunKey(self.user_id, self.day)

    async def report(self, step: ProgressStep) -> None:
        """Pass ``step`` to the run's progress callback, if any (admin /digest_now)."""
        if self.progress is not None:
            await self.progress(step)


@dataclass(frozen=True, slots=True)
class SubscriptionCursor:
    """One subscription of a user, as a digest reads it (detached from its session).

    Attributes:
        sub_id: the ``digest_subscriptions`` id.
        last_post_id: a channel's cursor: the newest post delivered (``None``: none yet).
        last_digest_at: aware UTC time of the subscription's last digest, or ``None``.
        lost_notified: the subscriber was told the channel lost its public preview.
        source: the channel or feed it reads.
    """

    sub_id: int
    last_post_id: int | None
    last_digest_at: datetime | None
    lost_notified: bool
    source: DigestSource


@dataclass(frozen=True, slots=True)
class DueCandidates:
    """What a tick decides from (:meth:`RunStore.due_candidates`; rows detached).

    Attributes:
        profiles: active users with digests on and at least one subscription.
        runs: the runs of the local dates looked at, by key.
        ready: the ``ready`` runs of active users, of any date, whose delivery may be
            tried now (no ``retry_not_before`` in the future).
        held: keys of those runs that a live other process holds (empty without claims).
        last_tick: when a process last looked for due digests (``None``: never).
    """

    profiles: list[UserProfile]
    runs: dict[RunKey, DigestRun]
    ready: list[DigestRun]
    held: frozenset[RunKey]
    last_tick: datetime | None


@dataclass(frozen=True, slots=True)
class LoadedRun:
    """A job's run as :meth:`RunStore.load` found it (rows detached).

    Attributes:
        run: the run (created ``pending`` if it was new).
        profile: the user's profile, ``None`` for a user never seen.
        claimed: this process may work on the run (it claimed it, or there are no claims).
    """

    run: DigestRun
    profile: UserProfile | None
    claimed: bool
