"""A Stars payment is booked once by its charge id across replicas: two processes on one
PostgreSQL database (two engines) booking the same successful_payment at once make one
row, and exactly one of them records it applied (the one that tells the payer); a
refund is claimed once. Also the payload's terms against the plans file."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

from sqlalchemy.ext.asyncio import async_sessionmaker

from bot.access.stars import (
    PaymentTerms,
    StarPayments,
    check_terms,
    invoice_payload,
    parse_payload,
)
from budget.kernel.db import create_engine
from budget.plans import parse_plans
from tests.support.clocks import ManualClock

PLANS = parse_plans(
    'default = "free"\n[free]\n[pro]\nday_usd = 1\nstars = 250\nperiod_days = 30\n', "test"
)


def test_the_payload_carries_the_terms_and_is_checked_against_the_file() -> None:
    pro = PLANS.get("pro")
    payload = invoice_payload(pro)
    assert payload == "plan:pro:250:30" and len(payload.encode()) <= 128
    assert parse_payload(payload) == PaymentTerms("pro", 250, 30)
    assert check_terms(PLANS, payload, "XTR", 250) is pro
    assert check_terms(PLANS, payload, "XTR", 249) is None  # not the price paid
    assert check_terms(PLANS, payload, "USD", 250) is None
    assert check_terms(PLANS, "plan:pro:300:30", "XTR", 300) is None  # not the price now
    assert check_terms(PLANS, "plan:free:1:30", "XTR", 1) is None  # not for sale
    assert parse_payload("plan:pro:250") is None and parse_payload("x" * 200) is None


async def test_two_replicas_book_one_charge_once(pg_migrated_url: str) -> None:
    clock = ManualClock(datetime(2026, 3, 1, 12, tzinfo=UTC))
    engines = [create_engine(pg_migrated_url) for _ in range(2)]
    try:
        replicas = [
            StarPayments(async_sessionmaker(e, expire_on_commit=False), clock) for e in engines
        ]
        terms = PaymentTerms("pro", 250, 30)
        booked = await asyncio.gather(
            *(
                r.book("stxCHARGE1", 10, terms, "plan:pro:250:30", current=("free", None))
                for r in replicas
            )
        )
        assert sorted(b.new for b in booked) == [False, True]
        assert {b.payment.plan_until for b in booked} == {clock.now() + timedelta(days=30)}
        applied = await asyncio.gather(*(r.mark_applied("stxCHARGE1") for r in replicas))
        assert sorted(applied) == [False, True]
        assert len(await replicas[0].recent()) == 1
        refunds = await asyncio.gather(*(r.claim_refund("stxCHARGE1", 1) for r in replicas))
        assert sorted(refunds) == [False, True]
        # a payment for the plan the user is on until later extends it from then
        later = clock.now() + timedelta(days=30)
        extended = await replicas[1].book(
            "stxCHARGE2", 10, terms, "plan:pro:250:30", current=("pro", later)
        )
        assert extended.new and extended.payment.plan_from == later
        stored = await replicas[0].get("stxCHARGE2")
        assert stored is not None and stored.plan_until == later + timedelta(days=30)
    finally:
        for engine in engines:
            await engine.dispose()


async def test_live_subscriptions_are_one_charge_per_subscription(pg_migrated_url: str) -> None:
    """Each subscription Telegram still holds counts once, by its latest charge: a
    renewal (``renews_at`` one period after a charge's, within the slack) hides the
    charge it renews, a second subscription does not; a refunded charge and one whose
    period ended are not live; what /cancel_renewal stopped is kept per charge."""
    clock = ManualClock(datetime(2026, 3, 1, 12, tzinfo=UTC))
    engine = create_engine(pg_migrated_url)
    try:
        rows = StarPayments(async_sessionmaker(engine, expire_on_commit=False), clock)
        terms = PaymentTerms("max", 300, 30, renews=True)
        now = clock.now()

        async def charge(charge_id: str, renews_in: timedelta) -> None:
            await rows.book(
                charge_id,
                10,
                terms,
                "sub:max:300:30",
                current=("free", None),
                until_at_least=now + renews_in,
            )
            clock.advance(1)

        await charge("stxENDED", timedelta(days=-1))
        await charge("stxFIRST", timedelta(days=30))
        await charge("stxRENEWAL", timedelta(days=60, hours=5))
        await charge("stxSECOND", timedelta(days=20))
        await charge("stxREFUNDED", timedelta(days=25))
        assert await rows.claim_refund("stxREFUNDED", 1)
        live = await rows.live_subscriptions(10)
        assert [p.charge_id for p in live] == ["stxSECOND", "stxRENEWAL"]
        assert await rows.live_subscriptions(11) == []
        await rows.mark_renewal("stxSECOND", cancelled=True)
        stopped = {p.charge_id: p.renewal_cancelled_at for p in await rows.live_subscriptions(10)}
        assert stopped == {"stxSECOND": clock.now(), "stxRENEWAL": None}
        await rows.mark_renewal("stxSECOND", cancelled=False)
        assert all(p.renewal_cancelled_at is None for p in await rows.live_subscriptions(10))
    finally:
        await engine.dispose()
