"""Ledger contract: every rule of the hold protocol (docs/money.md), manual clock, each backend.

Prices (see conftest): ``test:m`` = 1 µUSD per token in and out, so a hold of
``input_tokens=a, max_tokens=b`` has a ceiling of exactly a + b µUSD.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import pytest

from budget.errors import HoldRefused, UnknownHold
from budget.ledger import Ledger
from budget.protocol import HoldTicket, OperationTicket
from budget.status import BucketStatus, KillState
from budget.storage.sqlite.store import UnknownOperation
from budget.types import Level, Origin, RefusalReason, Usage, Window
from tests.budget.ledger_helpers import LedgerFactory
from tests.support.clocks import ManualClock


async def hold(
    ledger: Ledger,
    user: int = 1,
    ceiling: int = 100,
    *,
    provider: str = "test",
    model: str = "m",
    op: OperationTicket | None = None,
) -> HoldTicket:
    """Reserve ``ceiling`` µUSD (input 1 token + max_tokens ceiling−1) in a new op."""
    op = op or await ledger.begin_operation(user, Origin.CHAT, max_musd=10**9, max_requests=10**6)
    req = await ledger.begin_request(op, f"fp-{id(object())}-{ceiling}-{ledger.clock.monotonic()}")
    return await ledger.reserve(
        op, req, provider=provider, model=model, input_tokens=1, max_tokens=ceiling - 1
    )


async def refused(coro: object) -> HoldRefused:
    """Await ``coro`` and return the HoldRefused it raises."""
    with pytest.raises(HoldRefused) as info:
        await coro  # type: ignore[misc]
    return info.value


def bucket(status_buckets: list[BucketStatus], level: Level, window: Window) -> BucketStatus:
    """The status bucket of ``level``/``window``."""
    return next(b for b in status_buckets if b.level is level and b.window is window)


async def test_hold_and_settle_books_actual(make_ledger: LedgerFactory) -> None:
    """A settle replaces the held ceiling by the actual cost on every level."""
    ledger = await make_ledger(global_daily_musd=10_000, user_daily_musd=5_000)
    h = await hold(ledger, ceiling=1000)
    st = await ledger.user_status(1)
    assert bucket(st.buckets, Level.USER, Window.DAY).held_musd == 1000
    assert bucket(st.buckets, Level.GLOBAL, Window.DAY).remaining_musd == 9000
    assert await ledger.settle(h.hold_id, Usage(input_tokens=1, output_tokens=299)) == 300
    st = await ledger.user_status(1)
    b = bucket(st.buckets, Level.USER, Window.DAY)
    assert (b.held_musd, b.settled_musd, b.remaining_musd) == (0, 300, 4700)


async def test_refusal_names_level_window_reset_and_holds_nothing(
    make_ledger: LedgerFactory, clock: ManualClock
) -> None:
    """Team refuses (user and global have room): the refusal says team/day/reset and
    no level holds anything afterwards."""
    ledger = await make_ledger(
        global_daily_musd=5_000_000, user_daily_musd=800_000, team_daily_musd=300_000
    )
    await ledger.team_add("red", 1)
    r = (await refused(hold(ledger, ceiling=500_000))).refusal
    assert (r.reason, r.level, r.window, r.scope) == (
        RefusalReason.LIMIT,
        Level.TEAM,
        Window.DAY,
        "red",
    )
    assert r.resets_at == datetime(2026, 1, 15, tzinfo=UTC)
    assert not r.busy
    st = await ledger.user_status(1)
    assert all(b.held_musd == 0 for b in st.buckets)
    assert (await ledger.status()).exposure_musd == 0
    assert (await ledger.status()).refusals_today == {"limit": 1}
    del clock


async def test_busy_when_outstanding_holds_block(make_ledger: LedgerFactory) -> None:
    """A refusal caused by held (unsettled) money is flagged busy; after the holder
    releases, the same hold fits."""
    ledger = await make_ledger(global_daily_musd=1000)
    first = await hold(ledger, user=1, ceiling=800)
    r = (await refused(hold(ledger, user=2, ceiling=500))).refusal
    assert r.reason is RefusalReason.BUSY and r.busy and r.level is Level.GLOBAL
    await ledger.release(first.hold_id)
    await hold(ledger, user=2, ceiling=500)


async def test_exhausted_is_not_busy(make_ledger: LedgerFactory) -> None:
    """When settled spend alone leaves no room the refusal is a limit, not busy."""
    ledger = await make_ledger(user_hourly_musd=1000)
    h = await hold(ledger, ceiling=900)
    await ledger.settle(h.hold_id, Usage(input_tokens=1, output_tokens=899))
    r = (await refused(hold(ledger, ceiling=200))).refusal
    assert (r.reason, r.level, r.window, r.busy) == (
        RefusalReason.LIMIT,
        Level.USER,
        Window.HOUR,
        False,
    )
    assert r.resets_at == datetime(2026, 1, 14, 13, 0, tzinfo=UTC)


async def test_settle_is_idempotent_and_release_after_settle_is_noop(
    make_ledger: LedgerFactory,
) -> None:
    """A second settle and a release after settle change nothing."""
    ledger = await make_ledger(global_daily_musd=10_000)
    h = await hold(ledger, ceiling=1000)
    assert await ledger.settle(h.hold_id, Usage(1, 0, 99)) == 100
    assert await ledger.settle(h.hold_id, Usage(1, 0, 999)) == 100
    await ledger.release(h.hold_id)
    st = await ledger.status()
    g = bucket(st.buckets, Level.GLOBAL, Window.DAY)
    assert (g.settled_musd, g.held_musd) == (100, 0)
    assert (await ledger.store.audit())["mismatches"] == []


async def test_unknown_hold(make_ledger: LedgerFactory) -> None:
    """settle/release of an id never granted raise UnknownHold."""
    ledger = await make_ledger()
    with pytest.raises(UnknownHold):
        await ledger.settle("nope", Usage())
    with pytest.raises(UnknownHold):
        await ledger.release("nope")


async def test_max_tokens_is_mandatory(make_ledger: LedgerFactory) -> None:
    """Without max_tokens there is no ceiling: the reserve is refused outright."""
    ledger = await make_ledger()
    op = await ledger.begin_operation(1, Origin.CHAT)
    req = await ledger.begin_request(op, "a")
    with pytest.raises(ValueError, match="max_tokens"):
        await ledger.reserve(op, req, provider="test", model="m", input_tokens=5, max_tokens=0)


async def test_expired_hold_is_swept_recorded_and_late_settle_still_booked(
    make_ledger: LedgerFactory, clock: ManualClock
) -> None:
    """The sweeper returns an orphaned hold after its TTL and records it; a settle
    arriving afterwards is booked in full and counted as late."""
    ledger = await make_ledger(global_daily_musd=10_000)
    h = await hold(ledger, ceiling=1000)
    clock.advance(299)
    assert await ledger.sweep() == 0
    clock.advance(2)
    assert await ledger.sweep() == 1
    st = await ledger.status()
    assert st.expired_today == 1 and st.outstanding_holds == 0
    assert await ledger.settle(h.hold_id, Usage(1, 0, 499)) == 500
    st = await ledger.status()
    g = bucket(st.buckets, Level.GLOBAL, Window.DAY)
    assert (g.settled_musd, g.held_musd, g.late_musd) == (500, 0, 500)
    assert st.late_settled_musd_today == 500


async def test_late_settle_books_into_the_day_the_hold_started(
    make_ledger: LedgerFactory, clock: ManualClock
) -> None:
    """Granted 23:59:58, settled 00:00:03: the money belongs to the first day, and
    the new day starts empty."""
    ledger = await make_ledger(global_daily_musd=10_000, tz="Europe/Berlin")
    clock.set(datetime(2026, 1, 14, 22, 59, 58, tzinfo=UTC))  # 23:59:58 Berlin
    h = await hold(ledger, ceiling=1000)
    clock.advance(5)
    await ledger.settle(h.hold_id, Usage(1, 0, 199))
    st = await ledger.status()
    g = bucket(st.buckets, Level.GLOBAL, Window.DAY)
    assert (g.key, g.settled_musd, g.held_musd) == ("2026-01-15", 0, 0)
    hours = (await ledger.spend_per_hour(hours=2))["global"]
    assert hours == [
        (datetime(2026, 1, 14, 22, tzinfo=UTC), 200),
        (datetime(2026, 1, 14, 23, tzinfo=UTC), 0),
    ]


async def test_late_settle_into_closed_day_after_expiry(
    make_ledger: LedgerFactory, clock: ManualClock
) -> None:
    """A hold granted yesterday, expired overnight, settled today lands in yesterday."""
    ledger = await make_ledger(global_daily_musd=10_000)
    clock.set(datetime(2026, 1, 14, 23, 58, tzinfo=UTC))
    h = await hold(ledger, ceiling=1000)
    clock.advance(600)
    assert await ledger.sweep() == 1
    await ledger.settle(h.hold_id, Usage(1, 0, 9))
    today = bucket((await ledger.status()).buckets, Level.GLOBAL, Window.DAY)
    assert (today.key, today.settled_musd) == ("2026-01-15", 0)
    rows = await ledger.spend_per_hour(hours=3)
    assert rows["global"][-2][1] == 10  # the 23:00 hour of the 14th


async def test_interrupted_call_rule(make_ledger: LedgerFactory) -> None:
    """Reported usage wins; else input + received output; else the ceiling; all estimated."""
    ledger = await make_ledger()
    h1, h2, h3 = [await hold(ledger, ceiling=1000) for _ in range(3)]
    assert await ledger.settle_interrupted(h1.hold_id, Usage(10, 0, 20), 999) == 30
    assert await ledger.settle_interrupted(h2.hold_id, None, 50) == 51
    assert await ledger.settle_interrupted(h3.hold_id, None, None) == 1000


async def test_operation_cost_cap_and_request_cap_and_loop(make_ledger: LedgerFactory) -> None:
    """An operation refuses past its max cost, its max requests, and a repeated prompt."""
    ledger = await make_ledger()
    op = await ledger.begin_operation(1, Origin.CHAT, max_musd=1500, max_requests=2)
    r1 = await ledger.begin_request(op, "p1")
    await ledger.reserve(op, r1, provider="test", model="m", input_tokens=1, max_tokens=999)
    r = (
        await refused(
            ledger.reserve(op, r1, provider="test", model="m", input_tokens=1, max_tokens=999)
        )
    ).refusal
    assert r.reason is RefusalReason.OPERATION_CAP
    assert (await refused(ledger.begin_request(op, "p1"))).refusal.reason is RefusalReason.LOOP
    await ledger.begin_request(op, "p2")
    r = (await refused(ledger.begin_request(op, "p3"))).refusal
    assert r.reason is RefusalReason.OPERATION_CAP
    assert (await ledger.status()).refusals_today == {"operation_cap": 2, "loop": 1}


async def test_cascade_attempts_share_one_request(make_ledger: LedgerFactory) -> None:
    """Several holds (attempts) under one request id do not count as repeats."""
    ledger = await make_ledger()
    op = await ledger.begin_operation(1, Origin.CHAT, max_requests=1)
    req = await ledger.begin_request(op, "p")
    for provider in ("free", "free", "test"):
        model = "f" if provider == "free" else "m"
        h = await ledger.reserve(
            op, req, provider=provider, model=model, input_tokens=10, max_tokens=10
        )
        await ledger.release(h.hold_id)
    st = await ledger.status()
    assert (st.operations_today, st.requests_today, st.requests_per_operation) == (1, 1, 1.0)


async def test_default_operation_caps_per_origin(make_ledger: LedgerFactory) -> None:
    """Chat operations default to OPERATION_MAX_USD ($0.05): a $0.06 ceiling is refused."""
    ledger = await make_ledger()
    op = await ledger.begin_operation(1, Origin.CHAT)
    req = await ledger.begin_request(op, "p")
    r = (
        await refused(
            ledger.reserve(op, req, provider="test", model="m", input_tokens=1, max_tokens=59_999)
        )
    ).refusal
    assert r.reason is RefusalReason.OPERATION_CAP


async def test_inflight_slots_expire_and_free(
    make_ledger: LedgerFactory, clock: ManualClock
) -> None:
    """USER_MAX_INFLIGHT refuses a third operation; ending one frees a slot; a crashed
    operation's slot expires with its TTL."""
    ledger = await make_ledger(user_max_inflight=2)
    a = await ledger.begin_operation(1, Origin.CHAT)
    await ledger.begin_operation(1, Origin.CHAT)
    assert (
        await refused(ledger.begin_operation(1, Origin.CHAT))
    ).refusal.reason is RefusalReason.INFLIGHT
    await ledger.begin_operation(2, Origin.CHAT)  # other users are not affected
    await ledger.end_operation(a)
    await ledger.end_operation(a)  # idempotent
    await ledger.begin_operation(1, Origin.CHAT)
    clock.advance(301)
    assert (await ledger.user_status(1)).inflight == 0
    await ledger.begin_operation(1, Origin.CHAT)


async def test_rate_per_minute(make_ledger: LedgerFactory, clock: ManualClock) -> None:
    """USER_MAX_PER_MINUTE refuses with reason rate and the time the oldest start ages out."""
    ledger = await make_ledger(user_max_per_minute=3)
    for _ in range(3):
        await ledger.end_operation(await ledger.begin_operation(1, Origin.CHAT))
        clock.advance(10)
    r = (await refused(ledger.begin_operation(1, Origin.CHAT))).refusal
    assert r.reason is RefusalReason.RATE and r.window is Window.MINUTE
    assert r.resets_at == datetime(2026, 1, 14, 12, 1, tzinfo=UTC)
    clock.advance(31)
    await ledger.begin_operation(1, Origin.CHAT)


async def test_kill_refuses_new_work_but_granted_holds_settle(make_ledger: LedgerFactory) -> None:
    """While killed: new operations and holds are refused; a granted hold settles;
    kill reports the exposure and unkill the stuck holds."""
    ledger = await make_ledger(global_daily_musd=100_000)
    op = await ledger.begin_operation(1, Origin.CHAT, max_musd=10**6)
    h = await hold(ledger, ceiling=700, op=op)
    assert await ledger.kill("incident", by=42) == 700
    r = (await refused(ledger.begin_operation(2, Origin.CHAT))).refusal
    assert (r.reason, r.note) == (RefusalReason.KILL, "incident")
    assert (await refused(hold(ledger, ceiling=10, op=op))).refusal.reason is RefusalReason.KILL
    assert await ledger.settle(h.hold_id, Usage(1, 0, 9)) == 10
    st = await ledger.status()
    assert st.kill.killed and st.kill.by == 42 and st.exposure_musd == 0
    assert await ledger.unkill(by=42) == 0
    await ledger.begin_operation(2, Origin.CHAT)


async def test_scoped_kill(make_ledger: LedgerFactory) -> None:
    """A kill scoped to a team stops its members only."""
    ledger = await make_ledger()
    await ledger.team_add("red", 1)
    await ledger.kill("team abuse", by=9, scope=("team", "red"))
    r = (await refused(ledger.begin_operation(1, Origin.CHAT))).refusal
    assert (r.reason, r.level, r.scope) == (RefusalReason.KILL, Level.TEAM, "red")
    await ledger.begin_operation(2, Origin.CHAT)
    await ledger.kill("user", by=9, scope=("user", "2"))
    assert (await refused(ledger.begin_operation(2, Origin.CHAT))).refusal.level is Level.USER
    await ledger.unkill(by=9, scope=("team", "red"))
    await ledger.begin_operation(1, Origin.CHAT)
    assert [k.scope for k in (await ledger.status()).scoped_kills] == ["2"]


async def test_restart_keeps_spend_kill_and_limits_and_sweeps_old_holds(
    make_ledger: LedgerFactory,
) -> None:
    """A new process on the same file sees settled spend, the kill flag and runtime
    limits; a hold left by the dead process is expired at start and booked at its
    ceiling (estimated), so /status shows it as spent and as a call."""
    first = await make_ledger(global_daily_musd=10_000)
    h = await hold(first, ceiling=1000)
    await first.settle(h.hold_id, Usage(1, 0, 99))
    await hold(first, ceiling=2000)  # orphaned by the "crash"
    await first.set_limit(Level.USER, "1", Window.DAY, 5_000, by=1)
    await first.kill("manual", by=7)
    await first.close()
    second = await make_ledger(global_daily_musd=10_000)
    st = await second.status()
    g = bucket(st.buckets, Level.GLOBAL, Window.DAY)
    assert (g.settled_musd, g.held_musd, g.late_musd) == (2100, 0, 0)
    assert st.kill.killed and st.kill.reason == "manual" and st.expired_today == 1
    assert (st.expired_unreconciled_today, st.expired_booked_musd_today) == (1, 2000)
    (p,) = st.providers
    assert (p.provider, p.calls, p.estimated_calls, p.settled_musd) == ("test", 2, 1, 2100)
    assert st.spend_by_origin_musd["chat"] == 2100
    us = await second.user_status(1)
    assert bucket(us.buckets, Level.USER, Window.DAY).limit_musd == 5_000
    assert us.settled_today_musd == 2100


async def test_auto_kill_and_unkill_counts_only_later_spend(
    make_ledger: LedgerFactory, clock: ManualClock
) -> None:
    """Spend above AUTO_KILL_FRACTION × global daily within the window trips the switch
    (listener called once); after an unkill only spend settled later counts."""
    from decimal import Decimal

    ledger = await make_ledger(global_daily_musd=10_000, auto_kill_fraction=Decimal("0.5"))
    calls: list[KillState] = []

    async def listener(state: KillState) -> None:
        calls.append(state)

    ledger._notices.on_auto_kill = listener
    h = await hold(ledger, ceiling=4000)
    await ledger.settle(h.hold_id, Usage(1, 0, 3999))
    assert not (await ledger.kill_state()).killed
    h = await hold(ledger, ceiling=2000)
    await ledger.settle(h.hold_id, Usage(1, 0, 1999))
    state = await ledger.kill_state()
    assert state.killed and state.automatic and state.reason.startswith("automatic")
    await ledger.close()  # drains the listener task
    assert len(calls) == 1
    again = await make_ledger(global_daily_musd=10_000, auto_kill_fraction=Decimal("0.5"))
    await again.unkill(by=1)
    clock.advance(1)
    h = await hold(again, ceiling=100)
    await again.settle(h.hold_id, Usage(1, 0, 99))
    assert not (await again.kill_state()).killed


async def test_auto_kill_usd_per_window_without_global_limit(make_ledger: LedgerFactory) -> None:
    """AUTO_KILL_USD_PER_WINDOW works for a bot with no global limit."""
    ledger = await make_ledger(auto_kill_musd_per_window=500)
    h = await hold(ledger, ceiling=600)
    await ledger.settle(h.hold_id, Usage(1, 0, 599))
    assert (await ledger.kill_state()).killed


async def test_free_tier_settles_zero_records_list_price(make_ledger: LedgerFactory) -> None:
    """A free-tier hold costs 0 µUSD (passes even an exhausted limit) but its list-price
    equivalent is reported; a free model without list price reports None."""
    ledger = await make_ledger(global_daily_musd=0)
    h = await hold(ledger, ceiling=1000, provider="free", model="f")
    assert (h.ceiling_musd, h.list_ceiling_musd) == (0, 1000)
    assert await ledger.settle(h.hold_id, Usage(100, 0, 50)) == 0
    h2 = await hold(ledger, ceiling=1000, provider="free", model="nolist")
    assert h2.list_ceiling_musd is None
    await ledger.settle(h2.hold_id, Usage(10, 0, 10))
    (p,) = (await ledger.status()).providers
    assert (p.provider, p.calls, p.settled_musd, p.list_musd) == ("free", 2, 0, 150)


async def test_provider_cap(make_ledger: LedgerFactory) -> None:
    """A provider account cap refuses at level provider; other providers are unaffected."""
    ledger = await make_ledger(provider_daily_caps_musd={"cap": 500})
    r = (await refused(hold(ledger, ceiling=600, provider="cap"))).refusal
    assert (r.level, r.scope, r.window) == (Level.PROVIDER, "cap", Window.DAY)
    await hold(ledger, ceiling=600, provider="test")
    await ledger.set_limit(Level.PROVIDER, "cap", Window.DAY, None)
    await hold(ledger, ceiling=600, provider="cap")


async def test_runtime_limits_override_and_clear(make_ledger: LedgerFactory) -> None:
    """set_limit overrides a default (None = no limit); clear_limit restores it."""
    ledger = await make_ledger(user_daily_musd=100)
    await refused(hold(ledger, ceiling=200))
    await ledger.set_limit(Level.USER, "1", Window.DAY, None)
    await hold(ledger, ceiling=200)
    await ledger.clear_limit(Level.USER, "1", Window.DAY)
    await refused(hold(ledger, ceiling=200))
    with pytest.raises(ValueError):
        await ledger.set_limit(Level.GLOBAL, "", Window.MINUTE, 5)


async def test_teams(make_ledger: LedgerFactory) -> None:
    """Team membership: add moves a user, remove, list, team status shows spend."""
    ledger = await make_ledger(team_daily_musd=10_000)
    assert await ledger.team_add("red", 1) is None
    await ledger.team_add("red", 2)
    assert await ledger.team_add("blue", 2) == "red"
    assert await ledger.teams() == {"blue": [2], "red": [1]}
    h = await hold(ledger, user=1, ceiling=100)
    await ledger.settle(h.hold_id, Usage(1, 0, 9))
    ts = await ledger.team_status("red")
    assert ts.members == [1] and ts.member_spend_today_musd == {1: 10}
    assert bucket(ts.buckets, Level.TEAM, Window.DAY).settled_musd == 10
    assert await ledger.top_users(5) == [(1, 10, 0)]
    assert await ledger.team_remove("red", 1)
    assert not await ledger.team_remove("red", 1)


async def test_record_message_courtesy_cap(make_ledger: LedgerFactory, clock: ManualClock) -> None:
    """USER_DAILY_MESSAGES refuses with reason messages until the day resets."""
    ledger = await make_ledger(user_daily_messages=2)
    assert await ledger.record_message(5) == 1
    assert await ledger.record_message(5) == 2
    r = (await refused(ledger.record_message(5))).refusal
    assert r.reason is RefusalReason.MESSAGES and r.resets_at == datetime(2026, 1, 15, tzinfo=UTC)
    assert (await ledger.user_status(5)).messages_today == 2
    clock.advance(12 * 3600)
    assert await ledger.record_message(5) == 1


async def test_remaining_musd_and_status_estimates(make_ledger: LedgerFactory) -> None:
    """remaining_musd is the tightest level (op cap included); status reports estimate
    errors (actual − ceiling) and spend by origin."""
    ledger = await make_ledger(global_daily_musd=10_000, user_daily_musd=3_000)
    op = await ledger.begin_operation(1, Origin.DIGEST, max_musd=2_500)
    assert await ledger.remaining_musd(op, "test") == 2_500
    h = await hold(ledger, ceiling=1000, op=op)
    assert await ledger.remaining_musd(op, "test") == 1_500
    await ledger.settle(h.hold_id, Usage(1, 0, 399))
    st = await ledger.status()
    assert st.spend_by_origin_musd == {
        "chat": 0, "digest": 400, "summary": 0, "transcription": 0, "vision": 0
    }  # fmt: skip
    assert st.estimate.count == 1 and st.estimate.median_musd_error == -600
    assert st.estimate.median_token_error == -600 and st.estimate.over_ceiling == 0
    h = await hold(ledger, ceiling=100, op=op)
    await ledger.settle(h.hold_id, Usage(1, 0, 199))  # actual above ceiling: booked in full
    st = await ledger.status()
    assert bucket(st.buckets, Level.GLOBAL, Window.DAY).settled_musd == 600
    assert st.estimate.over_ceiling == 1 and st.estimate.worst_musd_error == 100


async def test_ended_operation_cannot_reserve(make_ledger: LedgerFactory) -> None:
    """After end_operation no request or hold can be added to it."""
    ledger = await make_ledger()
    op = await ledger.begin_operation(1, Origin.CHAT)
    await ledger.end_operation(op)
    with pytest.raises(UnknownOperation):
        await ledger.begin_request(op, "x")


async def test_spend_per_hour_series(make_ledger: LedgerFactory, clock: ManualClock) -> None:
    """The chart series has one zero-filled point per hour, oldest first."""
    ledger = await make_ledger()
    h = await hold(ledger, ceiling=100)
    await ledger.settle(h.hold_id, Usage(1, 0, 41))
    clock.advance(3600)
    series = await ledger.spend_per_hour(hours=48)
    points = series["global"]
    assert len(points) == 48 and points[-1] == (datetime(2026, 1, 14, 13, tzinfo=UTC), 0)
    assert points[-2] == (datetime(2026, 1, 14, 12, tzinfo=UTC), 42)
    assert points[0][0] == datetime(2026, 1, 12, 14, tzinfo=UTC)


# -- expiry books the ceiling (a crashed or orphaned call is never forgotten) ----------


async def test_start_sweep_books_ceiling_estimated_in_grant_windows_and_provider(
    make_ledger: LedgerFactory, clock: ManualClock
) -> None:
    """kill -9 between the request and the settle: the next start expires the hold
    and books its 447 µUSD ceiling as settled, estimated, in the hour it was granted,
    on every level (provider cap included), counted as one call of the provider."""
    cfg = {"global_daily_musd": 10_000, "provider_daily_caps_musd": {"cap": 5_000}}
    first = await make_ledger(**cfg)
    clock.set(datetime(2026, 1, 14, 12, 59, 50, tzinfo=UTC))
    await hold(first, ceiling=447, provider="cap")
    await first.close()  # the process dies: no settle, no release
    clock.set(datetime(2026, 1, 14, 13, 0, 30, tzinfo=UTC))
    second = await make_ledger(**cfg)
    st = await second.status()
    assert (st.outstanding_holds, st.exposure_musd, st.expired_today) == (0, 0, 1)
    day = bucket(st.buckets, Level.GLOBAL, Window.DAY)
    hour = bucket(st.buckets, Level.GLOBAL, Window.HOUR)
    assert (day.settled_musd, day.held_musd, day.remaining_musd) == (447, 0, 9_553)
    assert (hour.key, hour.settled_musd) == ("2026-01-14T13:00Z", 0)  # not the sweep's hour
    assert (await second.spend_per_hour(hours=2))["global"] == [
        (datetime(2026, 1, 14, 12, tzinfo=UTC), 447),
        (datetime(2026, 1, 14, 13, tzinfo=UTC), 0),
    ]
    cap = next(b for b in st.buckets if b.level is Level.PROVIDER)
    assert (cap.scope, cap.settled_musd, cap.held_musd, cap.remaining_musd) == (
        "cap",
        447,
        0,
        4_553,
    )
    (p,) = st.providers
    assert (p.provider, p.calls, p.estimated_calls, p.settled_musd, p.list_musd) == (
        "cap",
        1,
        1,
        447,
        447,
    )
    assert (st.expired_unreconciled_today, st.expired_booked_musd_today) == (1, 447)
    personal = bucket((await second.user_status(1)).buckets, Level.USER, Window.DAY)
    assert (personal.settled_musd, personal.held_musd) == (447, 0)


async def test_start_sweep_books_into_the_day_the_hold_started(
    make_ledger: LedgerFactory, clock: ManualClock
) -> None:
    """Granted 23:59:58, swept after a restart at 00:00:30: the ceiling lands in the
    day and hour of the grant; the new day starts empty."""
    first = await make_ledger(global_daily_musd=10_000)
    clock.set(datetime(2026, 1, 14, 23, 59, 58, tzinfo=UTC))
    await hold(first, ceiling=447)
    await first.close()
    clock.set(datetime(2026, 1, 15, 0, 0, 30, tzinfo=UTC))
    second = await make_ledger(global_daily_musd=10_000)
    today = bucket((await second.status()).buckets, Level.GLOBAL, Window.DAY)
    assert (today.key, today.settled_musd, today.held_musd) == ("2026-01-15", 0, 0)
    assert (await second.spend_per_hour(hours=2))["global"] == [
        (datetime(2026, 1, 14, 23, tzinfo=UTC), 447),
        (datetime(2026, 1, 15, 0, tzinfo=UTC), 0),
    ]


async def test_crash_loop_is_stopped_by_limits_and_auto_kill(
    make_ledger: LedgerFactory,
) -> None:
    """Each crash's hold is counted at start, so a crash loop meets the global limit
    (refused as exhausted, not busy) and trips the burn-rate kill switch."""
    cfg = {"global_daily_musd": 1_000, "auto_kill_musd_per_window": 800}
    first = await make_ledger(**cfg)
    await hold(first, ceiling=447)
    await first.close()
    second = await make_ledger(**cfg)
    assert not (await second.kill_state()).killed
    await hold(second, ceiling=447)
    await second.close()
    third = await make_ledger(**cfg)
    state = await third.kill_state()
    assert state.killed and state.automatic
    assert state.reason == "automatic: settled $0.000894 in the last 60 min > threshold $0.000800"
    await third.unkill(by=1)
    r = (await refused(hold(third, ceiling=447))).refusal
    assert (r.reason, r.level, r.busy) == (RefusalReason.LIMIT, Level.GLOBAL, False)


async def test_ttl_sweeper_books_ceiling_estimated(
    make_ledger: LedgerFactory, clock: ManualClock
) -> None:
    """The periodic sweep does the same as the start sweep once the TTL has passed:
    ceiling booked as settled, estimated, in the grant's hour; expiry recorded now."""
    ledger = await make_ledger(global_daily_musd=10_000, provider_daily_caps_musd={"cap": 900})
    clock.set(datetime(2026, 1, 14, 12, 58, tzinfo=UTC))
    await hold(ledger, ceiling=447, provider="cap")
    clock.advance(299)
    assert await ledger.sweep() == 0
    clock.advance(2)  # 13:03:01, past the 300 s TTL
    assert await ledger.sweep() == 1
    assert await ledger.sweep() == 0  # booked once
    st = await ledger.status()
    day = bucket(st.buckets, Level.GLOBAL, Window.DAY)
    assert (day.settled_musd, day.held_musd, day.late_musd) == (447, 0, 0)
    assert bucket(st.buckets, Level.GLOBAL, Window.HOUR).settled_musd == 0  # 13:00 hour
    assert (await ledger.spend_per_hour(hours=2))["global"][0][1] == 447  # 12:00 hour
    (p,) = st.providers
    assert (p.calls, p.estimated_calls, p.settled_musd) == (1, 1, 447)
    # the provider cap sees it: 900 − 447 leaves room for 453 µUSD, not 900
    r = (await refused(hold(ledger, ceiling=454, provider="cap"))).refusal
    assert (r.level, r.busy) == (Level.PROVIDER, False)
    await hold(ledger, ceiling=453, provider="cap")


async def test_free_tier_hold_expiry_counts_an_estimated_call(
    make_ledger: LedgerFactory, clock: ManualClock
) -> None:
    """A free-tier hold (ceiling 0 µUSD) that expires changes no money but counts as
    an estimated call with its list-price ceiling as the list equivalent."""
    ledger = await make_ledger(global_daily_musd=10_000)
    await hold(ledger, ceiling=300, provider="free", model="f")
    clock.advance(301)
    assert await ledger.sweep() == 1
    st = await ledger.status()
    assert bucket(st.buckets, Level.GLOBAL, Window.DAY).settled_musd == 0
    (p,) = st.providers
    assert (p.calls, p.estimated_calls, p.settled_musd, p.list_musd) == (1, 1, 0, 300)


async def test_late_settle_after_expiry_corrects_to_actual_exactly_once(
    make_ledger: LedgerFactory, clock: ManualClock
) -> None:
    """A settle of an expired (ceiling-booked) hold replaces the ceiling by the actual
    in the same windows, once; it is reported as late and no longer estimated; any
    later settle or release changes nothing."""
    ledger = await make_ledger(global_daily_musd=10_000, provider_daily_caps_musd={"cap": 5_000})
    h = await hold(ledger, ceiling=1000, provider="cap")
    clock.advance(301)
    await ledger.sweep()
    assert await ledger.settle(h.hold_id, Usage(1, 0, 299)) == 300
    for _ in range(2):
        assert await ledger.settle(h.hold_id, Usage(1, 0, 999)) == 300
        await ledger.release(h.hold_id)
        assert await ledger.settle_interrupted(h.hold_id, None, None) == 300
        assert await ledger.sweep() == 0
        st = await ledger.status()
        g = bucket(st.buckets, Level.GLOBAL, Window.DAY)
        assert (g.settled_musd, g.held_musd, g.late_musd) == (300, 0, 300)
        cap = next(b for b in st.buckets if b.level is Level.PROVIDER)
        assert (cap.settled_musd, cap.late_musd) == (300, 300)
        (p,) = st.providers
        assert (p.calls, p.estimated_calls, p.settled_musd) == (1, 0, 300)
        assert st.late_settled_musd_today == 300
        assert (st.expired_unreconciled_today, st.expired_booked_musd_today) == (0, 0)
    assert (await ledger.user_status(1)).settled_today_musd == 300
    audit = await ledger.store.audit()
    assert (audit["mismatches"], audit["held_total"]) == ([], 0)


async def test_late_settle_above_ceiling_is_booked_in_full(
    make_ledger: LedgerFactory, clock: ManualClock
) -> None:
    """An actual above the ceiling, arriving after expiry, is booked in full and
    counted over the ceiling; settled is the actual, not ceiling + actual."""
    ledger = await make_ledger(global_daily_musd=10_000)
    h = await hold(ledger, ceiling=1000)
    clock.advance(301)
    await ledger.sweep()
    assert await ledger.settle(h.hold_id, Usage(1, 0, 1499)) == 1500
    st = await ledger.status()
    g = bucket(st.buckets, Level.GLOBAL, Window.DAY)
    assert (g.settled_musd, g.late_musd) == (1500, 1500)
    assert st.estimate.over_ceiling == 1


async def test_late_interrupted_settle_stays_estimated(
    make_ledger: LedgerFactory, clock: ManualClock
) -> None:
    """settle_interrupted after expiry corrects to the interrupted-call rule's figure
    and keeps the call flagged estimated."""
    ledger = await make_ledger(global_daily_musd=10_000)
    h = await hold(ledger, ceiling=1000)
    clock.advance(301)
    await ledger.sweep()
    assert await ledger.settle_interrupted(h.hold_id, None, 49) == 50
    st = await ledger.status()
    assert bucket(st.buckets, Level.GLOBAL, Window.DAY).settled_musd == 50
    (p,) = st.providers
    assert (p.calls, p.estimated_calls) == (1, 1)


async def test_release_after_expiry_returns_the_booked_ceiling_once(
    make_ledger: LedgerFactory, clock: ManualClock
) -> None:
    """A release (provider never reached) of an expired hold takes the booked ceiling
    back out of settled spend — it is the caller's first word on the hold; a settle or
    release after it changes nothing, and a release after a late settle changes nothing."""
    ledger = await make_ledger(global_daily_musd=10_000)
    a = await hold(ledger, ceiling=1000)
    b = await hold(ledger, ceiling=700)
    clock.advance(301)
    assert await ledger.sweep() == 2
    assert bucket((await ledger.status()).buckets, Level.GLOBAL, Window.DAY).settled_musd == 1700
    await ledger.release(a.hold_id)
    await ledger.release(a.hold_id)
    assert await ledger.settle(a.hold_id, Usage(1, 0, 999)) == 0
    await ledger.settle(b.hold_id, Usage(1, 0, 99))
    await ledger.release(b.hold_id)
    st = await ledger.status()
    g = bucket(st.buckets, Level.GLOBAL, Window.DAY)
    assert (g.settled_musd, g.held_musd, g.late_musd) == (100, 0, 100)
    (p,) = st.providers
    assert (p.calls, p.settled_musd) == (1, 100)  # the released attempt is no call
    assert (await ledger.store.audit())["mismatches"] == []


# -- kill reason and user ids ------------------------------------------------------------


async def test_auto_kill_reason_says_automatic_once_in_dollars(make_ledger: LedgerFactory) -> None:
    """The burn-rate trip's reason names "automatic" once and shows exact dollars."""
    ledger = await make_ledger(auto_kill_musd_per_window=500)
    h = await hold(ledger, ceiling=700)
    await ledger.settle(h.hold_id, Usage(1, 0, 699))
    state = await ledger.kill_state()
    assert state.reason == "automatic: settled $0.000700 in the last 60 min > threshold $0.000500"
    assert state.reason.count("automatic") == 1


@pytest.mark.parametrize("bad", [2**63, -(2**63) - 1, 10**30])
async def test_user_ids_outside_int64_raise_value_error(
    make_ledger: LedgerFactory, bad: int
) -> None:
    """Every ledger entry point that takes a user id rejects one SQLite cannot store
    with a ValueError naming the range (never an OverflowError from the driver)."""
    ledger = await make_ledger()
    calls = [
        ledger.team_add("red", bad),
        ledger.team_remove("red", bad),
        ledger.user_status(bad),
        ledger.record_message(bad),
        ledger.begin_operation(bad, Origin.CHAT),
        ledger.set_limit(Level.USER, str(bad), Window.DAY, 5),
        ledger.clear_limit(Level.USER, str(bad), Window.DAY),
        ledger.set_limit(Level.GLOBAL, "", Window.DAY, 5, by=bad),
        ledger.kill("x", by=bad),
        ledger.kill("x", by=1, scope=("user", str(bad))),
        ledger.unkill(by=bad),
    ]
    for coro in calls:
        with pytest.raises(ValueError, match="signed 64-bit range"):
            await coro
    with pytest.raises(ValueError, match="must be an integer"):
        await ledger.set_limit(Level.USER, "alice", Window.DAY, 5)
    assert (await ledger.status()).kill.killed is False


async def test_user_id_at_int64_bounds_is_accepted(make_ledger: LedgerFactory) -> None:
    """The extreme ids of the signed 64-bit range are valid user ids."""
    ledger = await make_ledger()
    top = 2**63 - 1
    assert await ledger.team_add("red", top) is None
    assert (await ledger.user_status(top)).team == "red"
    await ledger.set_limit(Level.USER, str(-(2**63)), Window.DAY, 5)
    await ledger.set_limit(Level.USER, "*", Window.DAY, 5)
    op = await ledger.begin_operation(top, Origin.CHAT)
    assert op.user_id == top


async def test_a_zero_message_cap_refuses_the_first_message_and_counts_none(
    make_ledger: LedgerFactory,
) -> None:
    """USER_DAILY_MESSAGES=0: the first message is refused (its refusal event recorded,
    reason messages), nothing is counted; another user is refused alike."""
    ledger = await make_ledger(user_daily_messages=0)
    for user in (5, 5, 6):
        r = (await refused(ledger.record_message(user))).refusal
        assert (r.reason, r.level, r.scope) == (RefusalReason.MESSAGES, Level.USER, str(user))
    assert (await ledger.user_status(5)).messages_today == 0
    assert (await ledger.status()).refusals_today.get("messages") == 3


async def test_the_message_counter_of_two_ledgers_at_once_stops_at_the_cap(
    make_ledger: LedgerFactory,
) -> None:
    """Two processes' ledgers on one database count one user's 12 messages at once
    against a cap of 5: exactly 5 counted, 7 refused, the counts 1..5 each once."""
    first = await make_ledger(user_daily_messages=5)
    second = await make_ledger(user_daily_messages=5)

    async def one(ledger: Ledger) -> int | HoldRefused:
        try:
            return await ledger.record_message(9)
        except HoldRefused as exc:
            return exc

    results = await asyncio.gather(*(one(first if i % 2 else second) for i in range(12)))
    counted = sorted(r for r in results if isinstance(r, int))
    assert counted == [1, 2, 3, 4, 5]
    assert (await first.user_status(9)).messages_today == 5


async def test_a_calibration_sample_is_kept_and_replaced(make_ledger: LedgerFactory) -> None:
    """One model's calibration is an upsert: the last sample is what a restart reads."""
    ledger = await make_ledger()
    await ledger.record_calibration("groq", "m", 1_100_000, 3)
    await ledger.record_calibration("groq", "m", 1_050_000, 4)
    await ledger.record_calibration("deepseek", "d", 990_000, 1)
    assert await ledger.calibration() == {
        ("groq", "m"): (1_050_000, 4),
        ("deepseek", "d"): (990_000, 1),
    }
