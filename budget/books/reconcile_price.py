"""The *price card* step: per model, the export's stated cost against the card's price
of the export's own tokens. A model off by more than the tolerance gets the line (input,
cached input or output) whose rate explains the difference, the rate the export implies,
and the ``PRICE_OVERRIDES`` entry that would fix the card; when the rows cannot tell
the lines apart (one row), every line that would explain it, and no override claimed.

Rates are USD per 1M tokens (= µUSD per token); money µUSD, exact decimals.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from decimal import Decimal

from budget.books.periods import rates_at
from budget.books.reconcile_rows import tolerance
from budget.books.usage_export import UsageLine
from budget.policy.money import round_musd, usd_text
from budget.pricing.names import family
from budget.pricing.prices import ModelRates, PriceCard

__all__ = ["PriceFinding", "fmt_rate", "price_step"]

_LINES = ("input", "cached_input", "output")


def fmt_rate(value: Decimal) -> str:
    """A rate with 4 significant digits, plain notation (``0.441``)."""
    if value == 0:
        return "0"
    q = Decimal(1).scaleb(value.adjusted() - 3)
    return format(value.quantize(q).normalize(), "f")


@dataclass(slots=True)
class PriceFinding:
    """The step's outcome: matched, its lines, and per model the stale price line (for
    ``/providers prices``: ``{"deepseek-chat": "output $0.42 → $0.441 per 1M tokens"}``)."""

    ok: bool = True
    lines: list[str] = field(default_factory=list)
    stale: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class _Rows:
    """One model's rows: (stated, card-priced) µUSD and (uncached, cached, output) tokens."""

    parts: list[tuple[Decimal, Decimal]]
    tokens: list[tuple[int, int, int]]

    @property
    def stated(self) -> Decimal:
        return sum((p[0] for p in self.parts), Decimal(0))

    @property
    def carded(self) -> Decimal:
        return sum((p[1] for p in self.parts), Decimal(0))


def _priced(
    card: PriceCard, key_name: str, model: str, rows: list[UsageLine], first: ModelRates
) -> _Rows:
    parts: list[tuple[Decimal, Decimal]] = []
    tokens: list[tuple[int, int, int]] = []
    for ln in rows:
        r = rates_at(card, key_name, model, ln.start) or first
        u, c, o = ln.input_tokens - ln.cached_input_tokens, ln.cached_input_tokens, ln.output_tokens
        parts.append(
            (
                ln.cost_musd or Decimal(0),
                Decimal(u) * r.input + Decimal(c) * r.cached + Decimal(o) * r.output,
            )
        )
        tokens.append((u, c, o))
    return _Rows(parts, tokens)


def _fits(rows: _Rows, old: dict[str, Decimal], gap: Decimal) -> list[tuple[Decimal, str, Decimal]]:
    """Per price line that could explain ``gap``: (residual, line, rate step), best first."""
    fits: list[tuple[Decimal, str, Decimal]] = []
    for idx, name in enumerate(_LINES):
        total = sum(t[idx] for t in rows.tokens)
        if total == 0 or old[name] + gap / total < 0:
            continue  # no tokens on that line, or a negative price
        step = gap / total
        resid = sum(
            (
                abs(p[0] - p[1] - step * t[idx])
                for p, t in zip(rows.parts, rows.tokens, strict=True)
            ),
            Decimal(0),
        )
        fits.append((resid, name, step))
    return sorted(fits, key=lambda f: f[0])


def _model_line(
    key_name: str, model: str, rows: _Rows, old: dict[str, Decimal], found: PriceFinding
) -> None:
    gap = rows.stated - rows.carded
    fits = _fits(rows, old, gap)
    if not fits:
        found.lines.append(
            f"{model}: export {usd_text(round_musd(rows.stated))} vs card "
            f"{usd_text(round_musd(rows.carded))}; no single price line explains it"
        )
        return
    # lines whose fit is within 1 % of the gap (plus a µUSD of rounding per row) of the
    # best: the rows' token mix cannot tell them apart
    tol = fits[0][0] + abs(gap) / 100 + len(rows.parts)
    if len(fits) > 1 and fits[1][0] <= tol:
        each = sorted((f for f in fits if f[0] <= tol), key=lambda f: _LINES.index(f[1]))
        alts = " or ".join(
            f"{n.replace('_', ' ')} ${fmt_rate(old[n])} → ${fmt_rate(old[n] + step)}"
            for _, n, step in each
        )
        pct = gap / rows.carded * 100 if rows.carded else Decimal(0)
        found.lines.append(
            f"{model}: the export costs {pct:+.1f}% against the card; its rows cannot tell "
            f"which line is off ({alts} per 1M tokens) — compare an hourly or longer export "
            "before setting PRICE_OVERRIDES"
        )
        found.stale[model] = f"{alts} per 1M tokens (one of them)"
        return
    _, name, step = fits[0]
    implied = old[name] + step
    pct = step / old[name] * 100 if old[name] else Decimal(0)
    fixed = dict(old) | {name: Decimal(fmt_rate(implied))}
    override = json.dumps(
        {f"{key_name}:{model}": {k: fmt_rate(v) for k, v in fixed.items()}}, separators=(",", ":")
    )
    line_name = name.replace("_", " ")
    found.lines.append(
        f"{model} {line_name}: card ${fmt_rate(old[name])} per 1M tokens, the export implies "
        f"${fmt_rate(implied)} ({pct:+.1f}%); fix: PRICE_OVERRIDES={override}"
    )
    found.stale[model] = f"{line_name} ${fmt_rate(old[name])} → ${fmt_rate(implied)} per 1M tokens"


def price_step(
    card: PriceCard,
    key_name: str,
    lines: Sequence[UsageLine],
    models: list[str],
    *,
    has_cost: bool,
    tolerance_musd: int,
) -> PriceFinding:
    """Step 3 (module docstring) over the export's ``lines`` of the period."""
    found = PriceFinding()
    if not has_cost:
        found.lines.append("the export states no cost: not compared")
        return found
    if card.is_free(key_name):
        billed = sum((ln.cost_musd or Decimal(0) for ln in lines), Decimal(0))
        if billed > tolerance(0, tolerance_musd):
            found.ok = False
            found.lines.append(
                f"{key_name} is configured free tier but the export bills "
                f"{usd_text(round_musd(billed))}: set {family(key_name).upper()}_TIER=paid"
            )
        return found
    for model in models:
        rows = [ln for ln in lines if ln.model == model]
        if not rows:
            continue
        first = rates_at(card, key_name, model, rows[0].start)
        if first is None:
            found.ok = False
            found.lines.append(f"{model}: the card has no price for it")
            continue
        priced = _priced(card, key_name, model, rows, first)
        if abs(priced.stated - priced.carded) <= tolerance(priced.stated, tolerance_musd):
            continue
        found.ok = False
        old = {"input": first.input, "cached_input": first.cached, "output": first.output}
        _model_line(key_name, model, priced, old, found)
    return found
