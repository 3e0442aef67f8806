"""The prepaid wallet of :class:`budget.ledger.Ledger`: a payment's credit booked once by
its charge id, a refund, a user's wallet read (the rules: :mod:`budget.policy.wallet`;
``docs/decisions/240-the-wallet-is-a-balance-level.md``).

:class:`LedgerWallet` is a base of the ledger, as :mod:`budget.settle` and
:mod:`budget.admin` are: the same store, clock and storage-failure guard. Holds paid by
a wallet need nothing here: :meth:`budget.ledger.Ledger.reserve` takes the wallet when
the user's allowance does not fit. Money is integer µUSD.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from budget.part import LedgerPart
from budget.policy.rules import check_user_id, utc
from budget.policy.wallet import WalletCredit, WalletRefund, WalletState, credit_of
from budget.storage.sql.refunds import RefundRow

__all__ = ["CreditEntry", "LedgerWallet", "RefundRow"]

#: The longest charge id stored (Telegram's are far shorter).
CHARGE_ID_MAX = 128


@dataclass(frozen=True, slots=True)
class CreditEntry:
    """One payment's credit as booked (``budget_wallet_credits``); times aware UTC."""

    charge_id: str
    user_id: int
    stars: int
    musd_per_star: int
    credit_musd: int
    removed_musd: int
    refunded_at: datetime | None
    credited_at: datetime
    refunded_by: int | None
    #: ``pending`` while a /refund waits for Telegram, ``done`` after, ``None``: no
    #: /refund (Telegram's own refund, or none)
    refund_state: str | None = None


def _check_charge(charge_id: str) -> None:
    if not charge_id or len(charge_id) > CHARGE_ID_MAX:
        raise ValueError(f"a charge id is 1 to {CHARGE_ID_MAX} characters")


class LedgerWallet(LedgerPart):
    """Wallet steps of a :class:`~budget.ledger.Ledger` (module docstring).

    Every async method may raise :class:`~budget.errors.LedgerUnavailable` (fail
    closed), as the ledger's other methods.
    """

    __slots__ = ()

    async def credit_wallet(
        self, charge_id: str, user_id: int, stars: int, musd_per_star: int
    ) -> WalletCredit:
        """Credit ``user_id``'s wallet with ``stars`` × ``musd_per_star`` µUSD for the
        payment ``charge_id`` — once: the same charge again (a repeated update, another
        replica, a restart) changes nothing and answers ``new=False`` with the credit as
        first booked.

        Raises:
            ValueError: an empty or over-long charge id, a count or rate below 1, a
                user id outside the signed 64-bit range.
        """
        _check_charge(charge_id)
        check_user_id(user_id)
        credit_of(stars, musd_per_star)
        now = self.clock.now()
        return await self._guarded(
            self.store.wallet_credit(now, charge_id, user_id, stars, musd_per_star)
        )

    async def refund_wallet(self, charge_id: str, *, by: int | None = None) -> WalletRefund | None:
        """Take the refunded payment ``charge_id``'s credit out of its wallet, as far as
        it is not spent yet (:func:`budget.policy.wallet.refund_amount`), once.

        Returns:
            what the refund did; ``None`` when no wallet was credited by that charge;
            ``new=False`` when it was refunded before (nothing changed).
        """
        _check_charge(charge_id)
        return await self._guarded(self.store.wallet_refund(self.clock.now(), charge_id, by))

    async def unrefund_wallet(self, charge_id: str) -> bool:
        """Undo :meth:`refund_wallet` when Telegram refused to give the Stars back: what
        it took out is credited again. ``False``: the charge was not refunded."""
        _check_charge(charge_id)
        return await self._guarded(self.store.wallet_unrefund(self.clock.now(), charge_id))

    async def begin_refund(
        self, charge_id: str, *, by: int | None = None
    ) -> RefundRow | WalletRefund | None:
        """Record the refund of the top-up ``charge_id`` as *pending* and take its
        unspent credit out of the wallet, in one transaction, once; the row is claimed
        by this process (``docs/decisions/300-a-refund-is-pending-until-telegram-answers.md``).

        Returns:
            the row (``new=True``: begun now; ``new=False``: begun before, pending or
            done, nothing changed); a :class:`WalletRefund` with ``new=False`` when the
            credit was refunded without one (Telegram's own refund); ``None``: no top-up
            has that charge id.
        """
        _check_charge(charge_id)
        return await self._guarded(self.store.refund_begin(self.clock.now(), charge_id, by))

    async def begin_plan_refund(
        self, charge_id: str, user_id: int, stars: int, *, by: int | None = None
    ) -> RefundRow:
        """Record the refund of the plan payment ``charge_id`` (``stars`` paid by
        ``user_id``) as *pending*, claimed by this process, once; no µUSD moves (the
        plan is taken back by the caller once Telegram gave the Stars back).

        Returns:
            the row (``new=True``: begun now; ``new=False``: begun before, as it stands).

        Raises:
            ValueError: an empty or over-long charge id, a user id out of range.
        """
        _check_charge(charge_id)
        check_user_id(user_id)
        now = self.clock.now()
        return await self._guarded(self.store.refund_begin_plan(now, charge_id, user_id, stars, by))

    async def claim_refund(self, charge_id: str) -> bool:
        """Hold the pending refund ``charge_id`` for this process: ``True`` when it was
        free, this process's already (the caller knows which of its own are in flight)
        or its holder is dead (no heartbeat for PROCESS_DEAD_AFTER_SECONDS; on SQLite
        any earlier process)."""
        dead_before = self.clock.now().timestamp() - self.store.config.process_dead_after_s
        return await self._guarded(self.store.refund_claim(charge_id, dead_before))

    async def finish_refund(self, charge_id: str, telegram: str) -> bool:
        """Telegram gave the Stars back (``telegram``: its answer): mark this process's
        pending refund done. ``False``: it was not held here (nothing changed)."""
        now = self.clock.now()
        return await self._guarded(self.store.refund_finish(now, charge_id, telegram))

    async def abandon_refund(self, charge_id: str) -> bool:
        """Telegram refused: credit again what the booking took out, forget the pending
        refund (the admin may try again). ``False``: not held here (nothing changed)."""
        return await self._guarded(self.store.refund_abandon(self.clock.now(), charge_id))

    async def release_refund(self, charge_id: str) -> bool:
        """Telegram did not answer: drop this process's claim (the next round retries)."""
        return await self._guarded(self.store.refund_release(charge_id))

    async def refund_state(self, charge_id: str) -> RefundRow | None:
        """The refund of ``charge_id`` as it stands (``None``: none begun)."""
        return await self._guarded(self.store.refund_row(charge_id))

    async def pending_refunds(self) -> list[str]:
        """The charge ids of pending refunds, oldest first."""
        return await self._guarded(self.store.refunds_pending())

    async def wallet(self, user_id: int) -> WalletState:
        """``user_id``'s wallet now (all zero without one)."""
        check_user_id(user_id)
        return await self._guarded(self.store.wallet_state(user_id))

    async def wallet_credits(
        self, user_id: int | None = None, *, limit: int = 1000
    ) -> list[CreditEntry]:
        """Wallet credits, newest first (one user's, or everyone's), at most ``limit``."""
        rows = await self._guarded(self.store.wallet_credits(user_id, limit))
        out = []
        for charge, uid, stars, rate, amount, removed, refunded, credited, by, state in rows:
            at = utc(float(str(credited)))
            assert at is not None
            out.append(
                CreditEntry(
                    str(charge),
                    int(str(uid)),
                    int(str(stars)),
                    int(str(rate)),
                    int(str(amount)),
                    int(str(removed)),
                    None if refunded is None else utc(float(str(refunded))),
                    at,
                    None if by is None else int(str(by)),
                    None if state is None else str(state),
                )
            )
        return out
