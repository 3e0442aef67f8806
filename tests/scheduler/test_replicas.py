"""Two digest runners (two "replicas") on one database: each due run made and
sent by one of them, each post summarised once across both, a dead claimer's run taken
over after PROCESS_DEAD_AFTER_SECONDS, and the dead one sends nothing if it wakes up.

The runners have their own caches and in-process single flights, as two processes do;
what they share is the database (SQLite file or PostgreSQL, the ``sessions`` fixture)
and the heartbeats in ``budget_processes``, written here by hand on the injected clock
(the PostgreSQL ledger writes them in the bot).
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

from sqlalchemy import delete, insert, select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from budget.protocol import OperationTicket
from budget.storage.tables import processes
from budget.types import Usage
from llm.types import Completion, LLMRequest
from scheduler.cache import CacheKey, Made, Served, SummaryCache
from scheduler.claims import Claimant
from scheduler.profiles import ProfileRepository
from scheduler.runner import DigestConfig, DigestRunner
from scheduler.service import DigestService
from scheduler.tables import DigestRun, RunStatus, SummaryPending
from scheduler.types import ProgressStep, Step, SubscribeStatus
from tests.scheduler.scheduler_fakes import FakeBackend, FakeDeliverer, FakeFetcher, FakeLedger
from tests.support.clocks import ManualClock

Sessions = async_sessionmaker[AsyncSession]

DEAD_AFTER_S = 60.0


class GatedBackend(FakeBackend):
    """The fake cascade, whose answers wait until ``gate`` is set (a replica that hangs)."""

    def __init__(self, clock: ManualClock, requests: FakeBackend) -> None:
        super().__init__(clock)
        self.requests = requests.requests  # one count of provider requests for all
        self.gate = asyncio.Event()
        self.entered = asyncio.Event()

    async def complete(self, op: OperationTicket, request: LLMRequest) -> Completion:
        self.requests.append((op.user_id, request))
        self.entered.set()
        await self.gate.wait()
        return _answer(request.messages[-1].content)


def _answer(text: str) -> Completion:
    return Completion(
        text=f"summary of {text[:40]}",
        finish_reason="stop",
        provider="groq",
        model="m",
        usage=Usage(input_tokens=10, output_tokens=5),
        paid=False,
    )


class Replicas:
    """Two runners ("a" and "b") on one database, one fake Telegram, one fake cascade."""

    def __init__(self, sessions: Sessions, clock: ManualClock) -> None:
        self.sessions = sessions
        self.clock = clock
        self.ledger = FakeLedger()
        self.backend = FakeBackend(clock)
        self.deliverer = FakeDeliverer(clock)
        self.fetcher = FakeFetcher()
        self.profiles = ProfileRepository(sessions, clock)
        self.service = DigestService(sessions, clock, self.fetcher, self.profiles)
        self.config = DigestConfig(stagger_s=0, llm_concurrency=4, summary_poll_s=0.05)
        self.runners = {name: self.runner(name) for name in ("a", "b")}

    def runner(self, name: str, backend: FakeBackend | None = None) -> DigestRunner:
        return DigestRunner(
            clock=self.clock,
            session_factory=self.sessions,
            ledger=self.ledger,
            backend=backend or self.backend,
            deliverer=self.deliverer,
            fetcher=self.fetcher,
            config=self.config,
            count_tokens=lambda text: len(text) // 4 + 1,
            claimant=Claimant(f"proc-{name}", DEAD_AFTER_S),
        )

    async def beat(self, *names: str) -> None:
        """Heartbeats of these replicas at the clock's now (as the ledger writes them)."""
        t = self.clock.now().timestamp()
        async with self.sessions() as session, session.begin():
            ids = [f"proc-{n}" for n in names]
            await session.execute(delete(processes).where(processes.c.process_id.in_(ids)))
            await session.execute(
                insert(processes),
                [{"process_id": i, "started_at": t, "heartbeat_at": t} for i in ids],
            )

    async def user(self, user_id: int, *channels: str, at: str = "09:00") -> None:
        await self.profiles.get_or_create(user_id, user_id * 10, "en")
        await self.profiles.set_tz(user_id, "UTC")
        await self.profiles.set_digest_time(user_id, at)
        for channel in channels:
            result = await self.service.subscribe(user_id, f"@{channel}")
            assert result.status is SubscribeStatus.OK

    async def tick_both(self) -> None:
        """Both replicas' minute ticks at the same moment, then until both are idle."""
        a, b = self.runners["a"], self.runners["b"]
        await asyncio.gather(a.tick(), b.tick())
        await asyncio.gather(a.drain(), b.drain())

    async def runs(self) -> list[DigestRun]:
        async with self.sessions() as session:
            return list(
                (await session.execute(select(DigestRun).order_by(DigestRun.user_id))).scalars()
            )

    async def pending(self) -> int:
        async with self.sessions() as session:
            return len(list((await session.execute(select(SummaryPending))).scalars()))


def _sent_to(deliverer: FakeDeliverer) -> list[int]:
    return sorted(d.user_id for d in deliverer.sent)


async def test_two_users_due_at_once_on_two_replicas_each_sent_once_each_post_once(
    sessions: Sessions,
) -> None:
    """Two users subscribed to the same channel (3 posts) and each to one of their own
    (2 posts), both due at 09:00; both replicas tick at 09:00 at once: each digest is
    sent exactly once, each of the 7 posts is summarised once (7 provider requests),
    every run ends ``sent`` with no claim left, and no summary is left pending."""
    clock = ManualClock(datetime(2026, 3, 2, 9, 0, tzinfo=UTC))
    world = Replicas(sessions, clock)
    world.fetcher.add("shared", [1, 2, 3], clock.now())
    world.fetcher.add("own_1", [1, 2], clock.now())
    world.fetcher.add("own_2", [1, 2], clock.now())
    await world.user(1, "shared", "own_1")
    await world.user(2, "shared", "own_2")
    await world.beat("a", "b")
    await world.tick_both()
    assert _sent_to(world.deliverer) == [1, 2]
    assert len(world.backend.requests) == 7
    assert [(r.user_id, r.status, r.claimed_by) for r in await world.runs()] == [
        (1, RunStatus.SENT, None),
        (2, RunStatus.SENT, None),
    ]
    assert await world.pending() == 0
    clock.advance(120)
    await world.beat("a", "b")
    await world.tick_both()
    assert _sent_to(world.deliverer) == [1, 2], "nothing more that day"


async def test_the_same_posts_needed_by_both_replicas_at_the_same_moment_are_made_once(
    sessions: Sessions,
) -> None:
    """Replica a makes user 1's digest while replica b makes user 2's, both at once,
    both over the same 3 posts: 3 provider requests in all (without the shared pending
    rows each replica would make its own 3), and both digests carry the same summaries."""
    clock = ManualClock(datetime(2026, 3, 2, 8, 0, tzinfo=UTC))
    world = Replicas(sessions, clock)
    world.fetcher.add("shared", [1, 2, 3], clock.now())
    await world.user(1, "shared")
    await world.user(2, "shared")
    await world.beat("a", "b")
    steps: list[ProgressStep] = []

    async def progress(step: ProgressStep) -> None:
        steps.append(step)

    one, two = await asyncio.gather(
        world.runners["a"].run_now(1, progress), world.runners["b"].run_now(2, progress)
    )
    assert (one.status, two.status) == (RunStatus.SENT, RunStatus.SENT)
    assert len(world.backend.requests) == 3
    assert one.llm_calls + two.llm_calls == 3 and one.cache_hits + two.cache_hits == 3
    summaries = [[i.summary for s in d.parts for i in s.items] for d in world.deliverer.sent]
    assert len(summaries) == 2 and summaries[0] == summaries[1]
    again = await world.runners["b"].run_now(1, progress)
    assert again.status is RunStatus.SENT and steps[-1] == ProgressStep(Step.ALREADY_SENT)


async def test_a_dead_replicas_digest_is_taken_over_and_the_dead_one_sends_nothing(
    sessions: Sessions,
) -> None:
    """Replica a claims user 1's digest and hangs in its first provider request. While a
    beats, b leaves the run alone (its tick skips it; /digest_now says another process
    has it). a stops beating: PROCESS_DEAD_AFTER_SECONDS later b takes the run and the
    pending summary over and sends the digest. When a wakes up, its request's answer is
    stored nowhere new, and it neither stores its digest nor sends it (claim lost)."""
    clock = ManualClock(datetime(2026, 3, 2, 9, 0, tzinfo=UTC))
    world = Replicas(sessions, clock)
    hung = GatedBackend(clock, world.backend)
    world.runners["a"] = world.runner("a", hung)
    world.fetcher.add("shared", [1, 2, 3], clock.now())
    await world.user(1, "shared")
    await world.beat("a", "b")
    a, b = world.runners["a"], world.runners["b"]
    assert await a.tick() == 1
    await hung.entered.wait()
    (run,) = await world.runs()
    assert (run.status, run.claimed_by) == (RunStatus.PENDING, "proc-a")

    clock.advance(DEAD_AFTER_S / 2)
    await world.beat("a", "b")
    assert await b.tick() == 0, "a live replica's run is not queued"
    steps: list[ProgressStep] = []

    async def progress(step: ProgressStep) -> None:
        steps.append(step)

    outcome = await b.run_now(1, progress)
    assert outcome.status is RunStatus.PENDING and steps == [ProgressStep(Step.ELSEWHERE)]
    assert world.deliverer.sent == []

    clock.advance(DEAD_AFTER_S + 1)  # a is silent from now on
    await world.beat("b")
    assert await b.tick() == 1
    await b.drain()
    assert _sent_to(world.deliverer) == [1]
    # a's request for post 1 never reached the cache: b made it again; 2 and 3 once
    assert len(world.backend.requests) == 4
    (run,) = await world.runs()
    assert (run.status, run.claimed_by, run.attempts) == (RunStatus.SENT, None, 2)

    hung.gate.set()  # a wakes up
    await a.drain()
    assert _sent_to(world.deliverer) == [1], "the replica that lost its claim sent nothing"
    assert len(world.backend.requests) == 4, "posts 2 and 3 came from b's cache entries"
    assert await world.pending() == 0
    await a.stop()
    await b.stop()


async def test_a_replica_that_stops_lets_go_of_its_runs(sessions: Sessions) -> None:
    """A runner stopped in the middle of a digest (SIGTERM) lets go of its claim: the
    other replica takes the run at its next tick without waiting for the heartbeat to
    go stale."""
    clock = ManualClock(datetime(2026, 3, 2, 9, 0, tzinfo=UTC))
    world = Replicas(sessions, clock)
    hung = GatedBackend(clock, world.backend)
    world.runners["a"] = world.runner("a", hung)
    world.fetcher.add("shared", [1, 2], clock.now())
    await world.user(1, "shared")
    await world.beat("a", "b")
    a, b = world.runners["a"], world.runners["b"]
    await a.tick()
    await hung.entered.wait()
    await a.stop()
    (run,) = await world.runs()
    assert (run.status, run.claimed_by) == (RunStatus.PENDING, None)
    assert await b.tick() == 1
    await b.drain()
    assert _sent_to(world.deliverer) == [1]


async def test_a_failed_leader_hands_the_summary_to_a_waiting_replica(sessions: Sessions) -> None:
    """Two caches (two processes) want one key at once; the leader's request fails: its
    pending row is dropped at once and the waiting process makes the summary itself,
    without waiting for the lease (900 s) to run out."""
    clock = ManualClock(datetime(2026, 3, 2, 9, 0, tzinfo=UTC))
    world = Replicas(sessions, clock)
    await world.beat("a", "b")
    key = CacheKey("shared", 1, "0" * 64, "en", "v1")
    first = SummaryCache(sessions, clock, Claimant("proc-a", DEAD_AFTER_S), poll_s=0.05)
    second = SummaryCache(sessions, clock, Claimant("proc-b", DEAD_AFTER_S), poll_s=0.05)
    leading = asyncio.Event()
    fail = asyncio.Event()
    made: list[str] = []

    async def failing() -> Made:
        leading.set()
        await fail.wait()
        raise RuntimeError("provider down")

    async def working() -> Made:
        made.append("b")
        return Made("the summary", "groq", "m")

    doomed = asyncio.create_task(first.get_or_make(key, failing))
    await leading.wait()
    follower = asyncio.create_task(second.get_or_make(key, working))
    for _ in range(5):  # b polls while a leads
        await asyncio.sleep(0.01)
    assert made == []
    start = clock.now()
    fail.set()
    assert await follower == Served("the summary", hit=False)
    assert made == ["b"]
    assert (clock.now() - start).total_seconds() < 60
    try:
        await doomed
    except RuntimeError:
        pass
    else:
        raise AssertionError("the leader's failure reaches its caller")
    assert await world.pending() == 0


async def test_pending_summaries_of_dead_processes_are_pruned_and_live_ones_kept(
    sessions: Sessions,
) -> None:
    """A crash can leave a ``summary_pending`` row behind. ``prune`` (run at each
    runner start) deletes the rows of dead owners and run-out leases, and keeps a live
    process's row within its lease and this process's own."""
    clock = ManualClock(datetime(2026, 3, 2, 9, 0, tzinfo=UTC))
    world = Replicas(sessions, clock)
    await world.beat("a", "b")
    rows = [("dead", "proc-gone", 900), ("live", "proc-a", 900), ("expired", "proc-a", -1)]
    rows.append(("mine", "proc-b", 900))
    async with sessions() as session, session.begin():
        for name, owner, lease_s in rows:
            session.add(
                SummaryPending(
                    key_hash=name.ljust(64, "0"),
                    owner=owner,
                    expires_at=clock.now() + timedelta(seconds=lease_s),
                    created_at=clock.now(),
                )
            )
    cache = SummaryCache(sessions, clock, Claimant("proc-b", DEAD_AFTER_S))
    assert await cache.prune() == 2
    async with sessions() as session:
        kept = sorted((await session.execute(select(SummaryPending.key_hash))).scalars())
    assert [k.rstrip("0") for k in kept] == ["live", "mine"]
    assert await SummaryCache(sessions, clock).prune() == 0, "no claimant: nothing shared"
