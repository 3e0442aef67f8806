"""A provider's usage export, read into exact per-bucket rows (:func:`parse_export`).

Layouts (detected from the header row, names case-insensitive):

* **OpenAI-compatible usage export** (the Usage API's completions buckets as CSV):
  ``start_time``, ``end_time`` (Unix seconds; 1 h or 1 d buckets), ``model``,
  ``input_tokens`` (cached included), ``input_cached_tokens``, ``output_tokens``;
  optional ``num_model_requests``, ``output_reasoning_tokens``, and a cost in USD as
  ``cost_usd`` or ``amount_value`` (without one, costs are taken from the price card
  and the price-card step is skipped).
* **Generic CSV**: ``date`` (``YYYY-MM-DD``) or ``hour`` (``YYYY-MM-DDTHH[:MM]``),
  in the billing zone; ``model``; ``input_tokens`` (cached included);
  ``cached_input_tokens``; ``output_tokens``; ``cost_usd``; optional
  ``reasoning_tokens``, ``requests`` and ``provider``.

USD amounts are read with :class:`~decimal.Decimal` and kept as exact µUSD.
"""

from __future__ import annotations

import csv
import hashlib
import io
from dataclasses import dataclass
from datetime import UTC, datetime, time, timedelta
from decimal import Decimal, InvalidOperation
from typing import Literal
from zoneinfo import ZoneInfo

from budget.books.periods import ExportFileError, zone
from budget.policy.money import usd_to_exact_musd
from budget.policy.windows import local_instant

__all__ = [
    "EARLIEST",
    "LATEST",
    "LAYOUT_HELP",
    "MAX_EXPORT_BYTES",
    "ProviderExport",
    "UsageLine",
    "parse_export",
]

#: Largest export read (Telegram's bots can download up to 20 MB).
MAX_EXPORT_BYTES = 20 * 1024 * 1024

Granularity = Literal["hour", "day"]

_OPENAI_NEEDS = ("start_time", "end_time", "model", "input_tokens", "input_cached_tokens")
_GENERIC_NEEDS = ("model", "input_tokens", "cached_input_tokens", "output_tokens", "cost_usd")
LAYOUT_HELP = (
    "Kopek reads the OpenAI-compatible usage export (columns start_time, end_time, model, "
    "input_tokens, input_cached_tokens, output_tokens [, cost_usd]) or the generic CSV "
    "(columns date or hour, model, input_tokens, cached_input_tokens, output_tokens, "
    "cost_usd [, reasoning_tokens, provider])"
)


@dataclass(frozen=True, slots=True)
class UsageLine:
    """One row of a provider export.

    Attributes:
        start, end: the bucket, aware UTC ``[start, end)``.
        label: the bucket in the billing zone (``2026-01-14`` or ``2026-01-14T13``).
        model: the model as the provider names it.
        input_tokens: every prompt token, cached included.
        cached_input_tokens: the cached part of ``input_tokens``.
        output_tokens: generated tokens, reasoning included.
        reasoning_tokens: the reasoning part (``None`` when the export has no column).
        cost_musd: the cost the export states, exact µUSD (``None``: no cost column).
        line_no: 1-based line in the file (the header is line 1).
    """

    start: datetime
    end: datetime
    label: str
    model: str
    input_tokens: int
    cached_input_tokens: int
    output_tokens: int
    reasoning_tokens: int | None
    cost_musd: Decimal | None
    line_no: int


@dataclass(frozen=True, slots=True)
class ProviderExport:
    """A parsed usage export.

    Attributes:
        file_name: as given (shown in reports and correction events).
        sha256: hex digest of the file's bytes.
        layout: ``"openai"`` or ``"generic"``.
        granularity: ``"hour"`` or ``"day"``.
        tz: the billing zone its buckets were read in.
        lines: the rows.
        providers: values of a ``provider`` column (empty without one).
    """

    file_name: str
    sha256: str
    layout: str
    granularity: Granularity
    tz: str
    lines: tuple[UsageLine, ...]
    providers: frozenset[str] = frozenset()

    @property
    def has_cost(self) -> bool:
        """True when every row states its cost."""
        return all(line.cost_musd is not None for line in self.lines)

    @property
    def has_reasoning(self) -> bool:
        """True when the rows carry reasoning tokens."""
        return all(line.reasoning_tokens is not None for line in self.lines)


#: Most digits a token count or timestamp may have (a 4,300-digit number is not a count).
_MAX_DIGITS = 18
#: Buckets outside these years are refused (the comparison shifts windows by hours).
EARLIEST = datetime(1971, 1, 1, tzinfo=UTC)
LATEST = datetime(9998, 12, 31, tzinfo=UTC)


def _int(value: str | None, column: str, line_no: int) -> int:
    text = (value or "").strip()
    if not text.isascii() or not text.isdigit() or len(text) > _MAX_DIGITS:
        raise ExportFileError(
            f"line {line_no}: {column} {text[:20]!r} is not a whole number of tokens ≥ 0"
        )
    return int(text)


def _usd(value: str | None, column: str, line_no: int) -> Decimal:
    text = (value or "").strip().lstrip("$")
    try:
        usd = Decimal(text)
    except InvalidOperation:
        raise ExportFileError(
            f"line {line_no}: {column} {text[:20]!r} is not a USD amount"
        ) from None
    if not usd.is_finite() or usd < 0 or usd > Decimal(10) ** 9:
        raise ExportFileError(f"line {line_no}: {column} {text[:20]!r} is not a USD amount ≥ 0")
    return usd_to_exact_musd(usd)


def _local_bucket(
    text: str, granularity: Granularity, tz: ZoneInfo, line_no: int
) -> tuple[datetime, datetime, str]:
    raw = text.strip()
    try:
        if granularity == "day":
            day = datetime.strptime(raw[:10], "%Y-%m-%d")  # noqa: DTZ007 - local, zone added below
            if len(raw) != 10:
                raise ValueError
            start = local_instant(day.date(), time(0), tz)
            return start, local_instant(day.date() + timedelta(days=1), time(0), tz), raw
        norm = raw.replace(" ", "T").rstrip("Z")
        hour = datetime.strptime(norm[:13], "%Y-%m-%dT%H")  # noqa: DTZ007 - local, zone below
        if len(norm) > 13 and norm[13:] not in (":00", ":00:00"):
            raise ValueError
        start = local_instant(hour.date(), hour.time(), tz)
        return start, start + timedelta(hours=1), hour.strftime("%Y-%m-%dT%H")
    except OverflowError:
        raise ExportFileError(f"line {line_no}: the bucket is not between 1971 and 9998") from None
    except ValueError:
        what = "YYYY-MM-DD" if granularity == "day" else "YYYY-MM-DDTHH"
        raise ExportFileError(f"line {line_no}: {granularity} {raw[:24]!r} is not {what}") from None


def parse_export(data: bytes, file_name: str, billing_tz: str) -> ProviderExport:
    """Read a provider usage export (layouts in the module docstring).

    Args:
        data: the file's bytes (UTF-8, an optional BOM).
        file_name: its name, for reports.
        billing_tz: the provider's billing zone (generic layout's dates are read in it).

    Raises:
        ExportFileError: too big, empty, not UTF-8 CSV, an unknown layout (the message
            names the columns needed), a bad value (with its line), or no rows.
        PeriodError: ``billing_tz`` is not an IANA zone.
    """
    tz = zone(billing_tz)
    if len(data) > MAX_EXPORT_BYTES:
        raise ExportFileError(
            f"{file_name}: {len(data) / 1024 / 1024:.1f} MB is over the 20 MB limit; "
            "export a shorter period"
        )
    if not data.strip():
        raise ExportFileError(f"{file_name} is empty")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise ExportFileError(f"{file_name} is not UTF-8 text (a CSV export is)") from None
    try:
        rows = list(csv.reader(io.StringIO(text, newline="")))
    except csv.Error as exc:
        raise ExportFileError(f"{file_name} is not a readable CSV: {exc}") from None
    if not rows:
        raise ExportFileError(f"{file_name} is empty")
    header = [h.strip().lower() for h in rows[0]]
    cols = {name: i for i, name in enumerate(header) if name}
    if all(c in cols for c in _OPENAI_NEEDS) and "output_tokens" in cols:
        layout = "openai"
    elif ("date" in cols or "hour" in cols) and all(c in cols for c in _GENERIC_NEEDS):
        layout = "generic"
    else:
        shown = ", ".join(h for h in header[:12] if h) or "none"
        raise ExportFileError(f"{file_name}: unknown layout (columns: {shown}). {LAYOUT_HELP}.")

    def cell(row: list[str], name: str) -> str | None:
        i = cols.get(name)
        return row[i] if i is not None and i < len(row) else None

    lines: list[UsageLine] = []
    providers: set[str] = set()
    granularity: Granularity = "hour" if layout == "generic" and "hour" in cols else "day"
    for n, row in enumerate(rows[1:], start=2):
        if not any(c.strip() for c in row):
            continue
        if len(row) != len(header):
            raise ExportFileError(f"line {n}: {len(row)} fields where the header has {len(header)}")
        model = (cell(row, "model") or "").strip()
        if not model:
            raise ExportFileError(f"line {n}: no model")
        if layout == "openai":
            s = _int(cell(row, "start_time"), "start_time", n)
            e = _int(cell(row, "end_time"), "end_time", n)
            width = e - s
            if width not in (3600, 86400):
                raise ExportFileError(f"line {n}: buckets must be 1 hour or 1 day wide")
            line_granularity: Granularity = "hour" if width == 3600 else "day"
            if lines and line_granularity != granularity:
                raise ExportFileError(f"line {n}: hourly and daily buckets mixed")
            granularity = line_granularity
            try:
                start, end = datetime.fromtimestamp(s, UTC), datetime.fromtimestamp(e, UTC)
            except (ValueError, OverflowError, OSError):
                start = end = EARLIEST - timedelta(days=1)  # refused just below
            local = start.astimezone(tz)
            label = local.strftime("%Y-%m-%d" if granularity == "day" else "%Y-%m-%dT%H")
            cached = _int(cell(row, "input_cached_tokens"), "input_cached_tokens", n)
            reasoning_raw = cell(row, "output_reasoning_tokens")
            cost_col = "cost_usd" if "cost_usd" in cols else "amount_value"
        else:
            raw_bucket = cell(row, "hour" if granularity == "hour" else "date") or ""
            start, end, label = _local_bucket(raw_bucket, granularity, tz, n)
            cached = _int(cell(row, "cached_input_tokens"), "cached_input_tokens", n)
            reasoning_raw = cell(row, "reasoning_tokens")
            cost_col = "cost_usd"
            prov = (cell(row, "provider") or "").strip().lower()
            if prov:
                providers.add(prov)
        if start < EARLIEST or end > LATEST:
            raise ExportFileError(f"line {n}: the bucket is not between 1971 and 9998")
        input_tokens = _int(cell(row, "input_tokens"), "input_tokens", n)
        if cached > input_tokens:
            raise ExportFileError(f"line {n}: more cached input tokens than input tokens")
        cost_raw = cell(row, cost_col)
        lines.append(
            UsageLine(
                start=start,
                end=end,
                label=label,
                model=model,
                input_tokens=input_tokens,
                cached_input_tokens=cached,
                output_tokens=_int(cell(row, "output_tokens"), "output_tokens", n),
                reasoning_tokens=None
                if reasoning_raw is None or not reasoning_raw.strip()
                else _int(reasoning_raw, "reasoning_tokens", n),
                cost_musd=None
                if cost_raw is None or not cost_raw.strip()
                else _usd(cost_raw, cost_col, n),
                line_no=n,
            )
        )
    if not lines:
        raise ExportFileError(f"{file_name} has a header but no usage rows")
    return ProviderExport(
        file_name=file_name,
        sha256=hashlib.sha256(data).hexdigest(),
        layout=layout,
        granularity=granularity,
        tz=billing_tz,
        lines=tuple(lines),
        providers=frozenset(providers),
    )
