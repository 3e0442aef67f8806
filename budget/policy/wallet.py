"""The prepaid wallet's rules (``docs/decisions/240-the-wallet-is-a-balance-level.md``).

A wallet is one bucket of :attr:`budget.types.Level.WALLET` (scope: the user id) in
:attr:`budget.types.Window.BALANCE` (key ``""``: it never resets). Its limit is 0 and
every credit is booked as *negative* settled spend, so the rule every other bucket
follows holds it too: a hold fits when ``bound ≤ limit − settled − held − margins``,
i.e. ``bound ≤ credits − settled wallet spend − open wallet holds``, checked in the same
grant, all or nothing, as the other levels.

* **Split rule**: a paid hold is paid by the user's allowance (their user and plan
  levels) when it fits there; when it does not and the user has a wallet, the whole
  hold is paid by the wallet instead — the wallet level in place of the user and plan
  levels, every other level (group, team, global, provider) as before. One hold never
  has two payers. A free-tier hold (0 µUSD) always fits the allowance and takes nothing
  from the wallet.
* **Refund**: takes out of the wallet the payment's credit that is not yet spent —
  ``min(credit, credits − settled wallet spend)``. Money held by answers in flight counts
  as not yet spent: it is taken out too, so when they settle the wallet shows their
  actual cost below zero (at most what they held); nothing else makes it negative.

Pure: the stores read rows, ask these, and write. Money is integer µUSD.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from budget.policy.levels import ALLOWANCE_LEVELS
from budget.types import Level, Refusal, RefusalReason

__all__ = [
    "WalletCredit",
    "WalletRefund",
    "WalletState",
    "credit_of",
    "may_pay",
    "refund_amount",
    "wallet_refusal",
]


@dataclass(frozen=True, slots=True)
class WalletState:
    """One user's wallet now (µUSD).

    Attributes:
        credited_musd: every credit ever booked, less what refunds took out.
        spent_musd: settled wallet spend (holds paid by the wallet, at their actual
            cost; an expired one at its bound until settled).
        held_musd: open holds paid by the wallet (their ceilings).
        left_musd: ``credited − spent − held``: what a new hold may take (below zero
            only after a refund took out money that answers in flight then spent).
        payments: how many payments credited it (refunded ones included).
    """

    user_id: int
    credited_musd: int = 0
    spent_musd: int = 0
    held_musd: int = 0
    left_musd: int = 0
    payments: int = 0


@dataclass(frozen=True, slots=True)
class WalletCredit:
    """A payment's credit (one ``budget_wallet_credits`` row).

    Attributes:
        new: this call booked it (``False``: the charge was booked before; nothing
            changed).
    """

    charge_id: str
    user_id: int
    stars: int
    musd_per_star: int
    credit_musd: int
    new: bool = True


@dataclass(frozen=True, slots=True)
class WalletRefund:
    """What a refund did to a wallet.

    Attributes:
        removed_musd: taken out of the wallet (≤ ``credit_musd``).
        kept_musd: the part of the credit not taken out: already spent.
        new: this call refunded it (``False``: refunded before; nothing changed).
    """

    charge_id: str
    user_id: int
    stars: int
    credit_musd: int
    removed_musd: int
    new: bool = True

    @property
    def kept_musd(self) -> int:
        return self.credit_musd - self.removed_musd


def credit_of(stars: int, musd_per_star: int) -> int:
    """The µUSD ``stars`` Stars credit at ``musd_per_star`` (both > 0).

    Raises:
        ValueError: a count or a rate that is not positive.
    """
    if stars < 1 or musd_per_star < 1:
        raise ValueError(f"stars ({stars}) and µUSD per Star ({musd_per_star}) must be >= 1")
    return stars * musd_per_star


def may_pay(refused: Refusal) -> bool:
    """Whether the wallet may pay for a hold ``refused`` by the user's allowance: a money
    limit (spent or busy) of the user's own or their plan's level. A kill switch, an
    operation's cap or another payer's limit (group, team, global, provider) is never
    lifted by a wallet."""
    return refused.level in ALLOWANCE_LEVELS and refused.reason in (
        RefusalReason.LIMIT,
        RefusalReason.BUSY,
    )


def wallet_refusal(again: Refusal, first: Refusal) -> Refusal:
    """The refusal of a hold neither the allowance (``first``) nor the wallet paid.

    When the wallet is what stopped it (``again.level`` is the wallet), it names the
    wallet, with what is left there and the hold that did not fit, and resets when the
    allowance does (``first.resets_at``): a balance never resets by itself. Another
    level that stopped the wallet's try (the global day, a group) is named as it is.
    """
    if again.level is not Level.WALLET:
        return again
    return dataclasses.replace(again, resets_at=first.resets_at)


def refund_amount(credit_musd: int, balance_musd: int) -> int:
    """What a refund of a credit of ``credit_musd`` takes out of a wallet whose credits
    less settled spend are ``balance_musd``: the credit not yet spent, never below 0."""
    return max(0, min(credit_musd, balance_musd))
