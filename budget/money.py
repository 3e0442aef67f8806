"""Text of integer µUSD amounts for operator-facing strings the ledger writes itself
(kill reasons, events). Exact: :class:`~decimal.Decimal`, never float."""

from __future__ import annotations

from decimal import Decimal

__all__ = ["usd_text"]

_MICRO = Decimal(1).scaleb(-6)


def usd_text(musd: int) -> str:
    """``700`` µUSD → ``"$0.000700"``; ``-1_500_000`` → ``"-$1.500000"``.

    Always six decimals, so every µUSD shows and nothing is rounded.
    """
    sign = "-" if musd < 0 else ""
    return f"{sign}${Decimal(abs(musd)).scaleb(-6).quantize(_MICRO)}"
