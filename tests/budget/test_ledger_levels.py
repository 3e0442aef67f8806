"""The ledger's levels beyond user, team and global — a group chat, a plan — and the
month window, on both backends: the exact-count discipline (N holds at once under a
limit that fits k: exactly k granted, nothing held by the refused), the refusal naming
the level that stopped it, and the month's reset at local midnight in BUDGET_TZ.

Prices: ``test:m`` = 1 µUSD per token, so ``input_tokens=1, max_tokens=n-1`` holds n µUSD
(conftest).
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

from budget.errors import HoldRefused
from budget.ledger import Ledger
from budget.policy.plans import PlanLimits
from budget.protocol import HoldTicket
from budget.storage.store import Cursor
from budget.types import Level, Origin, RefusalReason, Usage, Window
from tests.budget.ledger_helpers import LedgerFactory
from tests.support.clocks import ManualClock

GROUP = -1001234567890

PLANS = {
    "free": PlanLimits("free", user_musd={Window.DAY: 10_000}),
    "pro": PlanLimits("pro", user_musd={Window.DAY: 50_000}, total_musd={Window.DAY: 70_000}),
}


async def attempt(
    ledger: Ledger, user: int, ceiling: int, *, chat: int | None = None
) -> HoldTicket | HoldRefused:
    """One operation + request + hold of ``ceiling`` µUSD (in group ``chat``, if any);
    the refusal is returned."""
    try:
        op = await ledger.begin_operation(user, Origin.CHAT, max_musd=10**9, chat_id=chat)
        req = await ledger.begin_request(op, "prompt")
        return await ledger.reserve(
            op, req, provider="test", model="m", input_tokens=1, max_tokens=ceiling - 1
        )
    except HoldRefused as exc:
        return exc


def granted(results: list[HoldTicket | HoldRefused]) -> list[HoldTicket]:
    return [r for r in results if isinstance(r, HoldTicket)]


def refusals(results: list[HoldTicket | HoldRefused]) -> list[HoldRefused]:
    return [r for r in results if isinstance(r, HoldRefused)]


async def test_ten_members_of_a_group_under_a_limit_that_fits_three(
    make_ledger: LedgerFactory,
) -> None:
    """A group day limit of $0.0100, ten members asking at once for $0.0030 each:
    exactly 3 held, every refusal names the group's day limit, the group's spend is
    within its limit and nobody's own buckets hold anything for the refused."""
    ledger = await make_ledger()
    await ledger.set_limit(Level.CHAT, str(GROUP), Window.DAY, 10_000)
    results = await asyncio.gather(*(attempt(ledger, u, 3_000, chat=GROUP) for u in range(10)))
    assert len(granted(results)) == 3
    assert {(r.refusal.level, r.refusal.window, r.refusal.scope) for r in refusals(results)} == {
        (Level.CHAT, Window.DAY, str(GROUP))
    }
    group = await ledger.payer_status(Level.CHAT, str(GROUP))
    day = next(b for b in group.buckets if b.window is Window.DAY)
    assert (day.limit_musd, day.held_musd, day.settled_musd) == (10_000, 9_000, 0)
    for hold in granted(results):
        await ledger.settle(hold.hold_id, Usage(1, 0, 2_999))
    group = await ledger.payer_status(Level.CHAT, str(GROUP))
    day = next(b for b in group.buckets if b.window is Window.DAY)
    assert (day.settled_musd, day.held_musd) == (9_000, 0)
    assert sum(group.spend_today_musd.values()) == 9_000 and group.members == 3
    held_by_users = 0
    for u in range(10):
        held_by_users += sum(b.held_musd for b in (await ledger.user_status(u)).buckets)
    assert held_by_users == 0
    assert (await ledger.store.audit())["mismatches"] == []


async def test_the_same_members_in_a_private_chat_are_not_held_on_the_group(
    make_ledger: LedgerFactory,
) -> None:
    """The group's level binds only messages in that group: a member's private chat
    (no ``chat_id``) passes even with the group's limit spent."""
    ledger = await make_ledger()
    await ledger.set_limit(Level.CHAT, str(GROUP), Window.DAY, 3_000)
    assert isinstance(await attempt(ledger, 1, 3_000, chat=GROUP), HoldTicket)
    refused = await attempt(ledger, 1, 3_000, chat=GROUP)
    assert isinstance(refused, HoldRefused) and refused.refusal.level is Level.CHAT
    assert isinstance(await attempt(ledger, 1, 3_000), HoldTicket)


async def test_group_and_member_limits_hold_all_or_nothing(make_ledger: LedgerFactory) -> None:
    """A member's own day limit that refuses first leaves nothing on the group, and the
    refusal names the member's level (the narrowest first)."""
    ledger = await make_ledger(user_daily_musd=4_000)
    await ledger.set_limit(Level.CHAT, str(GROUP), Window.DAY, 100_000)
    assert isinstance(await attempt(ledger, 1, 3_000, chat=GROUP), HoldTicket)
    refused = await attempt(ledger, 1, 3_000, chat=GROUP)
    assert isinstance(refused, HoldRefused)
    assert (refused.refusal.level, refused.refusal.reason) == (Level.USER, RefusalReason.BUSY)
    group = await ledger.payer_status(Level.CHAT, str(GROUP))
    assert sum(b.held_musd for b in group.buckets if b.window is Window.DAY) == 3_000


async def test_free_and_pro_users_each_stop_at_their_own_plan(make_ledger: LedgerFactory) -> None:
    """Two users, one on ``free`` ($0.0100 a day each) and one on ``pro`` ($0.0500), 40
    holds of $0.0030 each at once: free gets exactly 3, pro exactly 16, to the µUSD;
    each refusal is the user's own day limit."""
    ledger = await make_ledger(plans=PLANS, default_plan="free")
    await ledger.set_plan(2, "pro")
    burst = [attempt(ledger, 1 + i % 2, 3_000) for i in range(40)]
    results = await asyncio.gather(*burst)
    free = [r for i, r in enumerate(results) if i % 2 == 0]
    pro = [r for i, r in enumerate(results) if i % 2 == 1]
    assert (len(granted(free)), len(granted(pro))) == (3, 16)
    assert {(r.refusal.level, r.refusal.scope) for r in refusals(free)} == {(Level.USER, "1")}
    assert {(r.refusal.level, r.refusal.scope) for r in refusals(pro)} == {(Level.USER, "2")}
    one, two = await ledger.user_status(1), await ledger.user_status(2)
    assert (one.plan, two.plan) == ("free", "pro")
    day = {
        u.user_id: next(b for b in u.buckets if b.level is Level.USER and b.window is Window.DAY)
        for u in (one, two)
    }
    assert (day[1].limit_musd, day[1].held_musd) == (10_000, 9_000)
    assert (day[2].limit_musd, day[2].held_musd) == (50_000, 48_000)


async def test_a_plans_own_total_binds_everyone_on_it(make_ledger: LedgerFactory) -> None:
    """``pro``'s total of $0.0700 a day across its users: 30 pro users at once asking
    $0.0030 each get exactly 23; the refusals name the plan; a free user is not held on
    pro's level."""
    ledger = await make_ledger(plans=PLANS, default_plan="free")
    for u in range(100, 130):
        await ledger.set_plan(u, "pro")
    results = await asyncio.gather(*(attempt(ledger, u, 3_000) for u in range(100, 130)))
    assert len(granted(results)) == 23
    assert {(r.refusal.level, r.refusal.scope) for r in refusals(results)} == {(Level.PLAN, "pro")}
    assert isinstance(await attempt(ledger, 7, 3_000), HoldTicket)
    pro = await ledger.payer_status(Level.PLAN, "pro")
    assert sum(b.held_musd for b in pro.buckets if b.window is Window.DAY) == 69_000
    assert pro.members == 30


async def test_a_plan_that_ends_falls_back_to_the_default(
    make_ledger: LedgerFactory, clock: ManualClock
) -> None:
    """``/plan 5 pro until …``: pro's limit applies until then, the default plan's after;
    a plan no longer defined is the default plan too."""
    ledger = await make_ledger(plans=PLANS, default_plan="free")
    await ledger.set_plan(5, "pro", until=clock.now() + timedelta(hours=1))
    assert (await ledger.user_status(5)).plan == "pro"
    clock.advance(3_601)
    assert (await ledger.user_status(5)).plan == "free"
    with pytest.raises(ValueError, match="no plan named"):
        await ledger.set_plan(5, "gold")


async def test_a_plans_concurrency_cap(make_ledger: LedgerFactory) -> None:
    """A plan's ``max_inflight`` replaces USER_MAX_INFLIGHT for its members."""
    plans = {"free": PlanLimits("free", max_inflight=2)}
    ledger = await make_ledger(plans=plans, default_plan="free")
    ops = [await ledger.begin_operation(9, Origin.CHAT) for _ in range(2)]
    with pytest.raises(HoldRefused) as third:
        await ledger.begin_operation(9, Origin.CHAT)
    assert third.value.refusal.reason is RefusalReason.INFLIGHT
    for op in ops:
        await ledger.end_operation(op)


async def test_a_month_limit_exact_count_and_its_reset_at_local_midnight(
    make_ledger: LedgerFactory, clock: ManualClock
) -> None:
    """BUDGET_TZ Europe/Berlin, a user month limit of $0.0100: on 31 March (the month
    of the spring DST change) 8 holds at once of $0.0030 → exactly 3; the refusal names
    the month and resets at 1 April 00:00 CEST (22:00Z); a hold granted in the last
    second of March and settled after midnight is booked in March; in April the user
    starts afresh."""
    clock.set(datetime(2026, 3, 31, 21, 59, 0, tzinfo=UTC))  # 23:59 CEST
    ledger = await make_ledger(tz="Europe/Berlin", user_monthly_musd=10_000)
    results = await asyncio.gather(*(attempt(ledger, 3, 3_000) for _ in range(8)))
    assert len(granted(results)) == 3
    month_end = datetime(2026, 3, 31, 22, tzinfo=UTC)
    assert {
        (r.refusal.level, r.refusal.window, r.refusal.resets_at) for r in refusals(results)
    } == {(Level.USER, Window.MONTH, month_end)}
    clock.set(datetime(2026, 3, 31, 22, 0, 5, tzinfo=UTC))  # 00:00:05 CEST, April
    for hold in granted(results):
        await ledger.settle(hold.hold_id, Usage(1, 0, 2_999))
    status = await ledger.user_status(3)
    april = next(b for b in status.buckets if b.level is Level.USER and b.window is Window.MONTH)
    assert (april.key, april.settled_musd, april.remaining_musd) == ("2026-04", 0, 10_000)
    audit = await ledger.store.audit()
    march = [r for r in audit["scoped"] if r[:4] == ("user", "3", "month", "2026-03")]
    assert march == [("user", "3", "month", "2026-03", 9_000, 0, 0)]
    assert len(granted(await asyncio.gather(*(attempt(ledger, 3, 3_000) for _ in range(8))))) == 3


async def test_a_billing_cycle_day_cuts_the_month(
    make_ledger: LedgerFactory, clock: ManualClock
) -> None:
    """BUDGET_MONTH_START_DAY 15: spend of 14 March belongs to the cycle that began 15
    February, spend of 15 March to a new one."""
    clock.set(datetime(2026, 3, 14, 12, tzinfo=UTC))
    ledger = await make_ledger(global_monthly_musd=5_000, month_start_day=15)
    assert isinstance(await attempt(ledger, 1, 4_000), HoldTicket)
    refused = await attempt(ledger, 1, 4_000)
    assert isinstance(refused, HoldRefused)
    assert refused.refusal.resets_at == datetime(2026, 3, 15, tzinfo=UTC)
    clock.set(datetime(2026, 3, 15, 0, 0, 1, tzinfo=UTC))
    assert isinstance(await attempt(ledger, 1, 4_000), HoldTicket)
    keys = {r[3] for r in (await ledger.store.audit())["scoped"] if r[2] == "month"}
    assert keys == {"2026-02-15", "2026-03-15"}


async def test_a_hold_granted_before_months_books_no_month_bucket(
    make_ledger: LedgerFactory,
) -> None:
    """A hold an older version granted (no month key: migration 0025), ended by a newer
    process (on SQLite its start expires it first, then the settle corrects it), never
    touches a month bucket; the books still balance."""
    older = await make_ledger()
    hold = await attempt(older, 1, 500)
    assert isinstance(hold, HoldTicket)
    # what an older version wrote: no month key, no month bucket
    await _as_older_hold(older, hold.hold_id)
    newer = await make_ledger()
    await newer.settle(hold.hold_id, Usage(1, 0, 99))
    audit = await newer.store.audit()
    assert audit["mismatches"] == []
    assert not [r for r in audit["scoped"] if r[2] == "month" and (r[4] or r[5])]


async def _as_older_hold(ledger: Ledger, hold_id: str) -> None:
    """Make ``hold_id`` look granted by a version before months: its month key gone
    and its month buckets' held money with it."""

    def body(cur: Cursor) -> None:
        cur.execute("UPDATE budget_holds SET month_key = NULL WHERE hold_id = ?", (hold_id,))
        cur.execute("UPDATE budget_buckets SET held_musd = 0 WHERE win = 'month'")

    await ledger.store._write(body)


async def test_the_plan_of_a_user_is_theirs_while_it_lasts_then_the_default(
    make_ledger: LedgerFactory, clock: ManualClock
) -> None:
    """The plan a message is held on (read once per message): the stored plan until its
    end, the default plan without a row and after it; no plans at all: ``None``."""
    ledger = await make_ledger(plans=PLANS, default_plan="free")
    await ledger.set_plan(5, "pro", until=clock.now() + timedelta(hours=1))
    assert (await ledger.plan_of(5), await ledger.plan_of(6)) == ("pro", "free")
    clock.advance(3_601)
    assert await ledger.plan_of(5) == "free"
    plain = await make_ledger()
    assert await plain.plan_of(5) is None


async def test_the_view_of_every_users_plan_agrees_with_each_users_plan(
    make_ledger: LedgerFactory, clock: ManualClock
) -> None:
    """One read for every user (the features' view) says what ``plan_of`` says of each:
    a stored plan while it lasts, the default for everyone else and after the end."""
    ledger = await make_ledger(plans=PLANS, default_plan="free")
    await ledger.set_plan(5, "pro", until=clock.now() + timedelta(hours=1))
    await ledger.set_plan(7, "pro", until=clock.now() + timedelta(hours=3))
    held = await ledger.plans_held()
    assert (held.of(5), held.of(6), held.of(7)) == ("pro", "free", "pro")
    assert [held.of(u) for u in (5, 6, 7)] == [await ledger.plan_of(u) for u in (5, 6, 7)]
    clock.advance(3_601)
    later = await ledger.plans_held()
    assert (later.of(5), later.of(7)) == ("free", "pro")
    plain = await (await make_ledger()).plans_held()
    assert plain.of(5) is None
