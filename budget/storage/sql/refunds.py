"""A Stars payment's refund — a wallet top-up's or a plan's — as a durable, resumable
state (both engines, each function inside one transaction): ``budget_wallet_refunds``
keyed by the charge id. Why and in which order:
``docs/decisions/300-a-refund-is-pending-until-telegram-answers.md`` (plans: 280).

* :func:`begin` inserts the ``pending`` row (once: the charge id is its key) *and* takes
  the credit not yet spent out of the wallet (:func:`budget.storage.sql.wallet.refund`)
  in the same transaction, the row claimed by the process that began it;
  :func:`begin_plan` inserts a plan payment's (``kind`` ``plan``: no credit moves; the
  bot takes the plan back once Telegram gave the Stars back);
* :func:`claim` lets one process hold a pending refund: free (``claimed_by`` NULL),
  held by this process already (which keeps in memory which of its refunds are in
  flight), or held by a process with no heartbeat in ``budget_processes`` since
  ``dead_before`` (SQLite has no heartbeats and one process per file: any earlier
  holder is dead). On PostgreSQL a second ``UPDATE`` of the row waits for the first's
  commit and re-checks its ``WHERE`` against the committed row, so two never both win;
* :func:`finish` marks it ``done`` (Telegram gave the Stars back, or had already);
  :func:`abandon` undoes the booking and deletes the row (Telegram refused: nothing
  changed, the admin may try again); :func:`release` drops the claim (Telegram did not
  answer: the next round tries again).

Money is integer µUSD; times epoch seconds of the ledger clock.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from datetime import datetime

from budget.config import LedgerConfig
from budget.policy.wallet import WalletRefund
from budget.storage.sql import wallet
from budget.storage.store import Cursor

__all__ = [
    "PLAN",
    "TOPUP",
    "RefundRow",
    "abandon",
    "begin",
    "begin_plan",
    "claim",
    "finish",
    "pending",
    "release",
    "row",
]

_COLS = (
    "r.charge_id, r.user_id, r.requested_by, r.state, r.removed_musd, r.telegram,"
    " COALESCE(c.stars, r.stars, 0), COALESCE(c.credit_musd, 0), r.kind"
)
#: A refund's kinds: a wallet top-up's (its credit taken out) or a plan's (the plan
#: taken back by the bot once Telegram gave the Stars back).
TOPUP, PLAN = "topup", "plan"


@dataclass(frozen=True, slots=True)
class RefundRow:
    """One ``budget_wallet_refunds`` row with its credit's stars and amount.

    Attributes:
        state: ``pending`` (booked, Telegram not yet answered yes) or ``done``.
        requested_by: the admin who asked (``None``: not known).
        telegram: what Telegram answered once done (``refunded`` or its error text).
        new: :func:`begin` inserted it now (``False``: it was there before).
        kind: :data:`TOPUP` or :data:`PLAN` (no credit: ``removed_musd`` and
            ``credit_musd`` 0, ``stars`` the payment's).
    """

    charge_id: str
    user_id: int
    requested_by: int | None
    state: str
    removed_musd: int
    telegram: str | None
    stars: int
    credit_musd: int
    new: bool = False
    kind: str = TOPUP

    @property
    def kept_musd(self) -> int:
        """The part of the credit that stays spent."""
        return self.credit_musd - self.removed_musd


def row(cur: Cursor, charge_id: str) -> RefundRow | None:
    """The refund of ``charge_id`` as it stands (``None``: none was begun)."""
    cur.execute(
        f"SELECT {_COLS} FROM budget_wallet_refunds r LEFT JOIN budget_wallet_credits c"  # noqa: S608 - fixed
        " ON c.charge_id = r.charge_id WHERE r.charge_id = ?",
        (charge_id,),
    )
    found = cur.fetchone()
    if found is None:
        return None
    charge, uid, by, state, removed, telegram, stars, amount, kind = found
    return RefundRow(
        str(charge),
        int(str(uid)),
        None if by is None else int(str(by)),
        str(state),
        int(str(removed)),
        None if telegram is None else str(telegram),
        int(str(stars)),
        int(str(amount)),
        kind=str(kind),
    )


def begin(
    cur: Cursor,
    cfg: LedgerConfig,
    now: datetime,
    charge_id: str,
    by: int | None,
    process_id: str,
) -> RefundRow | WalletRefund | None:
    """Begin the refund of the top-up ``charge_id``: the pending row and the booking.

    Returns:
        the new row (``new=True``, claimed by ``process_id``); the row begun before
        (``new=False``: nothing changed); a :class:`WalletRefund` with ``new=False``
        when the credit was refunded without a row (Telegram's own refund); ``None``
        when no top-up has that charge id.
    """
    before = row(cur, charge_id)
    if before is not None:
        return before
    booked = wallet.refund(cur, cfg, now, charge_id, by)
    if booked is None or not booked.new:
        return booked
    cur.execute(
        "INSERT INTO budget_wallet_refunds (charge_id, user_id, requested_by, requested_at,"
        " state, removed_musd, claimed_by) VALUES (?,?,?,?,'pending',?,?)",
        (charge_id, booked.user_id, by, now.timestamp(), booked.removed_musd, process_id),
    )
    began = row(cur, charge_id)
    assert began is not None
    return dataclasses.replace(began, new=True)


def begin_plan(
    cur: Cursor,
    now: datetime,
    charge_id: str,
    user_id: int,
    stars: int,
    by: int | None,
    process_id: str,
) -> RefundRow:
    """Begin the refund of the plan payment ``charge_id`` (``stars`` paid by
    ``user_id``): the pending row, claimed by ``process_id``; no µUSD moves (a plan is a
    set of limits). The row begun before, if any, is returned as it stands
    (``new=False``: nothing changed)."""
    before = row(cur, charge_id)
    if before is not None:
        return before
    cur.execute(
        "INSERT INTO budget_wallet_refunds (charge_id, user_id, requested_by, requested_at,"
        " state, removed_musd, claimed_by, kind, stars) VALUES (?,?,?,?,'pending',0,?,?,?)",
        (charge_id, user_id, by, now.timestamp(), process_id, PLAN, stars),
    )
    began = row(cur, charge_id)
    assert began is not None
    return dataclasses.replace(began, new=True)


def claim(cur: Cursor, charge_id: str, process_id: str, dead_before: float) -> bool:
    """Take the pending refund ``charge_id`` for ``process_id`` (module docstring):
    ``True`` for the one process that takes it."""
    cur.execute(
        "UPDATE budget_wallet_refunds SET claimed_by = ? WHERE charge_id = ?"
        " AND state = 'pending' AND (claimed_by IS NULL OR claimed_by = ? OR claimed_by"
        " NOT IN (SELECT process_id FROM budget_processes WHERE heartbeat_at > ?))",
        (process_id, charge_id, process_id, dead_before),
    )
    return cur.rowcount == 1


def pending(cur: Cursor, limit: int = 100) -> list[str]:
    """The charge ids of pending refunds, oldest first, at most ``limit``."""
    cur.execute(
        "SELECT charge_id FROM budget_wallet_refunds WHERE state = 'pending'"
        " ORDER BY requested_at, charge_id LIMIT ?",
        (limit,),
    )
    return [str(r[0]) for r in cur.fetchall()]


def finish(cur: Cursor, now: datetime, charge_id: str, process_id: str, telegram: str) -> bool:
    """Mark the refund ``charge_id`` held by ``process_id`` done (Telegram's answer
    ``telegram`` recorded). ``False``: not pending, or not held by it (nothing changed)."""
    cur.execute(
        "UPDATE budget_wallet_refunds SET state = 'done', finished_at = ?, telegram = ?,"
        " claimed_by = NULL WHERE charge_id = ? AND state = 'pending' AND claimed_by = ?",
        (now.timestamp(), telegram[:200], charge_id, process_id),
    )
    return cur.rowcount == 1


def abandon(cur: Cursor, cfg: LedgerConfig, now: datetime, charge_id: str, process_id: str) -> bool:
    """Telegram refused the refund ``charge_id`` held by ``process_id``: credit again
    what its booking took out (a top-up's) and delete its row. ``False``: not held
    (nothing changed)."""
    held = row(cur, charge_id)
    cur.execute(
        "DELETE FROM budget_wallet_refunds WHERE charge_id = ? AND state = 'pending'"
        " AND claimed_by = ?",
        (charge_id, process_id),
    )
    if cur.rowcount != 1:
        return False
    if held is not None and held.kind == TOPUP:
        wallet.unrefund(cur, cfg, now, charge_id)
    return True


def release(cur: Cursor, charge_id: str, process_id: str) -> bool:
    """Drop ``process_id``'s claim on the pending refund ``charge_id``."""
    cur.execute(
        "UPDATE budget_wallet_refunds SET claimed_by = NULL WHERE charge_id = ?"
        " AND state = 'pending' AND claimed_by = ?",
        (charge_id, process_id),
    )
    return cur.rowcount == 1
