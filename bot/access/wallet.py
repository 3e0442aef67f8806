"""Telegram Stars that top up the prepaid wallet (``docs/access.md#the-wallet``; the
ledger's side: :mod:`budget.wallet`, ``docs/decisions/240-the-wallet-is-a-balance-level.md``).

The invoice's payload names its terms, ``wallet:<stars>:<µUSD per Star>`` (at most 128
bytes), so the pre-checkout and the payment are checked against the operator's settings
as they stand then (``WALLET_TOPUP_STARS``, ``WALLET_MUSD_PER_STAR``), not as they stood
at ``/topup``: a changed rate or a withdrawn amount is refused at the pre-checkout
(nothing charged), or refunded at once if it changed between the pre-checkout and the
payment. A payment is credited once by its charge id, in the ledger
(:meth:`budget.wallet.LedgerWallet.credit_wallet`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from budget.ledger import Ledger

__all__ = ["WALLET_PREFIX", "WalletSales", "WalletTerms", "parse_wallet_payload"]

#: What every wallet invoice's payload starts with (a plan's starts with ``plan:``).
WALLET_PREFIX = "wallet:"
_PAYLOAD = re.compile(r"wallet:([1-9][0-9]{0,8}):([1-9][0-9]{0,8})")
_STARS = "XTR"


@dataclass(frozen=True, slots=True)
class WalletTerms:
    """What a wallet invoice sells: ``stars`` Stars credited at ``musd_per_star``."""

    stars: int
    musd_per_star: int

    @property
    def credit_musd(self) -> int:
        return self.stars * self.musd_per_star

    @property
    def payload(self) -> str:
        return f"{WALLET_PREFIX}{self.stars}:{self.musd_per_star}"


def parse_wallet_payload(payload: str) -> WalletTerms | None:
    """``wallet:<stars>:<µUSD per Star>`` → :class:`WalletTerms` (``None``: not one)."""
    match = _PAYLOAD.fullmatch(payload)
    return None if match is None else WalletTerms(int(match[1]), int(match[2]))


class WalletSales:
    """The wallet top-ups on sale and the ledger they are credited in.

    Args:
        ledger: the ledger (the wallets are its level).
        offers: WALLET_TOPUP_STARS, the amounts ``/topup`` offers (Stars).
        musd_per_star: WALLET_MUSD_PER_STAR, what one Star credits (µUSD); ``None``:
            no top-ups are sold.
    """

    def __init__(self, ledger: Ledger, offers: tuple[int, ...], musd_per_star: int | None) -> None:
        self.ledger = ledger
        self.offers = tuple(sorted(set(offers))) if musd_per_star else ()
        self.musd_per_star = musd_per_star

    def __repr__(self) -> str:
        return f"WalletSales(offers={self.offers}, musd_per_star={self.musd_per_star})"

    def terms(self, stars: int) -> WalletTerms | None:
        """The terms of a top-up of ``stars`` now (``None``: not offered)."""
        if self.musd_per_star is None or stars not in self.offers:
            return None
        return WalletTerms(stars, self.musd_per_star)

    def check(self, payload: str, currency: str, total: int) -> WalletTerms | None:
        """The terms a wallet payment buys when they are still offered as invoiced (the
        currency Stars, the amount paid, the same rate); ``None`` otherwise."""
        terms = parse_wallet_payload(payload)
        if currency != _STARS or terms is None or terms.stars != total:
            return None
        return terms if self.terms(terms.stars) == terms else None
