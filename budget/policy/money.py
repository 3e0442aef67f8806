"""Money helpers, the one place for them: integer µUSD ⇄ decimal USD, exactly
(:class:`~decimal.Decimal`, never float).

* :func:`usd_to_musd` — operator-written USD (settings) → µUSD, half-even.
* :func:`musd_to_usd` — µUSD → exact decimal USD (for figures drawn or computed on).
* :func:`usd_to_exact_musd` — a provider's stated USD → decimal µUSD, fractions kept.
* :func:`round_musd` — decimal µUSD → integer µUSD, half-even.
* :func:`parse_usd` — an admin's typed amount (``0.05``, ``$0.05``) → µUSD, or ``None``.
* :func:`usd` — µUSD → ``$0.001234`` for replies (``None`` → ``—``).
* :func:`usd_text` — µUSD → ``$0.000700`` / ``-$1.500000`` for strings the ledger
  writes itself (kill reasons, events).
"""

from __future__ import annotations

import re
from decimal import ROUND_HALF_EVEN, Decimal

__all__ = [
    "musd_to_usd",
    "parse_usd",
    "round_musd",
    "usd",
    "usd_text",
    "usd_to_exact_musd",
    "usd_to_musd",
]

_MICRO = Decimal(1).scaleb(-6)


def usd_to_musd(usd: Decimal | None) -> int | None:
    """Convert a decimal USD amount to integer µUSD (half-even), ``None`` stays ``None``."""
    if usd is None:
        return None
    return int((usd * 1_000_000).quantize(Decimal(1), rounding=ROUND_HALF_EVEN))


def usd_to_exact_musd(usd: Decimal) -> Decimal:
    """``Decimal("0.0000015")`` USD → ``Decimal("1.5")`` µUSD: exact, fractions of a
    µUSD kept (a provider export's costs, summed before rounding)."""
    return usd.scaleb(6)


def round_musd(musd: Decimal) -> int:
    """Decimal µUSD → integer µUSD, half-even (exact when ``musd`` is whole)."""
    return int(musd.quantize(Decimal(1), rounding=ROUND_HALF_EVEN))


def musd_to_usd(musd: int) -> Decimal:
    """``1234`` µUSD → ``Decimal("0.001234")`` USD, exactly."""
    return Decimal(musd).scaleb(-6)


def usd(musd: int | None, places: int = 6) -> str:
    """``1234`` µUSD → ``$0.001234`` (exact at the default 6 places); ``None`` → ``—``."""
    if musd is None:
        return "—"
    value = musd_to_usd(musd).quantize(Decimal(1).scaleb(-places), ROUND_HALF_EVEN)
    return f"${value}"


def remaining_usd(musd: int | None) -> str:
    """What is left of a limit, never a negative amount: ``250`` → ``$0.000250``;
    ``-1750`` (spend above a limit lowered after it) → ``$0.000000 (over by $0.001750)``;
    ``None`` (no limit) → ``—``."""
    if musd is None or musd >= 0:
        return usd(musd)
    return f"{usd(0)} (over by {usd(-musd)})"


def usd_text(musd: int) -> str:
    """``700`` µUSD → ``"$0.000700"``; ``-1_500_000`` → ``"-$1.500000"``.

    Always six decimals, so every µUSD shows and nothing is rounded.
    """
    sign = "-" if musd < 0 else ""
    return f"{sign}${musd_to_usd(abs(musd)).quantize(_MICRO)}"


_AMOUNT = re.compile(r"\$?([0-9]{1,7})(?:\.([0-9]{1,6}))?")


def parse_usd(text: str) -> int | None:
    """``"0.05"`` / ``"$0.05"`` → 50000 µUSD, exactly.

    Returns ``None`` for anything else: signs, exponents, ``NaN``, underscores, digits
    that are not ASCII (``１``, ``١``: Python's ``\\d`` and ``int`` take them), more
    than 6 decimals (finer than 1 µUSD) or more than $1,000,000.
    """
    match = _AMOUNT.fullmatch(text.strip())
    if match is None:
        return None
    whole, frac = match.group(1), match.group(2) or ""
    musd = int(whole) * 1_000_000 + int(frac.ljust(6, "0"))
    return musd if musd <= 1_000_000 * 1_000_000 else None
