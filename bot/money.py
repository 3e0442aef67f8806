"""Display of integer µUSD amounts (exact: Decimal, never float)."""

from __future__ import annotations

import re
from decimal import ROUND_HALF_EVEN, Decimal

__all__ = ["parse_usd", "usd"]


def usd(musd: int | None, places: int = 6) -> str:
    """``1234`` µUSD → ``$0.001234`` (exact at the default 6 places); ``None`` → ``—``."""
    if musd is None:
        return "—"
    value = Decimal(musd).scaleb(-6).quantize(Decimal(1).scaleb(-places), ROUND_HALF_EVEN)
    return f"${value}"


_AMOUNT = re.compile(r"\$?(\d{1,7})(?:\.(\d{1,6}))?")


def parse_usd(text: str) -> int | None:
    """``"0.05"`` / ``"$0.05"`` → 50000 µUSD, exactly.

    Returns ``None`` for anything else: signs, exponents, ``NaN``, underscores, more
    than 6 decimals (finer than 1 µUSD) or more than $1,000,000.
    """
    match = _AMOUNT.fullmatch(text.strip())
    if match is None:
        return None
    whole, frac = match.group(1), match.group(2) or ""
    musd = int(whole) * 1_000_000 + int(frac.ljust(6, "0"))
    return musd if musd <= 1_000_000 * 1_000_000 else None
