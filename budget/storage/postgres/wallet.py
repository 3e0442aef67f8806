"""The wallet on PostgreSQL's hot path: a hold the user's allowance refused is tried
again, paid by the user's wallet (:mod:`budget.policy.wallet`'s split rule;
``docs/decisions/240-the-wallet-is-a-balance-level.md``). The wallet's try is a grant
like any other (:func:`budget.storage.postgres.holds.reserve`'s statements: the wallet's
bucket is one more row of the same upsert, locked in key order, checked in the same
statement), so it is all or nothing on its own; the first try wrote nothing.

Credits, refunds and reports are the portable SQL of :mod:`budget.storage.sql.wallet`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from budget.policy.wallet import may_pay, wallet_refusal
from budget.storage.store import RefusedStep

__all__ = ["paid_instead"]

T = TypeVar("T")

_HAS_WALLET = (
    "SELECT EXISTS (SELECT 1 FROM budget_buckets WHERE level = 'wallet' AND scope = $1"
    " AND win = 'balance' AND wkey = '')"
)


async def paid_instead(conn: Any, refused: RefusedStep, grant: Callable[[], Awaitable[T]]) -> T:
    """``grant()`` (the same hold with the wallet's scopes) when the allowance's
    ``refused`` may be paid by the user's wallet and they have one.

    Raises:
        RefusedStep: ``refused`` itself (the wallet may not pay, or there is none), or
            the wallet's try's refusal (:func:`budget.policy.wallet.wallet_refusal`).
    """
    user_id = refused.user_id
    if user_id is None or not may_pay(refused.refusal):
        raise refused
    if not await conn.fetchval(_HAS_WALLET, str(user_id)):
        raise refused
    try:
        return await grant()
    except RefusedStep as again:
        raise RefusedStep(
            wallet_refusal(again.refusal, refused.refusal), again.user_id, refused.refusal.plan
        ) from None
