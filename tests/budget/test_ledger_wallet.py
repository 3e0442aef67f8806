"""The prepaid wallet as a ledger level, on both backends
(``docs/decisions/240-the-wallet-is-a-balance-level.md``): a payment credits once by its
charge id; a paid hold the user's allowance does not fit is paid by the wallet, all or
nothing with the other levels; settlement returns the difference; free-tier holds take
nothing from it; concurrent holds never overdraw it (a Hypothesis property); a refund
takes out only the credit not yet spent.

Prices: ``test:m`` = 1 µUSD per token, so ``input_tokens=1, max_tokens=n-1`` holds n µUSD
(conftest).
"""

from __future__ import annotations

import asyncio
import itertools

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from budget.errors import HoldRefused
from budget.ledger import Ledger
from budget.protocol import HoldTicket
from budget.types import Level, Origin, RefusalReason, Usage, Window
from tests.budget.ledger_helpers import LedgerFactory

RATE = 1_000  # µUSD per Star in these tests
_users = itertools.count(10_000)


async def attempt(
    ledger: Ledger, user: int, ceiling: int, *, provider: str = "test", model: str = "m"
) -> HoldTicket | HoldRefused:
    """One operation + request + hold of ``ceiling`` µUSD; the refusal is returned."""
    try:
        op = await ledger.begin_operation(user, Origin.CHAT, max_musd=10**9)
        req = await ledger.begin_request(op, "prompt")
        return await ledger.reserve(
            op, req, provider=provider, model=model, input_tokens=1, max_tokens=ceiling - 1
        )
    except HoldRefused as exc:
        return exc


async def test_a_payment_credits_once_by_its_charge_id(make_ledger: LedgerFactory) -> None:
    """The same charge three times, two of them at once: one credit, the later calls
    answer ``new=False`` with the credit as first booked."""
    ledger = await make_ledger()
    first, second = await asyncio.gather(
        ledger.credit_wallet("ch-1", 7, 50, RATE), ledger.credit_wallet("ch-1", 7, 50, RATE)
    )
    third = await ledger.credit_wallet("ch-1", 7, 50, RATE)
    assert sorted([first.new, second.new, third.new]) == [False, False, True]
    assert {c.credit_musd for c in (first, second, third)} == {50_000}
    wallet = await ledger.wallet(7)
    assert (wallet.credited_musd, wallet.left_musd, wallet.payments) == (50_000, 50_000, 1)
    assert (await ledger.wallet(8)).left_musd == 0
    assert (await ledger.store.audit())["mismatches"] == []


async def test_the_wallet_pays_what_the_allowance_does_not_fit(make_ledger: LedgerFactory) -> None:
    """A user day limit of $0.0100: three $0.0030 holds on the allowance, the fourth on
    the wallet (the user's buckets untouched by it); settled below its ceiling, the
    wallet gets the difference back; a hold the wallet does not fit either names the
    wallet, what is left there and the allowance's reset."""
    ledger = await make_ledger(user_daily_musd=10_000)
    await ledger.credit_wallet("ch-2", 1, 5, RATE)  # $0.0050
    results = [await attempt(ledger, 1, 3_000) for _ in range(4)]
    assert all(isinstance(r, HoldTicket) for r in results)
    user_day = next(
        b
        for b in (await ledger.user_status(1)).buckets
        if b.level is Level.USER and b.window is Window.DAY
    )
    assert user_day.held_musd == 9_000
    wallet = await ledger.wallet(1)
    assert (wallet.held_musd, wallet.left_musd) == (3_000, 2_000)
    paid_by_wallet = results[3]
    assert isinstance(paid_by_wallet, HoldTicket)
    await ledger.settle(paid_by_wallet.hold_id, Usage(1, 0, 1_199))  # $0.0012
    wallet = await ledger.wallet(1)
    assert (wallet.spent_musd, wallet.held_musd, wallet.left_musd) == (1_200, 0, 3_800)
    refused = await attempt(ledger, 1, 4_000)
    assert isinstance(refused, HoldRefused)
    r = refused.refusal
    assert (r.level, r.window, r.reason) == (Level.WALLET, Window.BALANCE, RefusalReason.LIMIT)
    assert (r.remaining_musd, r.ceiling_musd) == (3_800, 4_000)
    assert r.resets_at == user_day.resets_at
    assert (await ledger.store.audit())["mismatches"] == []


async def test_no_wallet_and_other_levels_keep_their_refusals(make_ledger: LedgerFactory) -> None:
    """Without a wallet the allowance's refusal stands; with one, a global limit that
    stops the wallet's try is named as the global one (a wallet lifts only the user's
    own allowance)."""
    ledger = await make_ledger(user_daily_musd=1_000, global_daily_musd=5_000)
    refused = await attempt(ledger, 2, 3_000)
    assert isinstance(refused, HoldRefused) and refused.refusal.level is Level.USER
    await ledger.credit_wallet("ch-3", 2, 100, RATE)
    assert isinstance(await attempt(ledger, 2, 3_000), HoldTicket)
    refused = await attempt(ledger, 2, 3_000)
    assert isinstance(refused, HoldRefused) and refused.refusal.level is Level.GLOBAL


async def test_free_tier_holds_take_nothing_from_the_wallet(make_ledger: LedgerFactory) -> None:
    """A user whose allowance is spent: a free-tier hold still goes through at $0 on the
    allowance, and the wallet is untouched."""
    ledger = await make_ledger(user_daily_musd=0)
    await ledger.credit_wallet("ch-4", 3, 10, RATE)
    hold = await attempt(ledger, 3, 3_000, provider="free", model="f")
    assert isinstance(hold, HoldTicket) and hold.ceiling_musd == 0
    await ledger.settle(hold.hold_id, Usage(1, 0, 2_999))
    wallet = await ledger.wallet(3)
    assert (wallet.spent_musd, wallet.held_musd, wallet.left_musd) == (0, 0, 10_000)


async def test_ten_holds_at_once_on_a_wallet_that_fits_three(make_ledger: LedgerFactory) -> None:
    """$0.0100 in the wallet, no allowance, ten $0.0030 holds at once: exactly three."""
    ledger = await make_ledger(user_daily_musd=0)
    await ledger.credit_wallet("ch-5", 4, 10, RATE)
    results = await asyncio.gather(*(attempt(ledger, 4, 3_000) for _ in range(10)))
    granted = [r for r in results if isinstance(r, HoldTicket)]
    assert len(granted) == 3
    levels = {r.refusal.level for r in results if isinstance(r, HoldRefused)}
    assert levels == {Level.WALLET}
    assert (await ledger.wallet(4)).left_musd == 1_000


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    credit_stars=st.integers(1, 40),
    ceilings=st.lists(st.integers(2, 15_000), min_size=1, max_size=12),
)
async def test_concurrent_holds_never_overdraw_the_wallet(
    make_ledger: LedgerFactory, credit_stars: int, ceilings: list[int]
) -> None:
    """Any credit, any holds at once (no allowance: each is the wallet's): what is held
    never passes the credit, settling every hold at its ceiling leaves the wallet at
    ≥ 0, and the buckets agree with the holds. One ledger per test, a new user per
    example."""
    ledger = await make_ledger(user_daily_musd=0)
    user = next(_users)
    await ledger.credit_wallet(f"p-{user}", user, credit_stars, RATE)
    credit = credit_stars * RATE
    results = await asyncio.gather(*(attempt(ledger, user, c) for c in ceilings))
    granted = [r for r in results if isinstance(r, HoldTicket)]
    held = sum(h.ceiling_musd for h in granted)
    assert held <= credit
    assert all(r.refusal.level is Level.WALLET for r in results if isinstance(r, HoldRefused))
    assert (await ledger.wallet(user)).left_musd == credit - held
    for h in granted:
        await ledger.settle(h.hold_id, Usage(1, 0, h.ceiling_musd - 1))
    wallet = await ledger.wallet(user)
    assert (wallet.spent_musd, wallet.held_musd, wallet.left_musd) == (held, 0, credit - held)
    assert (await ledger.store.audit())["mismatches"] == []


async def test_a_refund_takes_out_only_credit_not_yet_spent(make_ledger: LedgerFactory) -> None:
    """Two payments of $0.0100; $0.0120 spent and $0.0030 held in flight: refunding one
    takes out $0.0080 (what is left of the credits once the settled spend is paid), so
    the wallet is at −$0.0030 while the hold is open and at −$0.0010 once it settles at
    $0.0010; a second refund of it changes nothing; undone, the $0.0080 is back."""
    ledger = await make_ledger(user_daily_musd=0)
    await ledger.credit_wallet("ch-a", 5, 10, RATE)
    await ledger.credit_wallet("ch-b", 5, 10, RATE)
    spent = await attempt(ledger, 5, 12_000)
    assert isinstance(spent, HoldTicket)
    await ledger.settle(spent.hold_id, Usage(1, 0, 11_999))
    open_hold = await attempt(ledger, 5, 3_000)
    assert isinstance(open_hold, HoldTicket)
    refund = await ledger.refund_wallet("ch-a", by=99)
    assert refund is not None and refund.new
    assert (refund.removed_musd, refund.kept_musd) == (8_000, 2_000)
    assert (await ledger.wallet(5)).left_musd == -3_000
    refused = await attempt(ledger, 5, 100)
    assert isinstance(refused, HoldRefused) and refused.refusal.level is Level.WALLET
    await ledger.settle(open_hold.hold_id, Usage(1, 0, 999))
    wallet = await ledger.wallet(5)
    assert (wallet.credited_musd, wallet.spent_musd, wallet.left_musd) == (12_000, 13_000, -1_000)
    again = await ledger.refund_wallet("ch-a")
    assert again is not None and not again.new and again.removed_musd == 8_000
    assert await ledger.refund_wallet("no-such") is None
    assert (await ledger.store.audit())["mismatches"] == []
    assert await ledger.unrefund_wallet("ch-a")
    assert not await ledger.unrefund_wallet("ch-a")
    assert (await ledger.wallet(5)).left_musd == 7_000
    entries = await ledger.wallet_credits(5)
    assert [(e.charge_id, e.credit_musd, e.refunded_at) for e in entries] == [
        ("ch-a", 10_000, None),
        ("ch-b", 10_000, None),
    ]
    assert (await ledger.store.audit())["mismatches"] == []


async def test_a_refund_of_unspent_credit_takes_it_all(make_ledger: LedgerFactory) -> None:
    """Nothing spent: the whole credit goes (once, though asked twice at once), the
    wallet is at $0 and refuses."""
    ledger = await make_ledger(user_daily_musd=0)
    await ledger.credit_wallet("ch-c", 6, 10, RATE)
    both = await asyncio.gather(ledger.refund_wallet("ch-c"), ledger.refund_wallet("ch-c"))
    assert sorted(r.new for r in both if r is not None) == [False, True]
    refund = next(r for r in both if r is not None and r.new)
    assert (refund.removed_musd, refund.kept_musd) == (10_000, 0)
    assert (await ledger.wallet(6)).left_musd == 0
    refused = await attempt(ledger, 6, 100)
    assert isinstance(refused, HoldRefused) and refused.refusal.level is Level.WALLET
