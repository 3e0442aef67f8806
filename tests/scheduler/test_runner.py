"""DigestRunner with the injected clock: DST, downtime, deferral, cache, 403, 429, pacing."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from budget.types import Level, Refusal, RefusalReason, Window
from llm.types import Capacity
from scheduler.profiles import ProfileRepository
from scheduler.runner import DigestConfig, DigestRunner, cap_posts
from scheduler.service import DigestService
from scheduler.tables import DigestRun, RunStatus
from scheduler.types import NoticeKind, Post, ProgressStep, Step, SubscribeStatus
from tests.scheduler.scheduler_fakes import FakeBackend, FakeDeliverer, FakeFetcher, FakeLedger
from tests.support.clocks import ManualClock, VirtualClock

Sessions = async_sessionmaker[AsyncSession]


class World:
    """A runner wired to fakes, with helpers to add users."""

    def __init__(self, sessions: Sessions, clock: ManualClock, **config: object) -> None:
        self.sessions = sessions
        self.clock = clock
        self.ledger = FakeLedger()
        self.backend = FakeBackend(clock)
        self.deliverer = FakeDeliverer(clock)
        self.fetcher = FakeFetcher()
        self.profiles = ProfileRepository(sessions, clock)
        self.service = DigestService(sessions, clock, self.fetcher, self.profiles)
        self.config = DigestConfig(stagger_s=0, **config)  # type: ignore[arg-type]
        self.runner = self.new_runner()

    def new_runner(self) -> DigestRunner:
        return DigestRunner(
            clock=self.clock,
            session_factory=self.sessions,
            ledger=self.ledger,
            backend=self.backend,
            deliverer=self.deliverer,
            fetcher=self.fetcher,
            config=self.config,
            count_tokens=lambda text: len(text) // 4 + 1,
        )

    async def user(
        self, user_id: int, *channels: str, tz: str | None = None, at: str = "09:00"
    ) -> None:
        await self.profiles.get_or_create(user_id, user_id * 10, "en")
        if tz:
            await self.profiles.set_tz(user_id, tz)
        await self.profiles.set_digest_time(user_id, at)
        for channel in channels:
            result = await self.service.subscribe(user_id, f"@{channel}")
            assert result.status is SubscribeStatus.OK

    async def tick(self) -> None:
        await self.runner.tick()
        await self.runner.drain()

    async def runs(self) -> list[DigestRun]:
        async with self.sessions() as session:
            return list((await session.execute(select(DigestRun))).scalars())


async def _tick_every_minute(world: World, until: datetime) -> None:
    while world.clock.now() < until:
        await world.tick()
        world.clock.advance(60)


async def test_spring_forward_gap_sends_once_at_first_valid_minute(
    sessions: Sessions,
) -> None:
    """02:30 Europe/Berlin does not exist on 2026-03-29: one digest, at 03:00 CEST (01:00 UTC).
    Ticked minute by minute from 01:00 CET to 04:30 CEST (each tick is a database round:
    the hour before and the 90 minutes after the gap are what can go wrong)."""
    clock = ManualClock(datetime(2026, 3, 29, 0, 0, tzinfo=UTC))
    world = World(sessions, clock)
    world.fetcher.add("channel_a", [1, 2], clock.now())
    await world.user(1, "channel_a", tz="Europe/Berlin", at="02:30")
    await _tick_every_minute(world, datetime(2026, 3, 29, 2, 30, tzinfo=UTC))
    assert len(world.deliverer.sent) == 1
    assert world.deliverer.sent[0].at < datetime(2026, 3, 29, 1, 1, tzinfo=UTC)
    assert world.deliverer.sent[0].at >= datetime(2026, 3, 29, 1, 0, tzinfo=UTC)
    runs = await world.runs()
    assert [(r.local_date.isoformat(), r.status, r.late) for r in runs] == [
        ("2026-03-29", "sent", False)
    ]


async def test_fall_back_fold_sends_once(sessions: Sessions) -> None:
    """02:30 Europe/Berlin happens twice on 2026-10-25: exactly one digest, at the first.
    Ticked minute by minute from 02:00 CEST to 03:00 CET, past the second 02:30."""
    clock = ManualClock(datetime(2026, 10, 25, 0, 0, tzinfo=UTC))
    world = World(sessions, clock)
    world.fetcher.add("channel_a", [1, 2], clock.now())
    await world.user(1, "channel_a", tz="Europe/Berlin", at="02:30")
    await _tick_every_minute(world, datetime(2026, 10, 25, 2, 0, tzinfo=UTC))
    assert len(world.deliverer.sent) == 1
    first = world.deliverer.sent[0].at
    assert (
        datetime(2026, 10, 25, 0, 30, tzinfo=UTC)
        <= first
        < datetime(2026, 10, 25, 0, 31, tzinfo=UTC)
    )


async def test_missed_while_down_is_sent_once_on_start_marked_late(sessions: Sessions) -> None:
    """Digest time 09:00 UTC, bot starts at 11:00: sent at the first tick, late; never again."""
    clock = ManualClock(datetime(2026, 3, 2, 8, 0, tzinfo=UTC))
    world = World(sessions, clock)
    world.fetcher.add("channel_a", [1, 2, 3], clock.now())
    await world.user(1, "channel_a", tz="UTC", at="09:00")
    clock.set(datetime(2026, 3, 2, 11, 0, tzinfo=UTC))  # the bot was down until now
    await world.tick()
    await world.tick()
    clock.advance(3600)
    await world.tick()
    assert len(world.deliverer.sent) == 1
    assert [n.notice.kind for n in world.deliverer.notices if n.notice] == [NoticeKind.LATE]
    (run,) = await world.runs()
    assert run.status == RunStatus.SENT and run.late is True


async def test_deferred_digest_retried_only_after_window_resets(sessions: Sessions) -> None:
    """A user daily-limit refusal defers the digest until resets_at; the user is told once."""
    clock = ManualClock(datetime(2026, 3, 2, 9, 0, tzinfo=UTC))
    world = World(sessions, clock)
    world.fetcher.add("channel_a", [1, 2], clock.now())
    await world.user(1, "channel_a", tz="UTC", at="09:00")
    resets = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)
    world.ledger.refusal = Refusal(RefusalReason.LIMIT, Level.USER, Window.DAY, resets_at=resets)
    await world.tick()
    assert len(world.ledger.begun) == 1
    (run,) = await world.runs()
    assert run.status == RunStatus.DEFERRED and run.retry_not_before == resets
    await _tick_every_minute(world, resets - timedelta(minutes=1))
    assert len(world.ledger.begun) == 1, "no resubmission before the window resets"
    world.ledger.refusal = None
    await _tick_every_minute(world, resets + timedelta(minutes=5))
    assert len(world.ledger.begun) == 2
    assert len(world.deliverer.sent) == 1
    kinds = [n.notice.kind for n in world.deliverer.notices if n.notice]
    assert kinds == [NoticeKind.DEFERRED, NoticeKind.LATE]
    (run,) = await world.runs()
    assert run.status == RunStatus.SENT and run.late


async def test_kill_switch_defers_until_unkill_then_sends_once(sessions: Sessions) -> None:
    """A kill refusal (no reset time) is re-checked every kill_recheck_s; unkill → one digest."""
    clock = ManualClock(datetime(2026, 3, 2, 9, 0, tzinfo=UTC))
    world = World(sessions, clock, kill_recheck_s=600)
    world.fetcher.add("channel_a", [1], clock.now())
    await world.user(1, "channel_a", tz="UTC", at="09:00")
    world.ledger.refusal = Refusal(RefusalReason.KILL, Level.GLOBAL)
    await _tick_every_minute(world, clock.now() + timedelta(minutes=25))
    assert len(world.ledger.begun) == 3  # 09:00, 09:10, 09:20
    world.ledger.refusal = None
    await _tick_every_minute(world, clock.now() + timedelta(minutes=30))
    assert len(world.deliverer.sent) == 1
    assert sum(1 for n in world.deliverer.notices if n.notice and n.notice.kind == "deferred") == 1


async def test_two_users_same_channel_one_request_per_post(sessions: Sessions) -> None:
    """Both digests run at once: 3 posts → 3 LLM requests in total; the second user pays nothing."""
    clock = ManualClock(datetime(2026, 3, 2, 9, 0, tzinfo=UTC))
    world = World(sessions, clock, llm_concurrency=2)
    world.fetcher.add("channel_a", [1, 2, 3], clock.now())
    await world.user(1, "channel_a", tz="UTC", at="09:00")
    await world.user(2, "channel_a", tz="UTC", at="09:00")
    await world.tick()
    assert len(world.backend.requests) == 3
    assert len(world.deliverer.sent) == 2
    assert world.runner.stats.cache_hits == 3
    summaries = [[i.summary for s in d.parts for i in s.items] for d in world.deliverer.sent]
    assert summaries[0] == summaries[1]


async def test_restart_does_not_repeat_requests(sessions: Sessions) -> None:
    """The cache lives in the database: a new runner (restart) serves the next user from it."""
    clock = ManualClock(datetime(2026, 3, 2, 9, 0, tzinfo=UTC))
    world = World(sessions, clock)
    world.fetcher.add("channel_a", [1, 2], clock.now())
    await world.user(1, "channel_a", tz="UTC", at="09:00")
    await world.user(2, "channel_a", tz="UTC", at="10:00")
    await world.tick()
    assert len(world.backend.requests) == 2
    world.runner = world.new_runner()
    clock.set(datetime(2026, 3, 2, 10, 0, tzinfo=UTC))
    await world.tick()
    assert len(world.backend.requests) == 2
    assert len(world.deliverer.sent) == 2
    assert world.ledger.begun == [1], "a fully cached digest opens no operation"


async def test_403_marks_inactive_and_run_continues(sessions: Sessions) -> None:
    """User 1 blocked the bot: marked inactive, no more digests; user 2 still gets theirs."""
    clock = ManualClock(datetime(2026, 3, 2, 9, 0, tzinfo=UTC))
    world = World(sessions, clock)
    world.fetcher.add("channel_a", [1], clock.now())
    await world.user(1, "channel_a", tz="UTC", at="09:00")
    await world.user(2, "channel_a", tz="UTC", at="09:00")
    world.deliverer.fail[1] = ["gone"]
    await world.tick()
    assert [d.user_id for d in world.deliverer.sent] == [2]
    profile = await world.profiles.get(1)
    assert profile is not None and profile.active is False
    clock.advance(86400)
    world.fetcher.add("channel_a", [1, 2], clock.now())
    await world.tick()
    assert [d.user_id for d in world.deliverer.sent] == [2, 2]
    assert len(world.backend.requests) == 2, "nothing generated for the inactive user"


async def test_429_delays_only_that_chat_and_never_regenerates(sessions: Sessions) -> None:
    """retry_after 3 for user 1: user 2 is delivered at once; user 1 3 s later; same content."""
    # quiet for 50 ms before time moves: a SQLite commit on aiosqlite's thread can take
    # longer than the 5 ms default on a loaded machine (time then moved mid-delivery)
    clock = VirtualClock(datetime(2026, 3, 2, 9, 0, tzinfo=UTC), quiet_s=0.05)
    world = World(sessions, clock)  # type: ignore[arg-type]
    world.fetcher.add("channel_a", [1, 2], clock.now())
    await world.user(1, "channel_a", tz="UTC", at="09:00")
    await world.user(2, "channel_a", tz="UTC", at="09:00")
    world.deliverer.fail[1] = [3.0]
    start = clock.now()
    await world.runner.tick()
    await clock.run(lambda: len(world.deliverer.sent) == 2, limit_s=60)
    first_1 = next(a.at for a in world.deliverer.attempts if a.user_id == 1)
    assert [d.user_id for d in world.deliverer.sent] == [2, 1]
    sent_2, sent_1 = world.deliverer.sent
    assert sent_2.at - start < timedelta(seconds=3), "user 2 was not held up by user 1's 429"
    assert sent_1.at - first_1 == timedelta(seconds=3)
    assert len(world.backend.requests) == 2, "delivery retry did not regenerate"
    assert sent_2.parts == sent_1.parts
    await world.runner.drain()


async def test_pacing_waits_for_free_reset_instead_of_paid(sessions: Sessions) -> None:
    """Free tokens exhausted until a reset 30 s away: the runner waits; no paid request."""
    clock = ManualClock(datetime(2026, 3, 2, 9, 0, tzinfo=UTC))
    world = World(sessions, clock)
    world.fetcher.add("channel_a", [1], clock.now())
    await world.user(1, "channel_a", tz="UTC", at="09:00")
    reset = clock.monotonic() + 30
    world.backend.capacities = [
        Capacity("groq", True, 10, reset, False),
        Capacity("deepseek", True, None, None, True),
    ]
    await world.tick()
    ((_, request),) = world.backend.requests
    assert request.allow_paid is False
    assert world.runner.stats.pacing_wait_s >= 30 - 1e-6
    assert world.runner.stats.paid_calls == 0


async def test_pacing_allows_paid_past_latest_delay(sessions: Sessions) -> None:
    """When the free reset is beyond due time + latest delay, the request may use the anchor."""
    clock = ManualClock(datetime(2026, 3, 2, 9, 0, tzinfo=UTC))
    world = World(sessions, clock, latest_delay_minutes=1)
    world.fetcher.add("channel_a", [1], clock.now())
    await world.user(1, "channel_a", tz="UTC", at="09:00")
    world.backend.capacities = [
        Capacity("groq", True, 10, clock.monotonic() + 3600, False),
        Capacity("deepseek", True, None, None, True),
    ]
    await world.tick()
    ((_, request),) = world.backend.requests
    assert request.allow_paid is True
    assert world.runner.stats.paid_calls == 1


async def test_a_paid_digest_waits_while_paid_digests_are_shed(sessions: Sessions) -> None:
    """Past the latest delay the digest would use the anchor, but paid digests are shed
    (the bot's SHED_ORDER): it waits, pacing_poll_s at a time, without a request, and
    is made once the step lifts."""
    clock = ManualClock(datetime(2026, 3, 2, 9, 0, tzinfo=UTC))
    looks: list[bool] = []

    def paid_allowed() -> bool:
        looks.append(len(looks) >= 3)  # shed for three looks, then lifted
        return looks[-1]

    world = World(sessions, clock, latest_delay_minutes=1, paid_allowed=paid_allowed)
    world.fetcher.add("channel_a", [1], clock.now())
    await world.user(1, "channel_a", tz="UTC", at="09:00")
    world.backend.capacities = [
        Capacity("groq", True, 10, clock.monotonic() + 3600, False),
        Capacity("deepseek", True, None, None, True),
    ]
    await world.tick()
    ((_, request),) = world.backend.requests
    assert looks == [False, False, False, True]
    assert world.runner.stats.pacing_waits == 3
    assert world.runner.stats.pacing_wait_s == 3 * world.config.pacing_poll_s
    assert request.allow_paid is True and world.runner.stats.paid_calls == 1


async def test_lost_channel_reported_once_not_an_empty_digest(sessions: Sessions) -> None:
    """A channel that loses its preview: one channel_lost notice, no empty digest, once."""
    clock = ManualClock(datetime(2026, 3, 2, 9, 0, tzinfo=UTC))
    world = World(sessions, clock)
    world.fetcher.add("channel_a", [1], clock.now())
    await world.user(1, "channel_a", tz="UTC", at="09:00")
    world.fetcher.lost.add("channel_a")
    await world.tick()
    clock.advance(86400)
    await world.tick()
    assert world.deliverer.sent == []
    kinds = [n.notice.kind for n in world.deliverer.notices if n.notice]
    assert kinds == [NoticeKind.CHANNEL_LOST]


async def test_run_now_reports_progress_and_is_once_per_day(sessions: Sessions) -> None:
    """/digest_now before the digest time runs it at once; a second call sends nothing."""
    clock = ManualClock(datetime(2026, 3, 2, 6, 0, tzinfo=UTC))
    world = World(sessions, clock)
    world.fetcher.add("channel_a", [1, 2], clock.now())
    await world.user(1, "channel_a", tz="UTC", at="09:00")
    steps: list[ProgressStep] = []

    async def progress(step: ProgressStep) -> None:
        steps.append(step)

    outcome = await world.runner.run_now(1, progress)
    assert outcome.status is RunStatus.SENT and outcome.llm_calls == 2
    assert steps == [
        ProgressStep(Step.STARTED),
        ProgressStep(Step.FETCHED, count=2),
        ProgressStep(Step.SUMMARISED, count=1, total=2),
        ProgressStep(Step.SUMMARISED, count=2, total=2),
        ProgressStep(Step.DELIVERED),
    ]
    again = await world.runner.run_now(1, progress)
    assert again.status is RunStatus.SENT and steps[-1] == ProgressStep(Step.ALREADY_SENT)
    clock.set(datetime(2026, 3, 2, 9, 5, tzinfo=UTC))
    await world.tick()
    assert len(world.deliverer.sent) == 1


async def test_free_busy_after_all_retries_once_after_pacing(sessions: Sessions) -> None:
    """AllProvidersFailed on a free-only request: re-paced, retried once, new fingerprint."""
    clock = ManualClock(datetime(2026, 3, 2, 9, 0, tzinfo=UTC))
    world = World(sessions, clock)
    world.fetcher.add("channel_a", [1], clock.now())
    await world.user(1, "channel_a", tz="UTC", at="09:00")
    world.backend.fail_free = 1
    await world.tick()
    fingerprints = [r.fingerprint for _, r in world.backend.requests]
    assert len(fingerprints) == 2 and fingerprints[0] != fingerprints[1]
    assert world.deliverer.sent[0].parts[0].items[0].summarized


def test_cap_posts_keeps_newest_per_channel_round_robin() -> None:
    """Over the cap, each channel keeps its newest posts, shared fairly, oldest first."""
    at = datetime(2026, 1, 1, tzinfo=UTC)
    a = [Post("a", i, at, "t", "l") for i in range(1, 6)]
    b = [Post("b", i, at, "t", "l") for i in range(1, 3)]
    kept = cap_posts([a, b], 5)
    assert [[p.post_id for p in k] for k in kept] == [[3, 4, 5], [1, 2]]
