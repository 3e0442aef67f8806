"""Display of integer µUSD amounts (exact: Decimal, never float)."""

from __future__ import annotations

from decimal import ROUND_HALF_EVEN, Decimal, InvalidOperation

__all__ = ["parse_usd", "usd"]


def usd(musd: int | None, places: int = 6) -> str:
    """``1234`` µUSD → ``$0.001234`` (exact at the default 6 places); ``None`` → ``—``."""
    if musd is None:
        return "—"
    value = Decimal(musd).scaleb(-6).quantize(Decimal(1).scaleb(-places), ROUND_HALF_EVEN)
    return f"${value}"


def parse_usd(text: str) -> int | None:
    """``"0.05"`` / ``"$0.05"`` → 50000 µUSD; ``None`` for anything that is not a
    non-negative decimal amount."""
    try:
        value = Decimal(text.strip().removeprefix("$"))
    except InvalidOperation:
        return None
    if not value.is_finite() or value < 0 or value > Decimal(1_000_000):
        return None
    return int((value * 1_000_000).quantize(Decimal(1), ROUND_HALF_EVEN))
