"""A team's guaranteed minimum of a global window, the warning when team or plan limits
add up to more than the global limit, and the plan label of spend and refusals — on
both backends. Prices: ``test:m`` = 1 µUSD per token (conftest)."""

from __future__ import annotations

import asyncio

from budget.errors import HoldRefused
from budget.policy.plans import PlanLimits
from budget.protocol import HoldTicket
from budget.types import Level, RefusalReason, Usage, Window
from tests.budget.ledger_helpers import LedgerFactory
from tests.budget.test_ledger_levels import attempt, granted, refusals


async def test_a_guarantee_keeps_its_share_while_others_burst(make_ledger: LedgerFactory) -> None:
    """Global day $0.0300, team ``ops`` guaranteed $0.0090: 20 outsiders at once asking
    $0.0030 each get exactly 7 (the $0.0210 not kept for ops), then 3 ops members still
    get theirs, and the global limit is never passed."""
    ledger = await make_ledger(global_daily_musd=30_000)
    for member in (501, 502, 503, 504):
        await ledger.team_add("ops", member)
    await ledger.set_guarantee("ops", Window.DAY, 9_000)
    outsiders = await asyncio.gather(*(attempt(ledger, u, 3_000) for u in range(20)))
    assert len(granted(outsiders)) == 7
    assert {r.refusal.level for r in refusals(outsiders)} == {Level.GLOBAL}
    members = await asyncio.gather(*(attempt(ledger, u, 3_000) for u in (501, 502, 503, 504)))
    assert len(granted(members)) == 3  # the fourth does not fit the global limit itself
    glob = next(b for b in (await ledger.status()).buckets if b.window is Window.DAY)
    assert glob.held_musd == 30_000 == glob.limit_musd


async def test_a_guarantee_used_up_reserves_nothing_more(make_ledger: LedgerFactory) -> None:
    """Once the team has spent its guarantee, outsiders share the rest; settling below
    the ceiling gives the team's share back to be kept again."""
    ledger = await make_ledger(global_daily_musd=10_000)
    await ledger.team_add("ops", 9)
    await ledger.set_guarantee("ops", Window.DAY, 4_000)
    hold = await attempt(ledger, 9, 4_000)
    assert isinstance(hold, HoldTicket)
    assert isinstance(await attempt(ledger, 1, 6_000), HoldTicket)  # nothing reserved now
    await ledger.settle(hold.hold_id, Usage(1, 0, 999))  # ops used 1,000: 3,000 kept again
    refused = await attempt(ledger, 2, 2)
    assert isinstance(refused, HoldRefused) and refused.refusal.level is Level.GLOBAL
    assert isinstance(await attempt(ledger, 9, 3_000), HoldTicket)


async def test_limits_that_add_up_to_more_than_the_global_one_are_named(
    make_ledger: LedgerFactory,
) -> None:
    """Two teams of $0.60 a day under a global $1.00, a plan of 3 members at $0.50 each:
    both are named, with the sums; nothing is named once they fit."""
    plans = {"free": PlanLimits("free"), "pro": PlanLimits("pro", user_musd={Window.DAY: 500_000})}
    ledger = await make_ledger(global_daily_musd=1_000_000, plans=plans, default_plan="free")
    await ledger.team_add("a", 1)
    await ledger.team_add("b", 2)
    await ledger.set_limit(Level.TEAM, "a", Window.DAY, 600_000)
    await ledger.set_limit(Level.TEAM, "b", Window.DAY, 600_000)
    for user in (10, 11, 12):
        await ledger.set_plan(user, "pro")
    lines = await ledger.limit_warnings()
    assert lines == [
        "the teams' limits per day add up to $1.200000, more than the global day limit $1.000000",
        "the plans' limits per day add up to $1.500000, more than the global day limit $1.000000",
    ]
    await ledger.set_limit(Level.TEAM, "b", Window.DAY, 400_000)
    await ledger.set_limit(Level.PLAN, "pro", Window.DAY, 900_000)  # its total instead
    assert await ledger.limit_warnings() == []


async def test_spend_and_refusals_carry_the_plan(make_ledger: LedgerFactory) -> None:
    """The status counts today's settled spend and refusals per plan: a pro user's
    spend under ``pro``, a free user's refusal under ``free``."""
    plans = {
        "free": PlanLimits("free", user_musd={Window.DAY: 1_000}),
        "pro": PlanLimits("pro"),
    }
    ledger = await make_ledger(plans=plans, default_plan="free")
    await ledger.set_plan(2, "pro")
    hold = await attempt(ledger, 2, 500)
    assert isinstance(hold, HoldTicket)
    await ledger.settle(hold.hold_id, Usage(1, 0, 299))
    refused = await attempt(ledger, 1, 2_000)
    assert isinstance(refused, HoldRefused)
    assert (refused.refusal.reason, refused.refusal.plan) == (RefusalReason.LIMIT, "free")
    tally = (await ledger.status()).by_plan
    assert tally.spend_musd == {"pro": 300}
    assert tally.refusals == {("free", "limit"): 1}


async def test_a_guarantee_keeps_no_more_than_the_team_may_spend(
    make_ledger: LedgerFactory,
) -> None:
    """Global day $0.0100, team ``ops`` limited to $0.0020 a day and guaranteed $0.0080:
    only $0.0020 is kept, so an outsider may hold $0.0080; past that the refusal says
    a guarantee kept the rest (``kept_musd``) while the limit itself would have fit it,
    and the admin's warnings name the guarantee over the team's limit."""
    ledger = await make_ledger(global_daily_musd=10_000)
    await ledger.team_add("ops", 9)
    await ledger.set_limit(Level.TEAM, "ops", Window.DAY, 2_000)
    await ledger.set_guarantee("ops", Window.DAY, 8_000)
    assert isinstance(await attempt(ledger, 1, 8_000), HoldTicket)
    refused = await attempt(ledger, 2, 1_000)
    assert isinstance(refused, HoldRefused)
    assert (refused.refusal.level, refused.refusal.kept_musd) == (Level.GLOBAL, 2_000)
    assert refused.refusal.remaining_musd == 0
    assert isinstance(await attempt(ledger, 9, 2_000), HoldTicket)  # the team's own share
    over = await attempt(ledger, 3, 2)
    assert isinstance(over, HoldRefused) and over.refusal.kept_musd == 0  # nothing kept now
    assert (
        "team ops's guarantee of $0.008000 per day is more than its own day limit $0.002000:"
        " the team cannot spend more than its limit, so only $0.002000 of the global day is"
        " kept for it"
    ) in await ledger.limit_warnings()
