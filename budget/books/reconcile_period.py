"""The windows a reconciliation compares, and its *period* step.

Windows are keyed by their UTC start (:class:`Bucket`): the days or hours of the export's
zone over the compared period, each a ``[start, end)`` of aware UTC instants, labelled
as the report shows them (an hour that happens twice carries its UTC offset:
``2026-10-25T02+02:00``, then ``2026-10-25T02+01:00``). An export line belongs to the
window its start falls in; two windows never share a line, whatever their labels.

The period step compares total tokens (input + output) per window with the ledger's
attempts of the key granted in the same window. A window with estimated bookings matches
when the export is between what the ledger booked exactly there and what it could have
booked (the estimated bookings at their tops: the tokens their holds were sized on, or
their bound when booked above it) — an export above that is a difference, whatever the
window's estimates. When they only agree with every window
shifted by a whole number of hours, that is reported as a timezone mismatch with the
offset (the later steps then use the shifted windows).
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, time, timedelta
from decimal import Decimal

from budget.books.periods import ExportFileError, Period, zone
from budget.books.readers.cells import label_of
from budget.books.reconcile_ledger import LedgerSide
from budget.books.usage_export import EARLIEST, LATEST, ProviderExport, UsageLine
from budget.policy.windows import local_instant
from budget.pricing.names import family

__all__ = [
    "MAX_BUCKETS",
    "MAX_SHIFT_H",
    "RELATIVE_TOLERANCE",
    "Bucket",
    "PeriodFinding",
    "by_bucket",
    "close_tokens",
    "compare_buckets",
    "explained_by_estimates",
    "period_step",
]

#: Whole-hour shifts tried when the windows do not line up.
MAX_SHIFT_H = 14
#: Most windows compared (400 days of hours).
MAX_BUCKETS = 24 * 400
#: Relative tolerance (0.5 %).
RELATIVE_TOLERANCE = Decimal("0.005")


@dataclass(frozen=True, slots=True)
class Bucket:
    """One compared window: aware UTC ``[start, end)`` and its label."""

    start: datetime
    end: datetime
    label: str


def close_tokens(a: int, b: int) -> bool:
    """True when two token counts agree within :data:`RELATIVE_TOLERANCE`."""
    return abs(a - b) <= max(Decimal(b), Decimal(a)) * RELATIVE_TOLERANCE


def _span(export: ProviderExport, period: Period | None) -> tuple[datetime, datetime]:
    if period is not None:
        return period.start, period.end
    starts = [ln.start for ln in export.lines] or [c.start for c in export.costs]
    ends = [ln.end for ln in export.lines] or [c.end for c in export.costs]
    return min(starts), max(ends)


def compare_buckets(export: ProviderExport, period: Period | None) -> list[Bucket]:
    """Every window of the compared period (default: the export's first to last bucket),
    cut in the export's zone at its granularity.

    Raises:
        ExportFileError: the period is outside 1971–9998 or longer than
            :data:`MAX_BUCKETS` windows.
    """
    tz = zone(export.tz)
    start, end = _span(export, period)
    if start < EARLIEST or end > LATEST:
        raise ExportFileError("the period is not between 1971 and 9998")
    out: list[Bucket] = []
    cursor = start
    while cursor < end and len(out) < MAX_BUCKETS:
        local = cursor.astimezone(tz)
        if export.granularity == "hour":
            nxt = cursor + timedelta(hours=1)
        else:
            nxt = local_instant(local.date() + timedelta(days=1), time(0), tz)
        out.append(Bucket(cursor, nxt, label_of(local, export.granularity, tz)))
        cursor = nxt
    if cursor < end:
        unit = "hours" if export.granularity == "hour" else "days"
        raise ExportFileError(
            f"the export spans more than {len(out):,} {unit}; compare a shorter period "
            "(a month: /reconcile PROVIDER YYYY-MM, or --period YYYY-MM)"
        )
    return out


def by_bucket(lines: Iterable[UsageLine], buckets: list[Bucket]) -> dict[datetime, list[UsageLine]]:
    """The lines falling in each window (keyed by the window's UTC start); lines outside
    every window are left out."""
    starts = [b.start for b in buckets]
    found: dict[datetime, list[UsageLine]] = {}
    for line in lines:
        i = bisect_right(starts, line.start) - 1
        if i >= 0 and line.start < buckets[i].end:
            found.setdefault(starts[i], []).append(line)
    return found


def explained_by_estimates(exact: int, top: int | None, billed: Decimal | int) -> bool:
    """True when a window's estimated bookings can explain the export's figure: it is at
    least what the ledger booked exactly (``exact``) and at most what the ledger could
    have booked (``exact`` + ``top``, the estimated bookings' tops: what their holds
    were sized on, or their bound when booked above it), each within
    :data:`RELATIVE_TOLERANCE`. ``top`` ``None``: no estimated booking, nothing to
    explain with. The same measure on both sides (tokens, or µUSD)."""
    if top is None:
        return False
    slack = 1 + RELATIVE_TOLERANCE
    return exact <= billed * slack and billed <= (exact + top) * slack


@dataclass(slots=True)
class PeriodFinding:
    """The period step's outcome: matched, the shift found (0 aligned, ``None`` no
    whole-hour shift lines the windows up) and its lines."""

    ok: bool
    shift_h: int | None
    lines: list[str]


def _aligned(
    shift: int, buckets: list[Bucket], lines: dict[datetime, list[UsageLine]], side: LedgerSide
) -> tuple[bool, list[str]]:
    d = timedelta(hours=shift)
    bad: list[str] = []
    matched = 0
    for b in buckets:
        ex_tok = sum(ln.input_tokens + ln.output_tokens for ln in lines.get(b.start, []))
        exact = side.exact_in(b.start + d, b.end + d).tokens
        est = side.estimated_in(b.start + d, b.end + d)
        est_tok = sum(e.tokens for e in est)
        if close_tokens(exact + est_tok, ex_tok) or explained_by_estimates(
            exact, sum(e.top_tokens for e in est) if est else None, ex_tok
        ):
            matched += ex_tok > 0
            continue
        bad.append(f"{b.label}: ledger {exact + est_tok:,} tokens, export {ex_tok:,}")
    return (not bad and matched > 0), bad


def _mismatch_lines(
    fits: list[int], export: ProviderExport, key_name: str, first: datetime
) -> list[str]:
    env = f"{family(key_name).upper()}_BILLING_TZ"
    off = first.astimezone(zone(export.tz)).utcoffset() or timedelta(0)

    def cut_in(k: int) -> str:
        return f"UTC{(off - timedelta(hours=k)).total_seconds() / 3600:+g}"

    if len(fits) == 1:
        return [
            f"timezone mismatch: totals match with every window shifted by {fits[0]:+d} h — "
            f"the export is cut in {cut_in(fits[0])}, not {export.tz} (set {env} to that zone)"
        ]
    # too few bookings to tell the offset: name every one that fits, claim none
    ks = sorted(fits)
    if ks[-1] - ks[0] == len(ks) - 1:  # one run of offsets: name its ends
        shifts, zones = f"{ks[0]:+d} … {ks[-1]:+d}", f"{cut_in(ks[-1])} … {cut_in(ks[0])}"
    else:
        shifts = ", ".join(f"{k:+d}" for k in ks)
        zones = ", ".join(cut_in(k) for k in reversed(ks))
    return [
        f"timezone mismatch: totals match with the windows shifted by any of {shifts} h — "
        f"the export is cut in one of {zones}, not {export.tz}; too few bookings to tell "
        f"which (set {env} to the provider's zone)"
    ]


def period_step(
    export: ProviderExport,
    key_name: str,
    buckets: list[Bucket],
    lines: dict[datetime, list[UsageLine]],
    side: LedgerSide,
) -> PeriodFinding:
    """Step 1 (module docstring): aligned, or the whole-hour shift that lines the windows
    up, or the windows that differ."""
    ok, bad = _aligned(0, buckets, lines, side)
    if ok:
        return PeriodFinding(True, 0, [])
    order = sorted(range(-MAX_SHIFT_H, MAX_SHIFT_H + 1), key=lambda x: (abs(x), -x))
    fits = [k for k in order if k and _aligned(k, buckets, lines, side)[0]]
    if fits:
        return PeriodFinding(
            False, fits[0], _mismatch_lines(fits, export, key_name, buckets[0].start)
        )
    return PeriodFinding(
        False, None, ["no whole-hour shift lines the windows up; differing:", *bad]
    )
