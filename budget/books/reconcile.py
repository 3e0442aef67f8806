"""Reconcile the ledger with a provider's usage export.

The comparison follows the design's order, each step reported:

1. **period** — per day (or hour, for an hourly export) of the export's zone (the zone
   the file states, else ``<PROVIDER>_BILLING_TZ``): total tokens (input + output) of the
   export vs the ledger's attempts of that key granted in the same window
   (:mod:`budget.books.reconcile_period`; windows keyed by their UTC start). When they
   only agree with every window shifted by a whole number of hours, that is reported as
   a timezone mismatch with the offset, and the later steps use the shifted windows.
   Tokens, not money, so a wrong price or token category cannot hide a wrong period.
2. **token categories** — per model: input (all prompt tokens, cached included),
   cached input, output and (when the export has them) reasoning tokens side by side;
   cached tokens billed as plain input are named as such
   (:mod:`budget.books.reconcile_rows`).
3. **price card** — per model: the export's cost vs the card's price of the export's
   own tokens (:mod:`budget.books.reconcile_price`).
4. **money per day** — only for an export with a costs file (OpenAI's, money per UTC day
   without a model): each day's money vs what the ledger booked on the key that day.

Bookings flagged *estimated* (booked at the bound — ceiling plus admission margin — after
a crash, at the ceiling after a timeout) are counted apart: they explain a difference
only while the export lies between what the ledger booked exactly and what it could have
booked (each estimated booking at its top: its ceiling or bound, in tokens what its hold
was sized on) — above that it is a difference — and are what ``/reconcile apply``
(:mod:`budget.books.corrections`) replaces with the export's figures. A report on a
file that repeats rows word for word, or sums several API keys' rows, plans no
correction.

A difference within ``RECONCILE_TOLERANCE_USD`` (default 0.01) or 0.5 % of the
export's figure counts as a match (tokens: 0.5 %).

The provider's export is read by :mod:`budget.books.usage_export`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal

from sqlalchemy.ext.asyncio import AsyncEngine

from budget.books.csv_out import Cell, csv_bytes
from budget.books.periods import ExportFileError, Period
from budget.books.reconcile_ledger import EstimatedBooking, LedgerSide, load_ledger
from budget.books.reconcile_period import (
    MAX_SHIFT_H,
    RELATIVE_TOLERANCE,
    Bucket,
    by_bucket,
    compare_buckets,
    period_step,
)
from budget.books.reconcile_price import price_step
from budget.books.reconcile_rows import (
    Comparison,
    PlannedCorrection,
    RowSums,
    categories_lines,
    compare_rows,
    tolerance,
)
from budget.books.usage_export import ProviderExport
from budget.policy.money import round_musd, usd_text
from budget.pricing.names import family
from budget.pricing.prices import PriceCard

__all__ = [
    "DEFAULT_TOLERANCE_MUSD",
    "RELATIVE_TOLERANCE",
    "EstimatedBooking",
    "PlannedCorrection",
    "ReconcileReport",
    "Step",
    "reconcile",
]

#: RECONCILE_TOLERANCE_USD's default, in µUSD.
DEFAULT_TOLERANCE_MUSD = 10_000


@dataclass(slots=True)
class Step:
    """One reported step: its name, whether it matched, and its lines."""

    name: str
    ok: bool
    lines: list[str] = field(default_factory=list)


@dataclass(slots=True)
class ReconcileReport:
    """The result of :func:`reconcile`.

    Attributes:
        key_name: the provider key compared.
        export: the parsed export.
        start, end: the compared period (aware UTC).
        shift_h: whole hours the export's windows are off (0 = aligned; ``None`` = no
            shift lines them up).
        steps: period, token categories, price card (for usage), money per day (for
            costs) — in that order.
        stale: per model, the price line the export says is stale (for
            ``/providers prices``), e.g. ``{"deepseek-chat": "output $0.42 → $0.441"}``.
        diff_rows: CSV rows (header first) of the (bucket, model) lines that differ.
        plan: what ``/reconcile apply`` would change (empty when the export says
            corrections are off: ``export.apply_off``).
        ledger_musd, export_musd: the period's totals (µUSD; export's rounded).
    """

    key_name: str
    export: ProviderExport
    start: datetime
    end: datetime
    shift_h: int | None
    steps: list[Step]
    stale: dict[str, str]
    diff_rows: list[list[Cell]]
    plan: list[PlannedCorrection]
    ledger_musd: int
    export_musd: int

    @property
    def ok(self) -> bool:
        """True when every step matched."""
        return all(s.ok for s in self.steps)

    def _head(self) -> list[str]:
        ex = self.export
        rows = len(ex.lines) or len(ex.costs)
        out = [
            f"🧾 Reconcile {self.key_name} with {ex.file_name} ({ex.layout}, "
            f"{'hourly' if ex.granularity == 'hour' else 'daily'}, {rows} "
            f"row{'' if rows == 1 else 's'}, "
            f"billing zone {ex.tz})",
            f"Period {self.start:%Y-%m-%d %H:%M} – {self.end:%Y-%m-%d %H:%M} UTC: ledger "
            f"{usd_text(self.ledger_musd)}, export {usd_text(self.export_musd)}",
        ]
        out.extend(f"ℹ️ {note}" for note in ex.notes)
        out.extend(f"⚠️ {line}" for line in ex.repeats)
        if ex.apply_off:
            out.append(f"⚠️ /reconcile apply is off for this file: {ex.apply_off}")
        return out

    def text(self, max_lines: int = 8) -> str:
        """The short report (each step's first ``max_lines`` lines)."""
        out = self._head()
        for n, step in enumerate(self.steps, start=1):
            out.append(f"{n}. {step.name}: {'✅ match' if step.ok else '⚠️ differs'}")
            out.extend(f"   {line}" for line in step.lines[:max_lines])
            if len(step.lines) > max_lines:
                out.append(f"   … {len(step.lines) - max_lines} more (see the CSV)")
        if self.plan:
            moved = sum(p.new_musd - p.old_musd for p in self.plan)
            out.append(
                f"{len(self.plan)} estimated bookings can be corrected from the export "
                f"({'+' if moved >= 0 else '-'}{usd_text(abs(moved))}): /reconcile apply"
            )
        return "\n".join(out)

    def diff_csv(self) -> bytes | None:
        """The differing rows as CSV bytes (``None`` when nothing differs), written by
        :func:`budget.books.csv_out.csv_bytes` (a cell copied from the provider's file
        that a spreadsheet would run as a formula gets a leading ``'``)."""
        if len(self.diff_rows) <= 1:
            return None
        return csv_bytes(self.diff_rows)


def _refuse_foreign(export: ProviderExport, key_name: str) -> None:
    company = family(key_name)
    foreign = {p for p in export.providers if p not in (company, key_name.lower())}
    if foreign:
        raise ExportFileError(
            f"{export.file_name} is an export of {', '.join(sorted(foreign))}, not "
            f"{key_name}; nothing was compared or changed"
        )


def _models(
    export: ProviderExport, side: LedgerSide, key_name: str, known: Iterable[str]
) -> list[str]:
    """The models compared: the export's, and the ledger's that are this key's.

    Raises:
        ExportFileError: none of the export's models is one Kopek uses on the key.
    """
    ours = side.models | set(known)
    theirs = {line.model for line in export.lines}
    if theirs and not theirs & ours:
        raise ExportFileError(
            f"none of the export's models ({', '.join(sorted(theirs)[:5])}) is a model "
            f"Kopek uses on {key_name} ({', '.join(sorted(ours)[:5]) or 'none yet'}); "
            "is this another provider's export? Nothing was compared or changed"
        )
    return sorted(theirs | {m for m in side.models if m in ours}) if theirs else []


def _money_step(
    export: ProviderExport, buckets: list[Bucket], side: LedgerSide, shift_h: int, tol_musd: int
) -> tuple[Step, int, Decimal]:
    """Step 4: the costs file's money per bucket vs the ledger's booked money."""
    start, end = buckets[0].start, buckets[-1].end
    days: dict[tuple[datetime, datetime, str], Decimal] = {}
    for c in export.costs:
        if start <= c.start < end:
            days[(c.start, c.end, c.label)] = (
                days.get((c.start, c.end, c.label), Decimal(0)) + c.cost_musd
            )
    d = timedelta(hours=shift_h)
    step = Step("money per day", True)
    ledger_total, export_total = 0, Decimal(0)
    for (s, e, label), billed in sorted(days.items()):
        exact = side.exact_in(s + d, e + d).cost_musd
        est = side.estimated_in(s + d, e + d)
        booked = exact + sum(b.cost_musd for b in est)
        ledger_total += booked
        export_total += billed
        if abs(billed - booked) <= tolerance(billed, tol_musd):
            continue
        slack = tolerance(billed, tol_musd)
        top = exact + sum(b.top_musd for b in est)
        explained = est and exact - slack <= billed <= top + slack
        note = f" ({len(est)} estimated bookings explain it)" if explained else ""
        step.ok = step.ok and bool(explained)
        step.lines.append(
            f"{label}: ledger {usd_text(booked)}, export {usd_text(round_musd(billed))}{note}"
        )
    if not days:
        step.lines.append("the costs file has no day in the period")
    return step, ledger_total, export_total


def _usage_steps(
    cmp: Comparison, export: ProviderExport, models: list[str], shift_h: int | None
) -> tuple[list[Step], RowSums, dict[str, str]]:
    rows = compare_rows(cmp, models, shift_h)
    ok, cat_lines = categories_lines(rows, models, export.has_reasoning)
    in_period = [ln for lines in cmp.lines.values() for ln in lines]
    price = price_step(
        cmp.card,
        cmp.key_name,
        in_period,
        models,
        has_cost=export.has_cost,
        tolerance_musd=cmp.tolerance_musd,
    )
    steps = [Step("token categories", ok, cat_lines), Step("price card", price.ok, price.lines)]
    return steps, rows, price.stale


def _period(cmp: Comparison, export: ProviderExport) -> tuple[Step, int | None]:
    found = period_step(export, cmp.key_name, cmp.buckets, cmp.lines, cmp.side)
    step = Step("period", found.ok, found.lines)
    left_out = len(export.lines) - sum(len(v) for v in cmp.lines.values())
    if left_out:
        step.lines.insert(
            0,
            f"{left_out} row{'' if left_out == 1 else 's'} of the export outside the period"
            " left out",
        )
    return step, found.shift_h


def _gap_line(rows: RowSums, tolerance_musd: int) -> str | None:
    gap = rows.export_musd - rows.ledger_musd
    n_est = sum(rows.estimated.values())
    slack = tolerance(rows.export_musd, tolerance_musd)
    if abs(gap) <= slack or not n_est:
        return None
    if rows.export_musd > rows.top_musd + slack:
        return (
            f"ledger {usd_text(rows.ledger_musd)} vs export "
            f"{usd_text(round_musd(rows.export_musd))}: more than the ledger could have "
            f"booked (at most {usd_text(rows.top_musd)} with its {n_est} estimated bookings "
            "at their ceilings or bounds)"
        )
    return (
        f"ledger {usd_text(rows.ledger_musd)} vs export {usd_text(round_musd(rows.export_musd))}: "
        f"{n_est} estimated bookings (booked at their ceiling, or ceiling + admission margin "
        "when expired) explain the gap"
    )


async def reconcile(
    engine: AsyncEngine,
    card: PriceCard,
    export: ProviderExport,
    key_name: str,
    *,
    period: Period | None = None,
    tolerance_musd: int = DEFAULT_TOLERANCE_MUSD,
    known_models: Iterable[str] = (),
) -> ReconcileReport:
    """Compare ``export`` with the ledger's attempts of ``key_name`` (module docstring):
    the ledger is read on the loop, the steps are computed in a worker thread.

    Args:
        engine: the database holding the ledger.
        card: the price card (implied prices, input-token floors of corrections).
        export: from :func:`~budget.books.usage_export.parse_export`.
        key_name: the provider key (``deepseek``, ``groq2`` …).
        period: compare only this period (default: the export's first to last bucket);
            cut it in ``export.tz`` so its days are the export's.
        tolerance_musd: RECONCILE_TOLERANCE_USD in µUSD.
        known_models: models configured for this key (with the ledger's own, they
            decide whether the export is this provider's at all).

    Raises:
        ExportFileError: the export names another provider, or none of its models is
            one Kopek uses on ``key_name``; or nothing of it falls in ``period``.
    """
    _refuse_foreign(export, key_name)
    buckets = compare_buckets(export, period)
    if not buckets:
        raise ExportFileError("the period is empty")
    pad = timedelta(hours=MAX_SHIFT_H + 1)
    side = await load_ledger(engine, card, key_name, buckets[0].start - pad, buckets[-1].end + pad)
    models = _models(export, side, key_name, known_models)
    cmp = Comparison(card, key_name, buckets, {}, side, tolerance_musd)
    # the comparison is pure CPU (a year of hours tried at 29 shifts: ~1 s): off the loop
    return await asyncio.to_thread(_compare, cmp, export, models)


def _compare(cmp: Comparison, export: ProviderExport, models: list[str]) -> ReconcileReport:
    """Every step over the loaded ledger side (a pure function: run in a worker thread)."""
    cmp.lines = by_bucket(export.lines, cmp.buckets)
    if export.lines and not cmp.lines:
        raise ExportFileError("no row of the export falls in the period asked for")
    steps: list[Step] = []
    shift: int | None = 0
    rows = RowSums()
    stale: dict[str, str] = {}
    if export.lines:
        period_found, shift = _period(cmp, export)
        usage_steps, rows, stale = _usage_steps(cmp, export, models, shift)
        if period_found.ok and (line := _gap_line(rows, cmp.tolerance_musd)):
            period_found.lines.append(line)
        steps = [period_found, *usage_steps]
    ledger_musd, export_musd = rows.ledger_musd, rows.export_musd
    if export.costs:
        money, ledger_musd, export_musd = _money_step(
            export, cmp.buckets, cmp.side, shift or 0, cmp.tolerance_musd
        )
        steps.append(money)
    return ReconcileReport(
        key_name=cmp.key_name,
        export=export,
        start=cmp.buckets[0].start,
        end=cmp.buckets[-1].end,
        shift_h=shift,
        steps=steps,
        stale=stale,
        diff_rows=rows.diff_rows,
        plan=[] if export.apply_off else rows.plan,
        ledger_musd=ledger_musd,
        export_musd=round_musd(export_musd),
    )
