"""Read-only reports over the ledger's tables that the status API does not carry.

Portable SQLAlchemy Core on the app's async engine (the ledger's writer keeps the
hot path; these reads never block it under WAL).
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from budget.models import buckets
from budget.types import Level, Window
from budget.windows import window_keys

__all__ = ["top_users"]


async def top_users(
    engine: AsyncEngine, *, now: datetime, tz: str, n: int = 10
) -> list[tuple[int, int, int]]:
    """The ``n`` users with the most money settled + held today (BUDGET_TZ).

    Returns:
        ``[(user_id, settled_musd, held_musd), …]``, largest first.
    """
    day_key = window_keys(now, tz).key(Window.DAY)
    total = buckets.c.settled_musd + buckets.c.held_musd
    query = (
        select(buckets.c.scope, buckets.c.settled_musd, buckets.c.held_musd)
        .where(
            buckets.c.level == Level.PERSONAL.value,
            buckets.c.win == Window.DAY.value,
            buckets.c.wkey == day_key,
            total > 0,
        )
        .order_by(total.desc())
        .limit(n)
    )
    async with engine.connect() as conn:
        rows = (await conn.execute(query)).all()
    return [(int(scope), int(settled), int(held)) for scope, settled, held in rows]
