"""Post summaries for digests: the summary cache first, else one paced LLM request.

A request is paced by :func:`scheduler.timing.decide` against the cascade's capacity
readings (wait for a free provider's reset rather than spill onto the paid anchor,
unless waiting would pass the deadline) and goes through one semaphore of
``llm_concurrency`` slots shared by every digest. A post is summarised once per
(content, language, prompt version): :class:`~scheduler.cache.SummaryCache` is a
single flight.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from budget.kernel.clock import Clock
from budget.protocol import OperationTicket
from llm.errors import AllProvidersFailed
from llm.sanitize import clean_prompt
from llm.types import LLMRequest, Message, Priority
from scheduler.cache import CacheKey, Made, SummaryCache, content_hash
from scheduler.claims import Claimant
from scheduler.job import DigestConfig, DigestOutcome, RunnerStats
from scheduler.timing import decide
from scheduler.types import Post, SummaryBackend

__all__ = ["Summariser"]

_LANGUAGE_NAMES = {"en": "English", "ru": "Russian"}


def _default_token_counter() -> Callable[[str], int]:
    """cl100k token count × 1.25 (other models' tokenizers differ; an upper bound)."""
    from budget.pricing.tokens import load_encoding  # loaded on first use, never at import

    encoding = load_encoding("cl100k_base")

    def count(text: str) -> int:
        return math.ceil(len(encoding.encode(text)) * 1.25)

    return count


class Summariser:
    """Summaries of posts (see the module docstring).

    Args:
        clock: the one clock (wall time for the deadline, monotonic for pacing).
        session_factory: async sessions on the app's engine (the summary cache).
        backend: the cascade (``complete`` + ``capacity``).
        config: the runner's knobs.
        stats: the runner's counters (requests, paid calls, pacing waits, cache hits).
        count_tokens: ``str -> tokens`` for pacing estimates (default: cl100k × 1.25).
        claimant: this process's claims when several share the database (the cache's
            single flight then holds across them); ``None``: alone.
    """

    __slots__ = ("_backend", "_clock", "_config", "_count", "_llm_sem", "_stats", "cache")

    def __init__(
        self,
        *,
        clock: Clock,
        session_factory: async_sessionmaker[AsyncSession],
        backend: SummaryBackend,
        config: DigestConfig,
        stats: RunnerStats,
        count_tokens: Callable[[str], int] | None = None,
        claimant: Claimant | None = None,
    ) -> None:
        self._clock = clock
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

        summary, hit = await self.cache.get_or_make(key, make)
        if hit:
            outcome.cache_hits += 1
            self._stats.cache_hits += 1
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
            Message("user", clean_prompt(post.text).strip()[: self._config.max_input_chars]),
        )

    def _tokens(self, messages: Sequence[Message]) -> int:
        if self._count is None:
            self._count = _default_token_counter()
        count = self._count
        return sum(count(m.content) + 4 for m in messages) + self._config.summary_max_tokens

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
                    if decision.send:
                        break
                    self._stats.pacing_waits += 1
                    self._stats.pacing_wait_s += decision.wait_s
                    await self._clock.sleep(decision.wait_s)
                request = LLMRequest(
                    messages=messages,
                    max_tokens=self._config.summary_max_tokens,
                    allow_paid=decision.allow_paid,
                    priority=Priority.DIGEST,
                    fingerprint=f"{base}:{attempt}",
                    free_share=self._config.max_free_share,
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
