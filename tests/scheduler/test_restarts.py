"""Digests across restarts and local midnights, with the injected clock, on both engines:
the catch-up window for the previous local date's digest (a gap in the ticks, a run
deferred past midnight; never for a due instant the runner saw), and ``ready`` runs
delivered by a new runner after a flood wait, exactly once, without new summaries, the
messages delivered before the wait not sent again."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import UTC, date, datetime, timedelta

from budget.types import Level, Refusal, RefusalReason, Window
from scheduler.claims import Claimant
from scheduler.runner import DigestRunner
from scheduler.tables import RunStatus
from scheduler.types import NoticeKind
from tests.scheduler.test_replicas import DEAD_AFTER_S, Replicas
from tests.scheduler.test_runner import Sessions, World
from tests.support.clocks import ManualClock

BERLIN = "Europe/Berlin"


class _TimersNeverFire(ManualClock):
    """The test clock, on which a wait of a minute or more never ends (a flood wait's
    timer in a process that is about to stop); shorter waits pass at once."""

    async def sleep(self, seconds: float) -> None:
        if seconds >= 60:
            await asyncio.Event().wait()
        await super().sleep(seconds)


async def _until(done: Callable[[], Awaitable[bool]], limit_s: float = 30.0) -> None:
    """Poll ``done`` (database state the runner writes on aiosqlite's thread) every 10 ms."""
    for _ in range(int(limit_s * 100)):
        if await done():
            return
        await asyncio.sleep(0.01)
    raise TimeoutError(f"not done within {limit_s} s")


def _notices(world: World, user_id: int) -> list[tuple[NoticeKind, date | None]]:
    return [
        (d.notice.kind, d.notice.local_date)
        for d in world.deliverer.notices
        if d.notice is not None and d.user_id == user_id
    ]


async def test_a_digest_due_while_down_across_local_midnight_goes_out_late_once(
    sessions: Sessions,
) -> None:
    """Berlin, the default catch-up window (6 h): the runner last ticked at 16:00 local
    on 03-05 and the next one starts at 00:10 on 03-06. User 1's digest (23:50, 20 min
    ago) goes out at the first tick, after the late notice naming 03-05; user 3's (17:00,
    7 h ago: outside the window) does not — the next digest covers its posts. User 2, who
    subscribes at 00:12 with digests at 23:50, gets nothing for 03-05: that instant was
    not missed. Ticks and a further restart send nothing more."""
    clock = ManualClock(datetime(2026, 3, 5, 15, 0, tzinfo=UTC))  # 16:00 in Berlin
    world = World(sessions, clock)
    world.fetcher.add("channel_a", [1, 2], clock.now())
    await world.user(1, "channel_a", tz=BERLIN, at="23:50")
    await world.user(3, "channel_a", tz=BERLIN, at="17:00")
    await world.tick()
    assert world.deliverer.sent == []

    clock.set(datetime(2026, 3, 5, 23, 10, tzinfo=UTC))  # 00:10 on 03-06: a new process
    world.runner = world.new_runner()
    await world.tick()
    clock.advance(120)
    await world.user(2, "channel_a", tz=BERLIN, at="23:50")
    await world.tick()
    world.runner = world.new_runner()
    await world.tick()
    assert [d.user_id for d in world.deliverer.sent] == [1]
    assert _notices(world, 1) == [(NoticeKind.LATE, date(2026, 3, 5))]
    (run,) = await world.runs()
    assert (run.user_id, run.local_date, run.status, run.late) == (
        1,
        date(2026, 3, 5),
        RunStatus.SENT,
        True,
    )


async def test_a_digest_deferred_past_local_midnight_still_goes_out(sessions: Sessions) -> None:
    """A daily limit refuses 03-05's digest at 23:50 Berlin until the limit resets at
    local midnight: after midnight the deferred run is retried and sent (before, the
    ticks looked at 03-06 only and 03-05's run stayed deferred for ever)."""
    clock = ManualClock(datetime(2026, 3, 5, 22, 50, tzinfo=UTC))
    world = World(sessions, clock)
    world.fetcher.add("channel_a", [1, 2], clock.now())
    await world.user(1, "channel_a", tz=BERLIN, at="23:50")
    midnight = datetime(2026, 3, 5, 23, 0, tzinfo=UTC)
    world.ledger.refusal = Refusal(RefusalReason.LIMIT, Level.USER, Window.DAY, midnight)
    await world.tick()
    (run,) = await world.runs()
    assert run.status == RunStatus.DEFERRED
    world.ledger.refusal = None
    clock.set(midnight + timedelta(minutes=1))
    await world.tick()
    assert [d.user_id for d in world.deliverer.sent] == [1]
    (run,) = await world.runs()
    assert (run.local_date, run.status) == (date(2026, 3, 5), RunStatus.SENT)


async def test_a_ready_run_after_a_flood_wait_is_delivered_by_the_next_runner(
    sessions: Sessions,
) -> None:
    """03-05's digest (two sources: two messages) meets a 429 of an hour on its second
    message at 23:50 Berlin; the runner stops. A new runner at 01:00 (03-06) delivers the
    second message only, once; no provider request is made again. So does a ready run of
    a user whose daily digests are off (an admin's /digest_now)."""
    clock = _TimersNeverFire(datetime(2026, 3, 5, 22, 50, tzinfo=UTC))
    world = World(sessions, clock)
    world.fetcher.add("channel_a", [1, 2], clock.now())
    world.fetcher.add("channel_b", [3], clock.now())
    await world.user(1, "channel_a", "channel_b", tz=BERLIN, at="23:50")
    await world.user(2, "channel_b", tz=BERLIN, at="23:50")
    await world.profiles.set_digest_enabled(2, False)
    world.deliverer.fail_after[1] = (1, 3600.0)
    world.deliverer.fail_after[2] = (0, 3600.0)
    await world.runner.tick()
    await world.runner.run_now(2)

    async def both_wait() -> bool:
        runs = await world.runs()
        return len(runs) == 2 and all(r.delivery_attempts == 1 for r in runs)

    await _until(both_wait)
    await world.runner.stop()
    assert world.deliverer.messages == [(1, "channel_a")]
    requests = len(world.backend.requests)
    assert requests == 3

    clock.set(datetime(2026, 3, 5, 23, 55, tzinfo=UTC))  # 00:55 on 03-06, the wait is over
    world.runner = world.new_runner()
    await world.tick()
    await world.tick()
    assert sorted(world.deliverer.messages) == [
        (1, "channel_a"),
        (1, "channel_b"),
        (2, "channel_b"),
    ]
    assert len(world.backend.requests) == requests, "nothing summarised again"
    assert {(r.user_id, r.local_date, r.status) for r in await world.runs()} == {
        (1, date(2026, 3, 5), RunStatus.SENT),
        (2, date(2026, 3, 5), RunStatus.SENT),
    }


async def test_two_replicas_that_start_after_the_downtime_catch_up_once(
    sessions: Sessions,
) -> None:
    """Both replicas start at 00:10 after a downtime across 23:50: one makes and sends
    03-05's digest, the other finds it claimed or sent; a third start sends nothing."""
    clock = ManualClock(datetime(2026, 3, 5, 22, 40, tzinfo=UTC))
    replicas = Replicas(sessions, clock)
    replicas.fetcher.add("channel_a", [1, 2], clock.now())
    await replicas.user(1, "channel_a", at="23:50")
    await replicas.profiles.set_tz(1, BERLIN)
    await replicas.beat("a", "b")
    await replicas.tick_both()
    clock.set(datetime(2026, 3, 5, 23, 10, tzinfo=UTC))
    await replicas.beat("a", "b")
    replicas.runners = {name: replicas.runner(name) for name in ("a", "b")}
    await replicas.tick_both()
    await replicas.tick_both()
    third = DigestRunner(
        clock=clock,
        session_factory=sessions,
        ledger=replicas.ledger,
        backend=replicas.backend,
        deliverer=replicas.deliverer,
        fetcher=replicas.fetcher,
        config=replicas.config,
        count_tokens=lambda text: len(text) // 4 + 1,
        claimant=Claimant("proc-c", DEAD_AFTER_S),
    )
    await third.tick()
    await third.drain()
    assert [d.user_id for d in replicas.deliverer.sent] == [1]
    assert len(replicas.backend.requests) == 2
    (run,) = await replicas.runs()
    assert (run.local_date, run.status, run.late) == (date(2026, 3, 5), RunStatus.SENT, True)
