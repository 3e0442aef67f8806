"""The wallet's portable SQL (both engines, each function inside one transaction):
whether a user has a wallet, its state, a payment's credit booked once by its charge
id, a refund and its undoing. The rules: :mod:`budget.policy.wallet`; why:
``docs/decisions/240-the-wallet-is-a-balance-level.md``.

A wallet's bucket is ``budget_buckets`` row ``('wallet', user id, 'balance', '')``; a
credit is booked there as negative settled spend, in the same transaction as its
``budget_wallet_credits`` row (inserted once: ``ON CONFLICT DO NOTHING`` on the charge
id), so a payment delivered twice, to two replicas, or again after a restart credits
once. A refund first locks the bucket row (a no-op UPDATE: on PostgreSQL a grant's
upsert of the same row waits for it; SQLite's writer runs one step at a time), then
reads, then writes. Money is integer µUSD; times epoch seconds of the ledger clock.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from budget.config import LedgerConfig
from budget.policy.rules import Bucket, Scope, check_hold
from budget.policy.wallet import (
    WalletCredit,
    WalletRefund,
    WalletState,
    may_pay,
    refund_amount,
    wallet_refusal,
)
from budget.policy.windows import HoldKeys
from budget.storage.sql.rows import book, event
from budget.storage.store import Cursor
from budget.types import Level, Refusal

__all__ = ["credit", "exists", "instead", "refund", "state", "unrefund", "user_credits"]

_KEY = "level = 'wallet' AND scope = ? AND win = 'balance' AND wkey = ''"
#: The wallet's bucket booked by :func:`budget.storage.sql.rows.book` (its one window
#: has the key "" whatever the hold keys).
_NO_KEYS = HoldKeys("", "", None)
_COLS = "charge_id, user_id, stars, musd_per_star, credit_musd, removed_musd, refunded_at"


def exists(cur: Cursor, user_id: int) -> bool:
    """Whether ``user_id`` has a wallet (a payment ever credited one)."""
    cur.execute(f"SELECT 1 FROM budget_buckets WHERE {_KEY}", (str(user_id),))  # noqa: S608 - fixed
    return cur.fetchone() is not None


def instead(
    cur: Cursor,
    user_id: int,
    refused: Refusal,
    scopes: list[Scope],
    asked: int,
    buckets_of: Callable[[list[Scope]], list[Bucket]],
) -> list[Scope] | Refusal:
    """The wallet's ``scopes`` (:func:`budget.policy.levels.scopes_for` with
    ``wallet=True``) when it pays a hold of ``asked`` µUSD (bound) that the user's
    allowance ``refused`` (:mod:`budget.policy.wallet`'s split rule), or the refusal to
    record: ``refused`` itself when the wallet may not pay (no wallet, not the
    allowance's refusal), else the wallet's try's
    (:func:`budget.policy.wallet.wallet_refusal`). ``buckets_of``: the buckets of some
    scopes now, as the grant checks them (margins, guarantees)."""
    if not may_pay(refused) or not exists(cur, user_id):
        return refused
    again = check_hold(buckets_of(scopes), asked)
    return scopes if again is None else wallet_refusal(again, refused)


def _balance(cur: Cursor, user_id: int) -> tuple[int, int]:
    """``(settled, held)`` of the wallet's bucket (settled = spent − credits)."""
    cur.execute(
        f"SELECT settled_musd, held_musd FROM budget_buckets WHERE {_KEY}",  # noqa: S608 - fixed
        (str(user_id),),
    )
    row = cur.fetchone()
    return (0, 0) if row is None else (int(row[0]), int(row[1]))


def _net_credits(cur: Cursor, user_id: int) -> tuple[int, int]:
    """``(credits less refunds, payments)`` of ``user_id``."""
    cur.execute(
        "SELECT COALESCE(SUM(credit_musd - removed_musd), 0), COUNT(*)"
        " FROM budget_wallet_credits WHERE user_id = ?",
        (user_id,),
    )
    net, count = cur.fetchone()
    return int(net), int(count)


def state(cur: Cursor, user_id: int) -> WalletState:
    """``user_id``'s wallet now (all zero without one)."""
    settled, held = _balance(cur, user_id)
    net, count = _net_credits(cur, user_id)
    return WalletState(user_id, net, settled + net, held, -settled - held, count)


def credit(
    cur: Cursor,
    cfg: LedgerConfig,
    now: datetime,
    charge_id: str,
    user_id: int,
    stars: int,
    musd_per_star: int,
) -> WalletCredit:
    """Credit ``user_id``'s wallet with ``stars`` × ``musd_per_star`` once for the charge
    ``charge_id`` (a second call changes nothing and returns the row as booked)."""
    amount = stars * musd_per_star
    cur.execute(
        f"INSERT INTO budget_wallet_credits ({_COLS[: _COLS.rindex(', removed_musd')]},"  # noqa: S608 - fixed
        " credited_at) VALUES (?,?,?,?,?,?) ON CONFLICT (charge_id) DO NOTHING",
        (charge_id, user_id, stars, musd_per_star, amount, now.timestamp()),
    )
    if cur.rowcount != 1:
        row = _credit_row(cur, charge_id)
        assert row is not None  # the conflict was on this very row
        return WalletCredit(
            str(row[0]),
            int(str(row[1])),
            int(str(row[2])),
            int(str(row[3])),
            int(str(row[4])),
            new=False,
        )
    book(cur, [(Level.WALLET, str(user_id))], _NO_KEYS, settled=-amount)
    detail = f"credit {amount} µUSD ({stars} Stars) charge {charge_id[:64]}"
    event(cur, cfg.tz, now, "wallet_credit", user_id=user_id, detail=detail)
    return WalletCredit(charge_id, user_id, stars, musd_per_star, amount)


def _credit_row(cur: Cursor, charge_id: str) -> tuple[object, ...] | None:
    cur.execute(
        f"SELECT {_COLS} FROM budget_wallet_credits WHERE charge_id = ?",  # noqa: S608 - fixed
        (charge_id,),
    )
    row = cur.fetchone()
    return None if row is None else tuple(row)


def _lock(cur: Cursor, user_id: int) -> None:
    """Lock the wallet's bucket row (a no-op UPDATE) before reading it."""
    cur.execute(
        f"UPDATE budget_buckets SET held_musd = held_musd WHERE {_KEY}",  # noqa: S608 - fixed
        (str(user_id),),
    )


def refund(
    cur: Cursor, cfg: LedgerConfig, now: datetime, charge_id: str, by: int | None
) -> WalletRefund | None:
    """Refund the credit of ``charge_id``: take out what of it is not yet spent
    (:func:`budget.policy.wallet.refund_amount`), once. ``None``: no such credit;
    ``new=False``: refunded before (nothing changed)."""
    row = _credit_row(cur, charge_id)
    if row is None:
        return None
    user_id, stars, amount = int(str(row[1])), int(str(row[2])), int(str(row[4]))
    _lock(cur, user_id)
    row = _credit_row(cur, charge_id)  # as it stands under the lock
    assert row is not None
    if row[6] is not None:
        return WalletRefund(charge_id, user_id, stars, amount, int(str(row[5])), new=False)
    settled, _held = _balance(cur, user_id)
    removed = refund_amount(amount, -settled)
    cur.execute(
        "UPDATE budget_wallet_credits SET refunded_at = ?, refunded_by = ?, removed_musd = ?"
        " WHERE charge_id = ? AND refunded_at IS NULL",
        (now.timestamp(), by, removed, charge_id),
    )
    book(cur, [(Level.WALLET, str(user_id))], _NO_KEYS, settled=removed)
    detail = f"refund took out {removed} of {amount} µUSD, charge {charge_id[:64]}"
    event(cur, cfg.tz, now, "wallet_refund", user_id=user_id, detail=detail)
    return WalletRefund(charge_id, user_id, stars, amount, removed)


def unrefund(cur: Cursor, cfg: LedgerConfig, now: datetime, charge_id: str) -> bool:
    """Undo :func:`refund` (Telegram refused to give the Stars back): what it took out
    is credited again. ``False``: it was not refunded."""
    row = _credit_row(cur, charge_id)
    if row is None or row[6] is None:
        return False
    user_id = int(str(row[1]))
    _lock(cur, user_id)
    row = _credit_row(cur, charge_id)  # as it stands under the lock
    assert row is not None
    cur.execute(
        "UPDATE budget_wallet_credits SET refunded_at = NULL, refunded_by = NULL,"
        " removed_musd = 0 WHERE charge_id = ? AND refunded_at IS NOT NULL",
        (charge_id,),
    )
    if cur.rowcount != 1:
        return False
    removed = int(str(row[5]))
    book(cur, [(Level.WALLET, str(user_id))], _NO_KEYS, settled=-removed)
    detail = f"refund undone: {removed} µUSD credited again, charge {charge_id[:64]}"
    event(cur, cfg.tz, now, "wallet_unrefund", user_id=user_id, detail=detail)
    return True


def user_credits(
    cur: Cursor, user_id: int | None = None, limit: int = 1000
) -> list[tuple[object, ...]]:
    """Credits, newest first (one user's, or everyone's): ``(charge_id, user_id, stars,
    musd_per_star, credit_musd, removed_musd, refunded_at, credited_at, refunded_by,
    refund state)`` (the state of its ``budget_wallet_refunds`` row: ``pending``,
    ``done``, or ``None`` without one)."""
    where, args = ("", (limit,)) if user_id is None else ("WHERE c.user_id = ?", (user_id, limit))
    cols = ", ".join(f"c.{c.strip()}" for c in _COLS.split(","))
    cur.execute(
        f"SELECT {cols}, c.credited_at, c.refunded_by, r.state FROM budget_wallet_credits c"  # noqa: S608 - fixed
        f" LEFT JOIN budget_wallet_refunds r ON r.charge_id = c.charge_id {where}"
        " ORDER BY c.credited_at DESC, c.charge_id LIMIT ?",
        args,
    )
    return [tuple(r) for r in cur.fetchall()]
