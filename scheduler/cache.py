"""The cross-user summary cache: in the database, with single flight in the process and
across processes.

A post summarised for one reader is never summarised again for another: the key is
(source, post id, content hash, language, prompt version), so an edited post, another
language or a new prompt gets its own entry, and a Russian summary is never served to an
English reader. Two digests that need the same key at the same moment share one request:
the first (the *leader*) makes it and pays for it; the others wait for its result. If
the leader fails, one waiting digest becomes the next leader and tries with its own
operation.

Across processes (several replicas on one PostgreSQL database) the leader is whoever
inserts the key's ``summary_pending`` row (``INSERT … ON CONFLICT DO NOTHING``); it
stores the entry and deletes that row in one transaction, or deletes the row when the
making fails. The others poll for the entry every ``poll_s`` seconds and take the row
over when its owner is dead (no heartbeat for ``dead_after_s``, :mod:`scheduler.claims`)
or its lease (``lease_s`` from the claim) has run out — a leader that lives longer
than its lease may see its summary made a second time, never lost.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy import and_, delete, or_, select, update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from sqlalchemy.sql.dml import Delete

from budget.kernel.clock import Clock
from scheduler.claims import Claimant, insert_ignore
from scheduler.tables import SummaryCacheEntry, SummaryPending

__all__ = ["CacheKey", "Made", "Served", "SummaryCache", "content_hash", "key_hash"]

log = logging.getLogger(__name__)


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


def key_hash(key: CacheKey) -> str:
    """sha256 hex of the whole key (64 characters): the ``summary_pending`` row's id."""
    parts = (key.source_key, str(key.post_id), key.content_hash, key.language)
    return hashlib.sha256("\x00".join((*parts, key.prompt_version)).encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class Made:
    """A freshly made summary and who made it."""

    summary: str
    provider: str = ""
    model: str = ""


@dataclass(frozen=True, slots=True)
class Served:
    """A summary as :meth:`SummaryCache.get_or_make` hands it out.

    Attributes:
        summary: the summary text.
        hit: False only for the caller whose ``make`` made it (the one that paid).
    """

    summary: str
    hit: bool


class SummaryCache:
    """Database-backed summaries with single flight (see the module docstring).

    Args:
        session_factory: async sessions on the app's engine.
        clock: for ``created_at``, leases and polling.
        claimant: this process's id and the dead-after time; ``None``: this process is
            the only one (no ``summary_pending`` rows).
        lease_s: seconds a leader's pending row keeps others from taking it over while
            its owner is alive.
        poll_s: seconds between a waiting process's looks for the leader's entry.
    """

    __slots__ = ("_claimant", "_clock", "_inflight", "_lease", "_poll_s", "_sessions")

    def __init__(
        self,
        session_factory: async_sessionmaker[AsyncSession],
        clock: Clock,
        claimant: Claimant | None = None,
        *,
        lease_s: float = 900.0,
        poll_s: float = 1.0,
    ) -> None:
        self._sessions = session_factory
        self._clock = clock
        self._claimant = claimant
        self._lease = timedelta(seconds=lease_s)
        self._poll_s = poll_s
        self._inflight: dict[CacheKey, asyncio.Future[str | None]] = {}

    def __repr__(self) -> str:
        return f"SummaryCache(inflight={len(self._inflight)}, shared={self._claimant is not None})"

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
        """Store a summary (a concurrent insert of the same key keeps the first) and, in
        the same transaction, drop this process's pending row of the key."""
        async with self._sessions() as session, session.begin():
            dialect = (await session.connection()).dialect.name
            await session.execute(
                insert_ignore(dialect, SummaryCacheEntry.__table__).values(
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
            if self._claimant is not None:
                await session.execute(self._drop(key))

    def _drop(self, key: CacheKey) -> Delete:
        assert self._claimant is not None
        return delete(SummaryPending).where(
            SummaryPending.key_hash == key_hash(key),
            SummaryPending.owner == self._claimant.process_id,
        )

    async def _lead(self, key: CacheKey) -> bool:
        """Take the key's pending row (new, ours, dead owner or lease run out): True when
        this process is now the one to make the summary."""
        claimant = self._claimant
        assert claimant is not None
        now = self._clock.now()
        row = {
            "owner": claimant.process_id,
            "expires_at": now + self._lease,
            "created_at": now,
        }
        async with self._sessions() as session, session.begin():
            dialect = (await session.connection()).dialect.name
            inserted = await session.execute(
                insert_ignore(dialect, SummaryPending.__table__).values(
                    key_hash=key_hash(key), **row
                )
            )
            if inserted.rowcount == 1:  # type: ignore[attr-defined]
                return True
            taken = await session.execute(
                update(SummaryPending)
                .where(
                    SummaryPending.key_hash == key_hash(key),
                    or_(
                        claimant.may_take(SummaryPending.owner, now),
                        SummaryPending.expires_at <= now,
                    ),
                )
                .values(**row)
                .execution_options(synchronize_session=False)
            )
            return bool(taken.rowcount == 1)  # type: ignore[attr-defined]

    async def prune(self) -> int:
        """Delete the pending rows nobody will finish — their owner is dead or their
        lease ran out (left by a process that crashed while making a summary); the next
        process that needs such a key makes it. Returns how many were deleted."""
        claimant = self._claimant
        if claimant is None:
            return 0
        now = self._clock.now()
        async with self._sessions() as session, session.begin():
            gone = await session.execute(
                delete(SummaryPending)
                .where(
                    or_(
                        SummaryPending.expires_at <= now,
                        and_(
                            SummaryPending.owner != claimant.process_id,
                            claimant.may_take(SummaryPending.owner, now),
                        ),
                    )
                )
                .execution_options(synchronize_session=False)
            )
            return int(gone.rowcount)  # type: ignore[attr-defined]

    async def _unlead(self, key: CacheKey) -> None:
        async with self._sessions() as session, session.begin():
            await session.execute(self._drop(key))

    async def _shared(self, key: CacheKey, make: Callable[[], Awaitable[Made]]) -> Served:
        """One process's turn at ``key`` (the in-process single flight is already ours)."""
        while True:
            stored = await self.get(key)
            if stored is not None:
                return Served(stored, hit=True)
            if self._claimant is None:
                break
            if await self._lead(key):
                # the last leader stores its entry and drops its row in one transaction:
                # holding the row now, a second look is certain
                stored = await self.get(key)
                if stored is None:
                    break
                await self._unlead(key)
                return Served(stored, hit=True)
            await self._clock.sleep(self._poll_s)
        try:
            made = await make()
        except BaseException:
            if self._claimant is not None:
                try:
                    await self._unlead(key)  # the next waiter leads now, not at the lease's end
                except Exception:  # noqa: BLE001 - the lease and liveness still free the row
                    log.warning("summary_cache.unlead_failed key=%s", key_hash(key)[:16])
            raise
        await self.put(key, made)
        return Served(made.summary, hit=False)

    async def get_or_make(self, key: CacheKey, make: Callable[[], Awaitable[Made]]) -> Served:
        """The summary of ``key``; its ``hit`` is False only for the caller that made it.

        ``make`` is called at most once per key at a time across the process and, with
        a claimant, across the processes sharing the database. Its exceptions propagate
        to its caller only; waiting callers then retry (one of them becomes the leader).

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
                    return Served(result, hit=True)
                continue
            future: asyncio.Future[str | None] = asyncio.get_running_loop().create_future()
            self._inflight[key] = future
            try:
                served = await self._shared(key, make)
            except BaseException:
                if not future.done():
                    future.set_result(None)
                raise
            else:
                future.set_result(served.summary)
                return served
            finally:
                self._inflight.pop(key, None)
