"""The summarise step of a digest: its sections, each post's summary from the summary
cache first, else one paced LLM request in the digest's one ledger operation.

:meth:`Summariser.write` turns a digest's gathered posts into its sections. The digest's
ledger operation (origin ``digest``, ``max_musd``, ``max_requests``) is opened only when
a post is not in the cache (:class:`DigestOperation`): a digest made entirely of cached
summaries costs nothing and touches no provider. A refusal that will pass (kill switch,
a limit, busy…) defers the whole digest (:class:`Deferred`); the operation's own cap
stops summarising and the rest of the posts go out as excerpts, as do posts no provider
could summarise.

A request is paced by :func:`scheduler.timing.decide` against the cascade's capacity
readings (wait for a free provider's reset rather than spill onto the paid anchor,
unless waiting would pass the deadline) and goes through one semaphore of
``llm_concurrency`` slots shared by every digest. A post is summarised once per
(content, language, prompt version): :class:`~scheduler.cache.SummaryCache` is a
single flight.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from budget.errors import HoldRefused
from budget.kernel.clock import Clock
from budget.protocol import OperationTicket
from budget.types import Origin, Refusal, RefusalReason
from llm.errors import AllProvidersFailed, EmptyCompletion, LLMError
from llm.sanitize import clean_prompt
from llm.types import LLMRequest, Message, Priority
from scheduler.cache import CacheKey, Made, SummaryCache, content_hash
from scheduler.claims import Claimant
from scheduler.job import DigestConfig, DigestOutcome, Gathered, Job, RunnerStats
from scheduler.timing import decide
from scheduler.types import (
    DigestItem,
    DigestSection,
    OperationPort,
    Post,
    ProgressStep,
    SourceKind,
    Step,
    SummaryBackend,
)

__all__ = ["Deferred", "DigestOperation", "Summariser", "Written"]

log = logging.getLogger("scheduler.runner")  # the runner's log lines keep their logger

#: Ledger refusals that pass with time (or an admin's word): the digest is deferred.
#: Any other refusal (the operation's own cap, a loop) ends summarising.
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

_LANGUAGE_NAMES = {
    "en": "English",
    "ru": "Russian",
    "zh": "Simplified Chinese",
    "pt": "Brazilian Portuguese",
    "es": "Spanish",
    "de": "German",
    "uk": "Ukrainian",
}


def _default_token_counter() -> Callable[[str], int]:
    """cl100k token count × 1.25 (other models' tokenizers differ; an upper bound)."""
    from budget.pricing.tokens import load_encoding  # loaded on first use, never at import

    encoding = load_encoding("cl100k_base")

    def count(text: str) -> int:
        return math.ceil(len(encoding.encode(text)) * 1.25)

    return count


class Deferred(Exception):
    """The ledger refused the digest for now: it is deferred (internal to the runner).

    Attributes:
        refusal: the ledger's refusal (its reason, level, window and reset time).
    """

    def __init__(self, refusal: Refusal) -> None:
        super().__init__(refusal.reason)
        self.refusal = refusal


class DigestOperation:
    """A digest's one ledger operation, opened on first use (once, whoever asks first).

    Args:
        ledger: the budget ledger.
        user_id: the digest's user.
        config: ``max_musd`` and ``max_requests`` (``None``: 2 × ``max_posts``).
    """

    __slots__ = ("_config", "_ledger", "_lock", "_user_id", "ticket")

    def __init__(self, ledger: OperationPort, user_id: int, config: DigestConfig) -> None:
        self._ledger = ledger
        self._user_id = user_id
        self._config = config
        self._lock = asyncio.Lock()
        #: the open operation, ``None`` until a post needed a request
        self.ticket: OperationTicket | None = None

    def __repr__(self) -> str:
        return f"DigestOperation(user_id={self._user_id}, open={self.ticket is not None})"

    async def __call__(self) -> OperationTicket:
        """The operation, opened now if it is not yet.

        Raises:
            Deferred: the ledger refused to open it.
        """
        async with self._lock:
            if self.ticket is None:
                try:
                    self.ticket = await self._ledger.begin_operation(
                        self._user_id,
                        Origin.DIGEST,
                        max_musd=self._config.max_musd,
                        max_requests=self._config.max_requests or 2 * self._config.max_posts,
                    )
                except HoldRefused as refused:
                    raise Deferred(refused.refusal) from refused
            return self.ticket

    async def end(self) -> None:
        """Free the operation's in-flight slot, if one was opened."""
        if self.ticket is not None:
            await self._ledger.end_operation(self.ticket)


@dataclass(slots=True)
class Written:
    """A digest's sections as :meth:`Summariser.write` made them.

    Attributes:
        sections: one per source with posts, in subscription order.
        not_summarised: posts shown as excerpts (no summary could be made).
        stopped: ``"operation_cap"`` when the operation's cap ended summarising, else
            ``None`` (posts not summarised then failed at the providers).
        done: posts written so far (summaries and excerpts).
    """

    sections: list[DigestSection] = field(default_factory=list)
    not_summarised: int = 0
    stopped: str | None = None
    done: int = 0


class Summariser:
    """Summaries of posts (see the module docstring).

    Args:
        clock: the one clock (wall time for the deadline, monotonic for pacing).
        session_factory: async sessions on the app's engine (the summary cache).
        ledger: the budget ledger (one operation per digest).
        backend: the cascade (``complete`` + ``capacity``).
        config: the runner's knobs.
        stats: the runner's counters (requests, paid calls, pacing waits, cache hits).
        count_tokens: ``str -> tokens`` for pacing estimates (default: cl100k × 1.25).
        claimant: this process's claims when several share the database (the cache's
            single flight then holds across them); ``None``: alone.
    """

    __slots__ = (
        "_backend",
        "_clock",
        "_config",
        "_count",
        "_ledger",
        "_llm_sem",
        "_stats",
        "cache",
    )

    def __init__(
        self,
        *,
        clock: Clock,
        session_factory: async_sessionmaker[AsyncSession],
        ledger: OperationPort,
        backend: SummaryBackend,
        config: DigestConfig,
        stats: RunnerStats,
        count_tokens: Callable[[str], int] | None = None,
        claimant: Claimant | None = None,
    ) -> None:
        self._clock = clock
        self._ledger = ledger
        self._backend = backend
        self._config = config
        self._stats = stats
        self._count = count_tokens
        self.cache = SummaryCache(
            session_factory,
            clock,
            claimant,
            lease_s=config.summary_lease_s,
            poll_s=config.summary_poll_s,
        )
        self._llm_sem = asyncio.Semaphore(config.llm_concurrency)

    def __repr__(self) -> str:
        return (
            f"Summariser(llm_calls={self._stats.llm_calls}, "
            f"cache_hits={self._stats.cache_hits}, slots={self._config.llm_concurrency})"
        )

    async def write(
        self,
        job: Job,
        language: str,
        gathered: Sequence[Gathered],
        kept: Sequence[Sequence[Post]],
        outcome: DigestOutcome,
    ) -> Written:
        """The digest's sections: each kept post summarised (or its excerpt), per source.

        Args:
            job: the digest (its user, due time and progress reports).
            language: the user's language code.
            gathered: each subscription's fetch, in subscription order.
            kept: the posts kept of each (the cap applied), in the same order.
            outcome: the run's result, counting requests and cache hits.

        Raises:
            Deferred: the ledger refused for now (the digest waits; nothing is stored).
        """
        deadline = job.due_at + timedelta(minutes=self._config.latest_delay_minutes)
        operation = DigestOperation(self._ledger, job.user_id, self._config)
        written = Written()
        total = sum(len(posts) for posts in kept)
        try:
            for source, posts in zip(gathered, kept, strict=True):
                items: list[DigestItem] = []
                for post in posts:
                    items.append(
                        await self._item(post, language, deadline, operation, outcome, written)
                    )
                    written.done += 1
                    await job.report(ProgressStep(Step.SUMMARISED, count=written.done, total=total))
                if items:
                    written.sections.append(_section(source, items))
        finally:
            await operation.end()
        return written

    async def _item(
        self,
        post: Post,
        language: str,
        deadline: datetime,
        operation: DigestOperation,
        outcome: DigestOutcome,
        written: Written,
    ) -> DigestItem:
        """One post's line: its summary, or its excerpt when none could be made.

        Raises:
            Deferred: the ledger refused for a reason that passes.
        """
        summary: str | None = None
        if written.stopped is None:
            try:
                summary = await self.summary(post, language, deadline, operation, outcome)
            except HoldRefused as refused:
                if refused.refusal.reason in _DEFER_REASONS:
                    raise Deferred(refused.refusal) from refused
                written.stopped = "operation_cap"  # operation cap or loop: deliver what we have
            except EmptyCompletion as exc:
                self._stats.empty_summaries += 1
                log.warning("digest.summary_empty post=%s: %s", post.link, exc)
            except LLMError as exc:
                log.warning("digest.summary_failed post=%s: %s", post.link, exc)
        if summary is None:
            written.not_summarised += 1
        return DigestItem(
            post.post_id,
            post.link,
            post.published,
            summary if summary is not None else post.text[: self._config.excerpt_chars],
            summarized=summary is not None,
            forwarded_from=post.forwarded_from,
            title=post.title,
        )

    async def summary(
        self,
        post: Post,
        language: str,
        deadline: datetime,
        operation: Callable[[], Awaitable[OperationTicket]],
        outcome: DigestOutcome,
    ) -> str:
        """The summary of ``post`` in ``language``: from the cache, from a request another
        digest has in flight, or from a new paced request in the operation that
        ``operation()`` opens on first use (counted in ``outcome`` and the stats).

        Args:
            post: the post.
            language: the user's language code.
            deadline: past this (UTC), a request may use the paid anchor.
            operation: opens (once) and returns the digest's ledger operation.
            outcome: the run's result, counting requests and cache hits.

        Raises:
            HoldRefused: the ledger refused the operation or a hold.
            LLMError: no provider answered (``EmptyCompletion``: the answer was empty).
        """
        key = CacheKey(
            post.source_key,
            post.post_id,
            content_hash(post.text),
            language,
            self._config.prompt_version,
        )

        async def make() -> Made:
            op = await operation()
            return await self._complete(op, post, language, deadline, key, outcome)

        served = await self.cache.get_or_make(key, make)
        if served.hit:
            outcome.cache_hits += 1
            self._stats.cache_hits += 1
        return served.summary

    def prompt(self, post: Post, language: str) -> tuple[Message, ...]:
        """The summary prompt for one post (its version is ``config.prompt_version``)."""
        name = _LANGUAGE_NAMES.get(language, "English")
        system = (
            f"You summarise one Telegram channel post for a daily digest. Write in {name}, "
            "plain text, at most three sentences, no preamble, keep names and numbers exact."
        )
        return (
            Message("system", system),
            Message("user", clean_prompt(post.text).strip()[: self._config.max_input_chars]),
        )

    def _tokens(self, messages: Sequence[Message]) -> int:
        if self._count is None:
            self._count = _default_token_counter()
        count = self._count
        return sum(count(m.content) + 4 for m in messages) + self._config.summary_max_tokens

    def _paid_shed(self, allow_paid: bool) -> bool:
        """The paid anchor is asked for while the bot sheds paid digests: wait."""
        allowed = self._config.paid_allowed
        return allow_paid and allowed is not None and not allowed()

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
                        share=self._config.max_free_share,
                        now_mono=self._clock.monotonic(),
                        seconds_to_deadline=(deadline - self._clock.now()).total_seconds(),
                        poll_s=self._config.pacing_poll_s,
                    )
                    if decision.send and not self._paid_shed(decision.allow_paid):
                        break
                    wait_s = decision.wait_s or self._config.pacing_poll_s
                    self._stats.pacing_waits += 1
                    self._stats.pacing_wait_s += wait_s
                    await self._clock.sleep(wait_s)
                request = LLMRequest(
                    messages=messages,
                    max_tokens=self._config.summary_max_tokens,
                    allow_paid=decision.allow_paid,
                    priority=Priority.DIGEST,
                    fingerprint=f"{base}:{attempt}",
                    free_share=self._config.max_free_share,
                    small=self._config.small_model,
                )
                try:
                    completion = await self._backend.complete(op, request)
                except AllProvidersFailed:
                    if attempt == 0 and not decision.allow_paid:
                        continue  # free tiers were busy after all: pace again, retry once
                    raise
            outcome.llm_calls += 1
            self._stats.llm_calls += 1
            if completion.paid:
                outcome.paid_calls += 1
                self._stats.paid_calls += 1
            return Made(completion.text.strip(), completion.provider, completion.model)
        raise AssertionError("unreachable")  # pragma: no cover


def _section(source: Gathered, items: list[DigestItem]) -> DigestSection:
    """The digest's part for one source (a channel links to its t.me page)."""
    link = f"https://t.me/{source.key}" if source.kind is SourceKind.CHANNEL else source.key
    return DigestSection(source.kind, source.key, source.title, link, tuple(items))
