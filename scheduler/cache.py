"""The cross-user summary cache: in the database, with single flight in the process.

A post summarised for one reader is never summarised again for another: the key is
(source, post id, content hash, language, prompt version), so an edited post, another
language or a new prompt gets its own entry, and a Russian summary is never served to an
English reader. Two digests that need the same key at the same moment share one request:
the first (the *leader*) makes it and pays for it; the others wait for its result. If
the leader fails, one waiting digest becomes the next leader and tries with its own
operation.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from budget.clock import Clock
from scheduler.models import SummaryCacheEntry

__all__ = ["CacheKey", "Made", "SummaryCache", "content_hash"]


def content_hash(text: str) -> str:
    """sha256 hex of the post text (64 characters)."""
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class CacheKey:
    """Identifies one summary."""

    source_key: str
    post_id: int
    content_hash: str
    language: str
    prompt_version: str


@dataclass(frozen=True, slots=True)
class Made:
    """A freshly made summary and who made it."""

    summary: str
    provider: str = ""
    model: str = ""


class SummaryCache:
    """Database-backed summaries with single flight.

    Args:
        session_factory: async sessions on the app's engine.
        clock: for ``created_at``.
    """

    __slots__ = ("_clock", "_inflight", "_sessions")

    def __init__(self, session_factory: async_sessionmaker[AsyncSession], clock: Clock) -> None:
        self._sessions = session_factory
        self._clock = clock
        self._inflight: dict[CacheKey, asyncio.Future[str | None]] = {}

    def __repr__(self) -> str:
        return f"SummaryCache(inflight={len(self._inflight)})"

    async def get(self, key: CacheKey) -> str | None:
        """The stored summary, or ``None``."""
        async with self._sessions() as session:
            return (
                await session.execute(
                    select(SummaryCacheEntry.summary).where(
                        SummaryCacheEntry.source_key == key.source_key,
                        SummaryCacheEntry.post_id == key.post_id,
                        SummaryCacheEntry.content_hash == key.content_hash,
                        SummaryCacheEntry.language == key.language,
                        SummaryCacheEntry.prompt_version == key.prompt_version,
                    )
                )
            ).scalar_one_or_none()

    async def put(self, key: CacheKey, made: Made) -> None:
        """Store a summary (a concurrent insert of the same key keeps the first)."""
        try:
            async with self._sessions() as session, session.begin():
                session.add(
                    SummaryCacheEntry(
                        source_key=key.source_key,
                        post_id=key.post_id,
                        content_hash=key.content_hash,
                        language=key.language,
                        prompt_version=key.prompt_version,
                        summary=made.summary,
                        provider=made.provider,
                        model=made.model,
                        created_at=self._clock.now(),
                    )
                )
        except IntegrityError:
            return

    async def get_or_make(
        self, key: CacheKey, make: Callable[[], Awaitable[Made]]
    ) -> tuple[str, bool]:
        """Return ``(summary, hit)``; ``hit`` is False only for the caller that made it.

        ``make`` is called at most once per key at a time across the process. Its
        exceptions propagate to its caller only; waiting callers then retry (one of
        them becomes the leader).

        A caller registers as leader *before* it reads the database: a leader's entry
        is committed before it leaves the in-flight table, so whoever registers after
        it finds the entry. (Reading first let a caller whose read was slow miss an
        entry committed meanwhile and make the summary a second time.)
        """
        while True:
            waiting = self._inflight.get(key)
            if waiting is not None:
                result = await asyncio.shield(waiting)
                if result is not None:
                    return result, True
                continue
            future: asyncio.Future[str | None] = asyncio.get_running_loop().create_future()
            self._inflight[key] = future
            try:
                stored = await self.get(key)
                if stored is not None:
                    future.set_result(stored)
                    return stored, True
                made = await make()
                await self.put(key, made)
            except BaseException:
                if not future.done():
                    future.set_result(None)
                raise
            else:
                future.set_result(made.summary)
                return made.summary, False
            finally:
                self._inflight.pop(key, None)
