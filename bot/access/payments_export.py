"""``/budget export``'s third file: the Telegram Stars payments and the wallets'
bookings of a period, one CSV row each, in time order (``docs/access.md#the-wallet``).

Kinds (:data:`PAYMENT_COLUMNS` ``kind``): ``plan_payment`` and ``plan_refund`` (a plan
bought, ``star_payments``), ``wallet_credit`` (a top-up credited, ``+`` µUSD),
``wallet_refund`` (a top-up refunded: what left the wallet, ``−`` µUSD; ``note`` says
how much of the credit was already spent), ``wallet_spend`` (an attempt the wallet paid,
booked settled or expired: ``−`` its cost; ``hold_id`` is its row in the attempts file).
``wallet_musd`` is the change of the wallet's balance; it is empty for plans (a plan is a
set of limits, not credit). A wallet credit is money users prepaid, not provider spend:
the provider's bill is reconciled with the attempts, never with these rows.

Written with :func:`budget.books.csv_out.csv_writer` (formula-like text cells quoted).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TextIO

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from bot.storage.tables import StarPayment
from budget.books.csv_out import csv_writer
from budget.books.periods import Period, zone
from budget.storage.tables import holds, wallet_credits

__all__ = ["PAYMENT_COLUMNS", "write_payments"]

PAYMENT_COLUMNS = (
    "kind",
    "utc_time",
    "local_time",
    "user_id",
    "charge_id",
    "stars",
    "plan",
    "musd_per_star",
    "wallet_musd",
    "hold_id",
    "provider",
    "model",
    "note",
)


@dataclass(frozen=True, slots=True)
class _Row:
    at: datetime
    kind: str
    user_id: int
    charge_id: str = ""
    stars: int | str = ""
    plan: str = ""
    rate: int | str = ""
    wallet_musd: int | str = ""
    hold_id: str = ""
    provider: str = ""
    model: str = ""
    note: str = ""


def _aware(when: datetime) -> datetime:
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)


def _epoch(ts: float) -> datetime:
    return datetime.fromtimestamp(float(ts), UTC)


async def _plan_rows(engine: AsyncEngine, period: Period) -> list[_Row]:
    out: list[_Row] = []
    async with engine.connect() as conn:
        t = StarPayment.__table__.c
        found = sa.select(StarPayment.__table__).where(
            sa.or_(
                sa.and_(t.paid_at >= period.start, t.paid_at < period.end),
                sa.and_(t.refunded_at >= period.start, t.refunded_at < period.end),
            )
        )
        for r in await conn.execute(found):
            paid = _aware(r.paid_at)
            if period.start <= paid < period.end:
                out.append(_Row(paid, "plan_payment", r.user_id, r.charge_id, r.stars, r.plan))
            if r.refunded_at is not None and period.start <= _aware(r.refunded_at) < period.end:
                out.append(
                    _Row(
                        _aware(r.refunded_at),
                        "plan_refund",
                        r.user_id,
                        r.charge_id,
                        r.stars,
                        r.plan,
                    )
                )
    return out


async def _wallet_rows(engine: AsyncEngine, period: Period) -> list[_Row]:
    lo, hi = period.start.timestamp(), period.end.timestamp()
    out: list[_Row] = []
    async with engine.connect() as conn:
        w = wallet_credits.c
        found = sa.select(wallet_credits).where(
            sa.or_(
                sa.and_(w.credited_at >= lo, w.credited_at < hi),
                sa.and_(w.refunded_at >= lo, w.refunded_at < hi),
            )
        )
        for r in await conn.execute(found):
            credited = _epoch(r.credited_at)
            if lo <= r.credited_at < hi:
                out.append(
                    _Row(
                        credited,
                        "wallet_credit",
                        r.user_id,
                        r.charge_id,
                        r.stars,
                        rate=r.musd_per_star,
                        wallet_musd=r.credit_musd,
                    )
                )
            if r.refunded_at is not None and lo <= r.refunded_at < hi:
                kept = r.credit_musd - r.removed_musd
                out.append(
                    _Row(
                        _epoch(r.refunded_at),
                        "wallet_refund",
                        r.user_id,
                        r.charge_id,
                        r.stars,
                        rate=r.musd_per_star,
                        wallet_musd=-r.removed_musd,
                        note=f"{kept} µUSD of the credit already spent",
                    )
                )
        h = holds.c
        spent = sa.select(
            h.hold_id,
            h.user_id,
            h.provider,
            h.model,
            h.actual_musd,
            h.granted_at,
            h.state,
            h.scopes,
        ).where(
            h.granted_at >= lo,
            h.granted_at < hi,
            h.state.in_(("settled", "expired")),
            h.scopes.like('%["wallet"%'),
        )
        for r in await conn.execute(spent):
            if not any(level == "wallet" for level, _ in json.loads(r.scopes)):
                continue
            note = "estimated (expired at its bound)" if r.state == "expired" else ""
            out.append(
                _Row(
                    _epoch(r.granted_at),
                    "wallet_spend",
                    r.user_id,
                    hold_id=r.hold_id,
                    provider=r.provider,
                    model=r.model,
                    wallet_musd=-int(r.actual_musd or 0),
                    note=note,
                )
            )
    return out


async def write_payments(engine: AsyncEngine, period: Period, out: TextIO) -> int:
    """Write the payments and wallet bookings of ``period`` to ``out`` (opened with
    ``newline=""``); returns how many rows.

    Raises:
        sqlalchemy.exc.SQLAlchemyError: the database could not be read.
    """
    rows = await _plan_rows(engine, period) + await _wallet_rows(engine, period)
    rows.sort(key=lambda r: (r.at, r.kind, r.charge_id, r.hold_id))
    local = zone(period.tz)
    writer = csv_writer(out)
    writer.writerow(PAYMENT_COLUMNS)
    for r in rows:
        writer.writerow(
            (
                r.kind,
                r.at.isoformat(timespec="seconds"),
                r.at.astimezone(local).isoformat(timespec="seconds"),
                r.user_id,
                r.charge_id,
                r.stars,
                r.plan,
                r.rate,
                r.wallet_musd,
                r.hold_id,
                r.provider,
                r.model,
                r.note,
            )
        )
    return len(rows)
