"""Reconcile the ledger with a provider's usage export.

The comparison follows the design's order, each step reported:

1. **period** — per day (or hour, for an hourly export) in the provider's billing
   zone (``<PROVIDER>_BILLING_TZ``): total tokens (input + output) of the export vs
   the ledger's attempts of that key granted in the same window. When they only
   agree with every window shifted by a whole number of hours, that is reported as a
   timezone mismatch with the offset, and the later steps use the shifted windows.
   Tokens, not money, so a wrong price or token category cannot hide a wrong period.
2. **token categories** — per model: input (all prompt tokens, cached included),
   cached input, output and (when the export has them) reasoning tokens side by side;
   cached tokens billed as plain input are named as such.
3. **price card** — per model: the export's cost vs the card's price of the export's
   own tokens; a model off by more than the tolerance gets the line (input, cached
   input or output) whose rate explains the difference, the rate the export implies,
   and the ``PRICE_OVERRIDES`` entry that would fix the card.

Bookings flagged *estimated* (booked at the bound — ceiling plus admission margin — after
a crash, at the ceiling after a timeout) are
counted apart: they explain a ledger above the export and are what
``/reconcile apply`` (:mod:`budget.books.corrections`) replaces with the export's figures.

A difference within ``RECONCILE_TOLERANCE_USD`` (default 0.01) or 0.5 % of the
export's figure counts as a match (tokens: 0.5 %).

The provider's export is read by :mod:`budget.books.usage_export`.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, time, timedelta
from decimal import Decimal

from sqlalchemy.ext.asyncio import AsyncEngine

from budget.books.csv_out import csv_bytes
from budget.books.periods import (
    ExportFileError,
    Period,
    rates_at,
    zone,
)
from budget.books.reconcile_ledger import EstimatedBooking, TokenSums, load_ledger
from budget.books.usage_export import EARLIEST, LATEST, ProviderExport, UsageLine
from budget.policy.money import round_musd, usd_text
from budget.policy.windows import local_instant
from budget.pricing.names import family
from budget.pricing.prices import PriceCard
from budget.types import Usage

__all__ = [
    "DEFAULT_TOLERANCE_MUSD",
    "RELATIVE_TOLERANCE",
    "EstimatedBooking",
    "PlannedCorrection",
    "ReconcileReport",
    "reconcile",
]

#: RECONCILE_TOLERANCE_USD's default, in µUSD.
DEFAULT_TOLERANCE_MUSD = 10_000
#: Relative tolerance (0.5 %).
RELATIVE_TOLERANCE = Decimal("0.005")
#: Whole-hour shifts tried when the windows do not line up.
MAX_SHIFT_H = 14


# -- the ledger side ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PlannedCorrection:
    """One estimated booking's new cost, as ``/reconcile apply`` would book it.

    Attributes:
        hold_id, model: which booking.
        bucket: the export's day/hour label it was spread from.
        old_musd: what the ledger books now.
        new_musd: what it would book.
    """

    hold_id: str
    model: str
    bucket: str
    old_musd: int
    new_musd: int


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
        steps: period, token categories, price card — in that order.
        stale: per model, the price line the export says is stale (for
            ``/providers prices``), e.g. ``{"deepseek-chat": "output $0.42 → $0.441"}``.
        diff_rows: CSV rows (header first) of the (bucket, model) lines that differ.
        plan: what ``/reconcile apply`` would change.
        ledger_musd, export_musd: the period's totals (µUSD; export's rounded).
    """

    key_name: str
    export: ProviderExport
    start: datetime
    end: datetime
    shift_h: int | None
    steps: list[Step]
    stale: dict[str, str]
    diff_rows: list[list[str]]
    plan: list[PlannedCorrection]
    ledger_musd: int
    export_musd: int

    @property
    def ok(self) -> bool:
        """True when every step matched."""
        return all(s.ok for s in self.steps)

    def text(self, max_lines: int = 8) -> str:
        """The short report (each step's first ``max_lines`` lines)."""
        ex = self.export
        out = [
            f"🧾 Reconcile {self.key_name} with {ex.file_name} ({ex.layout} layout, "
            f"{'hourly' if ex.granularity == 'hour' else 'daily'}, {len(ex.lines)} rows, "
            f"billing zone {ex.tz})",
            f"Period {self.start:%Y-%m-%d %H:%M} – {self.end:%Y-%m-%d %H:%M} UTC: ledger "
            f"{usd_text(self.ledger_musd)}, export {usd_text(self.export_musd)}",
        ]
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


def _tol_musd(value: Decimal | int, tolerance_musd: int) -> Decimal:
    return max(Decimal(tolerance_musd), abs(Decimal(value)) * RELATIVE_TOLERANCE)


def _close_tokens(a: int, b: int) -> bool:
    return abs(a - b) <= max(Decimal(b), Decimal(a)) * RELATIVE_TOLERANCE


def _buckets(export: ProviderExport, period: Period | None) -> list[tuple[datetime, datetime, str]]:
    """Every window of the compared period (export rows outside ``period`` dropped)."""
    tz = zone(export.tz)
    if period is not None:
        start, end = period.start, period.end
    else:
        start = min(line.start for line in export.lines)
        end = max(line.end for line in export.lines)
    if start < EARLIEST or end > LATEST:
        raise ExportFileError("the period is not between 1971 and 9998")
    out: list[tuple[datetime, datetime, str]] = []
    cursor = start
    while cursor < end and len(out) < 24 * 400:
        local = cursor.astimezone(tz)
        if export.granularity == "hour":
            nxt = cursor + timedelta(hours=1)
            label = local.strftime("%Y-%m-%dT%H")
        else:
            day = local.date()
            nxt = local_instant(day + timedelta(days=1), time(0), tz)
            label = day.isoformat()
        out.append((cursor, nxt, label))
        cursor = nxt
    if cursor < end:
        unit = "hours" if export.granularity == "hour" else "days"
        raise ExportFileError(
            f"the export spans more than {len(out):,} {unit}; compare a shorter period "
            "(a month: /reconcile PROVIDER YYYY-MM, or --period YYYY-MM)"
        )
    return out


def _fmt_rate(value: Decimal) -> str:
    if value == 0:
        return "0"
    q = Decimal(1).scaleb(value.adjusted() - 3)
    return format(value.quantize(q).normalize(), "f")


def _spread(target: int, bookings: list[EstimatedBooking]) -> list[int]:
    """Split ``target`` µUSD over ``bookings``, each within [floor, top], proportional
    to its room above the floor (largest remainder; integers). The top is the larger of
    the ceiling and what the booking is now (an expired hold's bound: ceiling +
    admission margin): capping a bill above the ceiling at the ceiling would book less
    than the provider billed."""
    lo = [b.floor_musd for b in bookings]
    hi = [max(b.ceiling_musd, b.cost_musd) for b in bookings]
    if target <= sum(lo):
        return lo
    if target >= sum(hi):
        return hi
    room = [h - low for h, low in zip(hi, lo, strict=True)]
    extra = target - sum(lo)
    total_room = sum(room)
    shares = [Decimal(extra) * r / total_room for r in room]
    out = [low + math.floor(s) for low, s in zip(lo, shares, strict=True)]
    left = target - sum(out)
    order = sorted(range(len(bookings)), key=lambda i: (-(shares[i] - math.floor(shares[i])), i))
    for i in order[:left]:
        out[i] += 1
    return out


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
    """Compare ``export`` with the ledger's attempts of ``key_name`` (module docstring).

    Args:
        engine: the database holding the ledger.
        card: the price card (implied prices, input-token floors of corrections).
        export: from :func:`~budget.books.usage_export.parse_export`, read in the provider's
        billing zone.
        key_name: the provider key (``deepseek``, ``groq2`` …).
        period: compare only this period (default: the export's first to last bucket).
        tolerance_musd: RECONCILE_TOLERANCE_USD in µUSD.
        known_models: models configured for this key (with the ledger's own, they
            decide whether the export is this provider's at all).

    Raises:
        ExportFileError: the export names another provider, or none of its models is
            one Kopek uses on ``key_name``; or nothing of it falls in ``period``.
    """
    company = family(key_name)
    foreign = {p for p in export.providers if p not in (company, key_name.lower())}
    if foreign:
        raise ExportFileError(
            f"{export.file_name} is an export of {', '.join(sorted(foreign))}, not "
            f"{key_name}; nothing was compared or changed"
        )
    buckets = _buckets(export, period)
    if not buckets:
        raise ExportFileError("the period is empty")
    span_start = buckets[0][0] - timedelta(hours=MAX_SHIFT_H + 1)
    span_end = buckets[-1][1] + timedelta(hours=MAX_SHIFT_H + 1)
    side = await load_ledger(engine, card, key_name, span_start, span_end)
    ours = side.models | set(known_models)
    theirs = {line.model for line in export.lines}
    if not theirs & ours:
        raise ExportFileError(
            f"none of the export's models ({', '.join(sorted(theirs)[:5])}) is a model "
            f"Kopek uses on {key_name} ({', '.join(sorted(ours)[:5]) or 'none yet'}); "
            "is this another provider's export? Nothing was compared or changed"
        )
    p_start, p_end = buckets[0][0], buckets[-1][1]
    lines = [ln for ln in export.lines if p_start <= ln.start < p_end]
    if not lines:
        raise ExportFileError("no row of the export falls in the period asked for")
    left_out = len(export.lines) - len(lines)
    by_label: dict[str, list[UsageLine]] = defaultdict(list)
    for ln in lines:
        by_label[ln.label].append(ln)
    free = card.is_free(key_name)

    def line_cost(ln: UsageLine) -> Decimal:
        if ln.cost_musd is not None:
            return ln.cost_musd
        if free:
            return Decimal(0)
        rates = rates_at(card, key_name, ln.model, ln.start)
        if rates is None:
            return Decimal(0)
        return Decimal(
            rates.actual_musd(Usage(ln.input_tokens, ln.cached_input_tokens, ln.output_tokens))
        )

    # 1. period ------------------------------------------------------------------
    def aligned(shift: int) -> tuple[bool, list[str]]:
        d = timedelta(hours=shift)
        bad: list[str] = []
        matched = 0
        for s, e, label in buckets:
            ex_tok = sum(ln.input_tokens + ln.output_tokens for ln in by_label.get(label, []))
            exact = side.exact_in(s + d, e + d).tokens
            est = side.estimated_in(s + d, e + d)
            est_tok = sum(b.tokens for b in est)
            if _close_tokens(exact + est_tok, ex_tok):
                matched += ex_tok > 0
                continue
            if est and exact <= ex_tok * (1 + RELATIVE_TOLERANCE):
                matched += ex_tok > 0  # estimated bookings (at the ceiling) may explain it
                continue
            bad.append(f"{label}: ledger {exact + est_tok:,} tokens, export {ex_tok:,}")
        return (not bad and matched > 0), bad

    ok0, bad0 = aligned(0)
    shift: int | None = 0
    period_step = Step("period", ok0)
    if left_out:
        period_step.lines.append(f"{left_out} rows of the export outside the period left out")
    if not ok0:
        order = sorted(range(-MAX_SHIFT_H, MAX_SHIFT_H + 1), key=lambda x: (abs(x), -x))
        fits = [k for k in order if k and aligned(k)[0]]
        shift = fits[0] if fits else None
        env = f"{company.upper()}_BILLING_TZ"
        off = p_start.astimezone(zone(export.tz)).utcoffset() or timedelta(0)

        def cut_in(k: int) -> str:
            return f"UTC{(off - timedelta(hours=k)).total_seconds() / 3600:+g}"

        if len(fits) == 1:
            period_step.lines.append(
                f"timezone mismatch: totals match with every window shifted by "
                f"{shift:+d} h — the export is cut in {cut_in(fits[0])}, not {export.tz} "
                f"(set {env} to that zone)"
            )
        elif fits:
            # too few bookings to tell the offset: name every one that fits, claim none
            ks = sorted(fits)
            if ks[-1] - ks[0] == len(ks) - 1:  # one run of offsets: name its ends
                shifts = f"{ks[0]:+d} … {ks[-1]:+d}"
                zones = f"{cut_in(ks[-1])} … {cut_in(ks[0])}"
            else:
                shifts = ", ".join(f"{k:+d}" for k in ks)
                zones = ", ".join(cut_in(k) for k in reversed(ks))
            period_step.lines.append(
                f"timezone mismatch: totals match with the windows shifted by any of "
                f"{shifts} h — the export is cut in one of {zones}, not {export.tz}; too "
                f"few bookings to tell which (set {env} to the provider's zone)"
            )
        else:
            period_step.lines.append("no whole-hour shift lines the windows up; differing:")
            period_step.lines.extend(bad0)
    delta = timedelta(hours=shift or 0)

    # per (bucket, model): ledger vs export ---------------------------------------
    header = [
        "bucket",
        "model",
        "ledger_input_tokens",
        "export_input_tokens",
        "ledger_cached_input_tokens",
        "export_cached_input_tokens",
        "ledger_output_tokens",
        "export_output_tokens",
        "ledger_cost_musd",
        "export_cost_musd",
        "ledger_estimated",
    ]
    diff_rows: list[list[str]] = [header]
    models = sorted(theirs | {m for m in side.models if m in ours})
    per_model_ex: dict[str, TokenSums] = {m: TokenSums() for m in models}
    per_model_led: dict[str, TokenSums] = {m: TokenSums() for m in models}
    est_models: dict[str, int] = defaultdict(int)
    ledger_total = 0
    export_total = Decimal(0)
    plan: list[PlannedCorrection] = []
    for s, e, label in buckets:
        for model in models:
            ex_lines = [ln for ln in by_label.get(label, []) if ln.model == model]
            ex = TokenSums()
            ex_cost = Decimal(0)
            for ln in ex_lines:
                ex.add_usage(
                    ln.input_tokens,
                    ln.cached_input_tokens,
                    ln.output_tokens,
                    ln.reasoning_tokens or 0,
                    0,
                )
                ex_cost += line_cost(ln)
            led = side.exact_in(s + delta, e + delta, model)
            est = side.estimated_in(s + delta, e + delta, model)
            est_cost = sum(b.cost_musd for b in est)
            per_model_ex[model].add(ex)
            per_model_led[model].add(led)
            est_models[model] += len(est)
            ledger_total += led.cost_musd + est_cost
            export_total += ex_cost
            if est and ex_lines and not free and shift is not None:
                target = round_musd(ex_cost) - led.cost_musd
                new = _spread(target, est)
                plan.extend(
                    PlannedCorrection(b.hold_id, model, label, b.cost_musd, n)
                    for b, n in zip(est, new, strict=True)
                    if n != b.cost_musd
                )
            differs = (
                not _close_tokens(led.input_tokens, ex.input_tokens)
                or not _close_tokens(led.cached_input_tokens, ex.cached_input_tokens)
                or not _close_tokens(led.output_tokens, ex.output_tokens)
                or abs(ex_cost - led.cost_musd) > _tol_musd(ex_cost, tolerance_musd)
            )
            if est or (differs and (ex_lines or led.attempts)):
                diff_rows.append(
                    [
                        label,
                        model,
                        str(led.input_tokens),
                        str(ex.input_tokens),
                        str(led.cached_input_tokens),
                        str(ex.cached_input_tokens),
                        str(led.output_tokens),
                        str(ex.output_tokens),
                        str(led.cost_musd + est_cost),
                        str(ex_cost.normalize()),
                        str(len(est)),
                    ]
                )
    total_gap = export_total - ledger_total
    if period_step.ok and abs(total_gap) > _tol_musd(export_total, tolerance_musd):
        n_est = sum(est_models.values())
        if n_est:
            period_step.lines.append(
                f"ledger {usd_text(ledger_total)} vs export {usd_text(round_musd(export_total))}: "
                f"{n_est} estimated bookings (booked at their ceiling, or ceiling + "
                "admission margin when expired) explain the gap"
            )

    # 2. token categories ---------------------------------------------------------
    cat_step = Step("token categories", True)
    for model in models:
        led, ex = per_model_led[model], per_model_ex[model]
        if est_models[model]:
            cat_step.lines.append(
                f"{model}: not compared — {est_models[model]} estimated bookings (their real "
                "usage is only in the export)"
            )
            continue
        pairs = [
            ("input", led.input_tokens, ex.input_tokens),
            ("cached", led.cached_input_tokens, ex.cached_input_tokens),
            ("output", led.output_tokens, ex.output_tokens),
        ]
        if export.has_reasoning:
            pairs.append(("reasoning", led.reasoning_tokens, ex.reasoning_tokens))
        differing = [(n, a, b) for n, a, b in pairs if not _close_tokens(a, b)]
        if not differing:
            continue
        cat_step.ok = False
        side_by_side = ", ".join(f"{n} {a:,}/{b:,}" for n, a, b in pairs)
        note = ""
        names = {n for n, _, _ in differing}
        if names == {"cached"} and ex.cached_input_tokens < led.cached_input_tokens:
            note = (
                f" — {led.cached_input_tokens - ex.cached_input_tokens:,} cached tokens "
                "billed as plain input"
            )
        cat_step.lines.append(f"{model} (ledger/export): {side_by_side}{note}")

    # 3. price card ---------------------------------------------------------------
    card_step = Step("price card", True)
    stale: dict[str, str] = {}
    if not export.has_cost:
        card_step.lines.append("the export states no cost: not compared")
    elif free:
        billed = sum((ln.cost_musd or Decimal(0) for ln in lines), Decimal(0))
        if billed > _tol_musd(0, tolerance_musd):
            card_step.ok = False
            card_step.lines.append(
                f"{key_name} is configured free tier but the export bills "
                f"{usd_text(round_musd(billed))}: set {company.upper()}_TIER=paid"
            )
    else:
        for model in models:
            rows = [ln for ln in lines if ln.model == model]
            if not rows:
                continue
            first = rates_at(card, key_name, model, rows[0].start)
            if first is None:
                card_step.ok = False
                card_step.lines.append(f"{model}: the card has no price for it")
                continue
            stated = sum((ln.cost_musd or Decimal(0) for ln in rows), Decimal(0))
            parts: list[tuple[Decimal, Decimal]] = []  # (stated, card) per row
            toks: list[tuple[int, int, int]] = []
            for ln in rows:
                r = rates_at(card, key_name, model, ln.start) or first
                u = ln.input_tokens - ln.cached_input_tokens
                c = ln.cached_input_tokens
                o = ln.output_tokens
                priced = Decimal(u) * r.input + Decimal(c) * r.cached + Decimal(o) * r.output
                parts.append((ln.cost_musd or Decimal(0), priced))
                toks.append((u, c, o))
            carded = sum((p[1] for p in parts), Decimal(0))
            gap = stated - carded
            if abs(gap) <= _tol_musd(stated, tolerance_musd):
                continue
            card_step.ok = False
            old = {"input": first.input, "cached_input": first.cached, "output": first.output}
            line_fits: list[tuple[Decimal, str, Decimal]] = []  # (residual, line, rate step)
            for idx, name in enumerate(("input", "cached_input", "output")):
                total = sum(t[idx] for t in toks)
                if total == 0 or old[name] + gap / total < 0:
                    continue  # no tokens on that line, or a negative price
                step_rate = gap / total
                resid = sum(
                    (
                        abs(p[0] - p[1] - step_rate * t[idx])
                        for p, t in zip(parts, toks, strict=True)
                    ),
                    Decimal(0),
                )
                line_fits.append((resid, name, step_rate))
            if not line_fits:
                card_step.lines.append(
                    f"{model}: export {usd_text(round_musd(stated))} vs card "
                    f"{usd_text(round_musd(carded))}; no single price line explains it"
                )
                continue
            line_fits.sort(key=lambda f: f[0])
            # lines whose fit is within 1 % of the gap (plus a µUSD of rounding per row)
            # of the best: the rows' token mix cannot tell them apart
            tol = line_fits[0][0] + abs(gap) / 100 + len(rows)
            if len(line_fits) > 1 and line_fits[1][0] <= tol:
                # e.g. one row: name every line that would explain it, claim none
                order_of = list(old)
                each = sorted(
                    (f for f in line_fits if f[0] <= tol), key=lambda f: order_of.index(f[1])
                )
                alts = " or ".join(
                    f"{n.replace('_', ' ')} ${_fmt_rate(old[n])} → ${_fmt_rate(old[n] + step)}"
                    for _, n, step in each
                )
                pct = gap / carded * 100 if carded else Decimal(0)
                card_step.lines.append(
                    f"{model}: the export costs {pct:+.1f}% against the card; its rows cannot "
                    f"tell which line is off ({alts} per 1M tokens) — compare an hourly or "
                    "longer export before setting PRICE_OVERRIDES"
                )
                stale[model] = f"{alts} per 1M tokens (one of them)"
                continue
            _, name, step_rate = line_fits[0]
            implied = old[name] + step_rate
            pct = step_rate / old[name] * 100 if old[name] else Decimal(0)
            fixed = dict(old)
            fixed[name] = Decimal(_fmt_rate(implied))
            override = json.dumps(
                {f"{key_name}:{model}": {k: _fmt_rate(v) for k, v in fixed.items()}},
                separators=(",", ":"),
            )
            line_name = name.replace("_", " ")
            card_step.lines.append(
                f"{model} {line_name}: card ${_fmt_rate(old[name])} per 1M tokens, the export "
                f"implies ${_fmt_rate(implied)} ({pct:+.1f}%); fix: PRICE_OVERRIDES={override}"
            )
            stale[model] = (
                f"{line_name} ${_fmt_rate(old[name])} → ${_fmt_rate(implied)} per 1M tokens"
            )
    return ReconcileReport(
        key_name=key_name,
        export=export,
        start=p_start,
        end=p_end,
        shift_h=shift,
        steps=[period_step, cat_step, card_step],
        stale=stale,
        diff_rows=diff_rows,
        plan=plan,
        ledger_musd=ledger_total,
        export_musd=round_musd(export_total),
    )
