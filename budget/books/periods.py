"""Shared pieces of the books (export, reconcile, corrections): periods, price lookups,
the error tree.

::

    BooksError                 (a BudgetError) — every refusal of export/reconcile/apply
    ├── PeriodError            a period or zone that cannot be read ("2026-13", "Mars/Base")
    └── ExportFileError        a provider export that cannot be used (too big, empty,
                               malformed, unknown layout, another provider's file);
                               nothing was changed

Periods are cut in an IANA zone: ``YYYY-MM-DD`` is that local day, ``YYYY-MM`` that
local month; the bounds are aware UTC instants ``[start, end)``. Money is integer µUSD
unless a name says otherwise.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from importlib.metadata import PackageNotFoundError, version
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from budget.errors import BudgetConfigError, BudgetError
from budget.policy.windows import local_instant
from budget.pricing.prices import ModelRates, PriceCard

__all__ = [
    "BooksError",
    "ExportFileError",
    "Period",
    "PeriodError",
    "parse_period",
    "price_source",
    "rates_at",
    "zone",
]


class BooksError(BudgetError):
    """Export, reconcile or correction refused; ``str(exc)`` is operator-facing and
    names what is needed (never a secret, never a stack trace)."""


class PeriodError(BooksError):
    """A period (``YYYY-MM-DD`` / ``YYYY-MM``) or an IANA zone that cannot be read."""


class ExportFileError(BooksError):
    """A provider usage export that cannot be used; nothing was read into the ledger."""


def zone(name: str) -> ZoneInfo:
    """The IANA zone ``name``.

    Raises:
        PeriodError: not a known IANA zone.
    """
    if not name or len(name) > 64 or name.startswith(("/", ".")) or ".." in name:
        raise PeriodError(f"unknown IANA timezone {name[:64]!r}")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise PeriodError(f"unknown IANA timezone {name!r}") from None


@dataclass(frozen=True, slots=True)
class Period:
    """A local day or month in ``tz``: ``[start, end)`` as aware UTC instants.

    Attributes:
        label: ``"2026-01-14"`` or ``"2026-01"``.
        tz: the IANA zone the period is cut in.
        start: first instant (UTC).
        end: first instant after the period (UTC).
    """

    label: str
    tz: str
    start: datetime
    end: datetime

    def contains(self, at: datetime) -> bool:
        """True when ``at`` (aware) falls in ``[start, end)``."""
        return self.start <= at < self.end


_DAY = re.compile(r"([0-9]{4})-([0-9]{2})-([0-9]{2})")
_MONTH = re.compile(r"([0-9]{4})-([0-9]{2})")


def _local_midnight(d: date, tz: ZoneInfo) -> datetime:
    return local_instant(d, time(0), tz)


def parse_period(text: str | None, tz_name: str, now: datetime) -> Period:
    """``"2026-01-14"`` (a local day), ``"2026-01"`` (a local month) or ``None``/``""``
    (today, local to ``tz_name`` at ``now``).

    Raises:
        PeriodError: an unknown zone or a period in another shape or out of range.
    """
    tz = zone(tz_name)
    raw = (text or "").strip()
    today = now.astimezone(tz).date()
    if not raw:
        return Period(today.isoformat(), tz_name, _local_midnight(today, tz), _next_day(today, tz))
    if not (_DAY.fullmatch(raw) or _MONTH.fullmatch(raw)):
        raise PeriodError(f"period {raw[:32]!r}: write YYYY-MM-DD (a day) or YYYY-MM (a month)")
    try:
        first = date.fromisoformat(raw if len(raw) == 10 else f"{raw}-01")
    except ValueError:
        raise PeriodError(f"no such date {raw!r}") from None
    if first > today:  # also keeps the end below date.max (9999-12 ends in year 10000)
        raise PeriodError(f"{raw} has not begun yet: today is {today.isoformat()} ({tz_name})")
    if len(raw) == 10:
        return Period(raw, tz_name, _local_midnight(first, tz), _next_day(first, tz))
    nxt = date(first.year + (first.month == 12), first.month % 12 + 1, 1)
    return Period(raw, tz_name, _local_midnight(first, tz), _local_midnight(nxt, tz))


def _next_day(d: date, tz: ZoneInfo) -> datetime:
    return _local_midnight(d + timedelta(days=1), tz)


def _genai_version() -> str:
    try:
        return version("genai-prices")
    except PackageNotFoundError:  # pragma: no cover - metadata missing only in odd installs
        return "unknown"


def price_source(rates: ModelRates | None) -> str:
    """Where a price line comes from, for reports: ``"genai-prices 0.0.35"`` (the
    package's bundled snapshot), ``"override: PRICE_OVERRIDES"``, ``"override: <page>"``
    (shipped in :data:`budget.pricing.prices.DEFAULT_OVERRIDES`), or ``"unknown"``."""
    if rates is None:
        return "unknown"
    if rates.source == "genai-prices snapshot":
        return f"genai-prices {_genai_version()}"
    return f"override: {rates.source}" if rates.source else "override"


def rates_at(card: PriceCard, key_name: str, model: str, at: datetime) -> ModelRates | None:
    """The card's list rates for ``key_name:model`` at ``at``; ``None`` when the card
    has none (a free tier without list price, or a model the card cannot price)."""
    try:
        return card.rates(key_name, model, at)
    except (BudgetConfigError, LookupError):
        return None
