"""The PostgreSQL ledger keeps the outstanding holds' margins in their bucket rows
(``budget_buckets.margin_musd``, migration 0021): a grant adds its margin, its settle,
release or expiry takes it out, a refusal changes nothing, and a hold an older version
granted without booking its margin is never taken out twice (its margin joins the
buckets at the next sweep)."""

from __future__ import annotations

import asyncpg
import pytest

from budget.errors import HoldRefused
from budget.ledger import Ledger
from budget.protocol import HoldTicket
from budget.storage.postgres.rows import asyncpg_dsn
from budget.types import Origin, Usage
from tests.budget.ledger_helpers import LedgerFactory


@pytest.fixture
def pg_url(pg_ledger_url: str) -> str:
    """The database ``make_ledger`` built its ledgers on (``pg_ledger_url``: the same one)."""
    return pg_ledger_url


pytestmark = pytest.mark.parametrize("make_ledger", ["postgres"], indirect=True)


async def _reserve(ledger: Ledger, user: int, bound: int) -> HoldTicket:
    """A hold of 10 + 90 = 100 µUSD estimated, its bound ``bound`` + 90 (test:m)."""
    op = await ledger.begin_operation(user, Origin.CHAT, max_musd=10**9, max_requests=10**6)
    req = await ledger.begin_request(op, f"fp-{user}-{bound}")
    return await ledger.reserve(
        op,
        req,
        provider="test",
        model="m",
        input_tokens=10,
        max_tokens=90,
        input_bound_tokens=bound,
    )


async def _margins(url: str) -> dict[tuple[str, str, str], int]:
    """``(level, scope, window) → margin_musd`` of every bucket."""
    conn = await asyncpg.connect(asyncpg_dsn(url))
    try:
        rows = await conn.fetch("SELECT level, scope, win, margin_musd FROM budget_buckets")
    finally:
        await conn.close()
    return {(r[0], r[1], r[2]): int(r[3]) for r in rows}


async def _sql(url: str, sql: str, *args: object) -> None:
    conn = await asyncpg.connect(asyncpg_dsn(url))
    try:
        await conn.execute(sql, *args)
    finally:
        await conn.close()


def _everywhere(user: int, margin: int) -> dict[tuple[str, str, str], int]:
    return {
        ("user", str(user), "day"): margin,
        ("user", str(user), "hour"): margin,
        ("user", str(user), "month"): margin,
        ("global", "", "day"): margin,
        ("global", "", "hour"): margin,
        ("global", "", "month"): margin,
    }


async def test_margins_follow_the_held_holds(make_ledger: LedgerFactory, pg_url: str) -> None:
    """Three holds of user 1 with margins 300, 200, 100; a fourth refused (its bound
    does not fit after the others' margins) books nothing; settle, release and expiry
    each take their hold's margin out, leaving 0."""
    ledger = await make_ledger(global_daily_musd=1_200, hold_ttl_s=90.0)
    a = await _reserve(ledger, 1, 310)  # margin 300: bound 400
    b = await _reserve(ledger, 1, 210)  # margin 200: bound 300
    c = await _reserve(ledger, 1, 110)  # margin 100: bound 200
    assert await _margins(pg_url) == _everywhere(1, 600)
    with pytest.raises(HoldRefused):  # 3 × 100 held + 600 margins + bound 400 > 1,200
        await _reserve(ledger, 2, 310)
    assert await _margins(pg_url) == _everywhere(1, 600)  # user 2's rows rolled back too
    await ledger.settle(a.hold_id, Usage(input_tokens=50, output_tokens=20))
    assert await _margins(pg_url) == _everywhere(1, 300)
    await ledger.release(b.hold_id)
    assert await _margins(pg_url) == _everywhere(1, 100)
    ledger.clock.advance(91)  # type: ignore[attr-defined]
    assert await ledger.sweep() == 1
    assert await _margins(pg_url) == _everywhere(1, 0)
    # the late settle of the expired hold has no margin left to take out
    await ledger.settle(c.hold_id, Usage(input_tokens=10, output_tokens=5))
    assert await _margins(pg_url) == _everywhere(1, 0)


async def test_an_older_versions_hold_is_never_taken_out_twice(
    make_ledger: LedgerFactory, pg_url: str
) -> None:
    """Two holds as an older version grants them (margin on the hold only, not booked in
    its buckets): the release of one takes nothing out of the buckets (no negative
    margin), the next sweep books the other's margin there, and its expiry takes it
    out again."""
    ledger = await make_ledger(global_daily_musd=10_000, hold_ttl_s=90.0)
    old = [await _reserve(ledger, 1, 310), await _reserve(ledger, 1, 110)]
    await _sql(pg_url, "UPDATE budget_holds SET margin_booked = 0")
    await _sql(pg_url, "UPDATE budget_buckets SET margin_musd = 0")
    await ledger.release(old[0].hold_id)
    assert await _margins(pg_url) == _everywhere(1, 0)
    assert await ledger.sweep() == 0  # nothing expired; the margin of old[1] adopted
    assert await _margins(pg_url) == _everywhere(1, 100)
    ledger.clock.advance(91)  # type: ignore[attr-defined]
    assert await ledger.sweep() == 1
    assert await _margins(pg_url) == _everywhere(1, 0)
