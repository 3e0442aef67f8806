"""The files providers really serve, built from the ledger's own bookings (reader and
reconcile tests): DeepSeek's usage download (the ZIP of its amount and cost sheets) and
OpenAI's dashboard usage and costs CSVs and its Usage / Costs API pages, each of exactly
the shape of the real ones (``docs/books.md``, "Provider exports read"; real OpenAI
samples in ``../shared/corpus/billing/``, not copied here: no licence).

Each builder reads the booked attempts of one provider key from the SQLite file and sums
them per UTC day and model (:func:`daily_usage`), priced at the card's list rates
exactly (no rounding per attempt: the provider prices its sums); the perturbations a
test needs are arguments.
"""

from __future__ import annotations

import csv
import io
import json
import sqlite3
import zipfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

from budget.pricing.prices import PriceCard
from budget.types import Usage

__all__ = [
    "DEEPSEEK_AMOUNT_HEADER",
    "DEEPSEEK_COST_HEADER",
    "OPENAI_COSTS_HEADER",
    "OPENAI_USAGE_HEADER",
    "Day",
    "daily_usage",
    "deepseek_amount_sheet",
    "deepseek_cost_sheet",
    "deepseek_zip",
    "openai_api_pages",
    "openai_costs_csv",
    "openai_usage_csv",
    "zip_files",
]

DEEPSEEK_AMOUNT_HEADER = (
    "user_id",
    "utc_date",
    "model",
    "api_key_name",
    "api_key",
    "type",
    "price",
    "amount",
)
DEEPSEEK_COST_HEADER = ("user_id", "utc_date", "model", "wallet_type", "cost", "currency")
#: The real dashboard export's 24 columns, in its order.
OPENAI_USAGE_HEADER = (
    "start_time",
    "end_time",
    "start_time_iso",
    "end_time_iso",
    "project_id",
    "num_model_requests",
    "user_id",
    "api_key_id",
    "model",
    "batch",
    "service_tier",
    "input_tokens",
    "output_tokens",
    "input_cached_tokens",
    "input_uncached_tokens",
    "input_text_tokens",
    "output_text_tokens",
    "input_cached_text_tokens",
    "input_audio_tokens",
    "input_cached_audio_tokens",
    "output_audio_tokens",
    "input_image_tokens",
    "input_cached_image_tokens",
    "output_image_tokens",
)
OPENAI_COSTS_HEADER = (
    "start_time",
    "end_time",
    "start_time_iso",
    "end_time_iso",
    "amount_value",
    "amount_currency",
    "line_item",
    "project_id",
    "organization_id",
    "organization_name",
)


@dataclass
class Day:
    """One UTC day and model of bookings: tokens, requests and the exact list price
    (µUSD) per line (uncached input, cached input, output)."""

    start: datetime
    model: str
    input_tokens: int = 0
    cached_input_tokens: int = 0
    output_tokens: int = 0
    requests: int = 0
    rates: tuple[Decimal, Decimal, Decimal] = (Decimal(0), Decimal(0), Decimal(0))
    hold_ids: list[str] = field(default_factory=list)

    @property
    def cost_musd(self) -> Decimal:
        """The exact list price of the day's tokens, µUSD."""
        uncached = self.input_tokens - self.cached_input_tokens
        r_in, r_cached, r_out = self.rates
        return uncached * r_in + self.cached_input_tokens * r_cached + self.output_tokens * r_out


def daily_usage(
    db_path: Path, card: PriceCard, key_name: str, real: Mapping[str, Usage] | None = None
) -> list[Day]:
    """The booked attempts of ``key_name`` summed per UTC day and model (oldest first);
    ``real``: hold id → the usage the provider really billed (for bookings the ledger only
    estimated)."""
    with sqlite3.connect(db_path) as conn:
        rows = conn.execute(
            "SELECT hold_id, model, granted_at, usage_input, usage_cached_input, usage_output"
            " FROM budget_holds WHERE provider = ? AND state IN ('settled', 'expired')"
            " ORDER BY granted_at",
            (key_name,),
        ).fetchall()
    days: dict[tuple[datetime, str], Day] = {}
    for hold_id, model, granted, u_in, u_cached, u_out in rows:
        at = datetime.fromtimestamp(granted, UTC)
        start = at.replace(hour=0, minute=0, second=0, microsecond=0)
        rates = card.rates(key_name, model, at)
        assert rates is not None
        day = days.setdefault((start, model), Day(start, model))
        day.rates = (rates.input, rates.cached, rates.output)
        billed = (real or {}).get(hold_id) or Usage(u_in or 0, u_cached or 0, u_out or 0)
        day.input_tokens += billed.input_tokens
        day.cached_input_tokens += billed.cached_input_tokens
        day.output_tokens += billed.output_tokens
        day.requests += 1
        day.hold_ids.append(hold_id)
    return sorted(days.values(), key=lambda d: (d.start, d.model))


def _csv(header: Sequence[str], rows: Iterable[Sequence[object]], delimiter: str = ",") -> bytes:
    buf = io.StringIO(newline="")
    out = csv.writer(buf, delimiter=delimiter, lineterminator="\r\n")
    out.writerow(header)
    out.writerows(rows)
    return buf.getvalue().encode()


def _usd_per_token(rate_per_mtok: Decimal) -> str:
    return format(rate_per_mtok.scaleb(-6).normalize(), "f")


def deepseek_amount_sheet(
    days: Sequence[Day],
    *,
    api_key_name: str = "kopek",
    other_key: str | None = None,
    compact_dates: bool = False,
    repeat_line: int | None = None,
) -> bytes:
    """DeepSeek's amount sheet (UTF-8 with BOM, CRLF, as served): four rows per day and
    model (``input_cache_hit_tokens``, ``input_cache_miss_tokens``, ``output_tokens``,
    ``request_count``), ``price`` USD per token. ``other_key``: the same usage booked again
    under a second API key (another app of the account). ``repeat_line``: that data line
    (2 = the first) written twice."""
    rows: list[list[object]] = []
    for day in days:
        date = day.start.strftime("%Y%m%d" if compact_dates else "%Y-%m-%d")
        for key in (api_key_name, other_key):
            if key is None:
                continue
            r_in, r_cached, r_out = day.rates
            for kind, price, amount in (
                ("input_cache_hit_tokens", _usd_per_token(r_cached), day.cached_input_tokens),
                (
                    "input_cache_miss_tokens",
                    _usd_per_token(r_in),
                    day.input_tokens - day.cached_input_tokens,
                ),
                ("output_tokens", _usd_per_token(r_out), day.output_tokens),
                ("request_count", "", day.requests),
            ):
                rows.append(
                    ["u-1", date, day.model, key, f"sk-****{len(key):02d}", kind, price, amount]
                )
    if repeat_line is not None:
        rows.insert(repeat_line - 1, rows[repeat_line - 2])
    return b"\xef\xbb\xbf" + _csv(DEEPSEEK_AMOUNT_HEADER, rows)


def deepseek_cost_sheet(days: Sequence[Day], *, currency: str = "USD") -> bytes:
    """DeepSeek's cost sheet: per day and model, the granted wallet first (up to $0.001),
    the paid wallet the rest, in ``currency``."""
    rows: list[list[object]] = []
    for day in days:
        usd = day.cost_musd.scaleb(-6)
        granted = min(usd, Decimal("0.001"))
        date = day.start.strftime("%Y-%m-%d")
        rows.append(["u-1", date, day.model, "granted", format(granted, "f"), currency])
        if usd > granted:
            rows.append(["u-1", date, day.model, "paid", format(usd - granted, "f"), currency])
    return b"\xef\xbb\xbf" + _csv(DEEPSEEK_COST_HEADER, rows)


def deepseek_zip(amount: bytes, cost: bytes | None, first: datetime, last: datetime) -> bytes:
    """The ZIP the platform serves: ``amount-<from>_<to>.csv`` and ``cost-<from>_<to>.csv``."""
    span = f"{first:%Y-%m-%d}_{last + timedelta(days=1):%Y-%m-%d}"
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr(f"amount-{span}.csv", amount)
        if cost is not None:
            archive.writestr(f"cost-{span}.csv", cost)
    return buf.getvalue()


def zip_files(files: dict[str, bytes]) -> bytes:
    """A ZIP holding ``files`` (name → bytes), as an operator zips two downloads."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in files.items():
            archive.writestr(name, data)
    return buf.getvalue()


def _iso(at: datetime) -> str:
    return at.isoformat()


def _split(value: int, part: int, of: int) -> int:
    """``part`` (0-based) of ``value`` cut in ``of`` pieces, the first a third (so the two
    rows of a group differ, as the dashboard's do)."""
    if of == 1:
        return value
    return value // 3 if part == 0 else value - value // 3


def openai_usage_csv(
    days: Sequence[Day], *, delimiter: str = ",", api_key_id: str = "key_kopek"
) -> bytes:
    """OpenAI's dashboard usage export: its 24 columns, counts written as floats, each day
    and model split over two rows of the same group (as the dashboard writes), an
    empty row for the day before the first and for every day without usage."""
    rows: list[list[object]] = []
    by_day: dict[datetime, list[Day]] = {}
    for day in days:
        by_day.setdefault(day.start, []).append(day)
    cursor = min(by_day) - timedelta(days=1)
    while cursor <= max(by_day):
        end = cursor + timedelta(days=1)
        times: list[object] = [
            int(cursor.timestamp()),
            int(end.timestamp()),
            _iso(cursor),
            _iso(end),
        ]
        if cursor not in by_day:
            rows.append([*times, *[""] * 20])
        for day in by_day.get(cursor, []):
            pieces = 2 if day.requests > 1 else 1
            for part in range(pieces):
                i = _split(day.input_tokens - day.cached_input_tokens, part, pieces)
                c = _split(day.cached_input_tokens, part, pieces)
                o = _split(day.output_tokens, part, pieces)
                n = _split(day.requests, part, pieces)
                counts = [float(x) for x in (i + c, o, c, i, i, o, c, 0, 0, 0, 0, 0, 0)]
                group = ("proj_kopek", float(n), "user-kopek", api_key_id, day.model)
                rows.append([*times, *group, "FALSE", "default", *counts])
        cursor = end
    return _csv(OPENAI_USAGE_HEADER, rows, delimiter)


def openai_costs_csv(days: Sequence[Day], *, currency: str = "usd") -> bytes:
    """OpenAI's dashboard costs export: money per UTC day (summed over models), 16 digits
    as the dashboard writes them, an empty row for the day after the last."""
    per_day: dict[datetime, Decimal] = {}
    for day in days:
        per_day[day.start] = per_day.get(day.start, Decimal(0)) + day.cost_musd.scaleb(-6)
    rows: list[list[object]] = []
    for start in [*sorted(per_day), max(per_day) + timedelta(days=1)]:
        end = start + timedelta(days=1)
        times: list[object] = [int(start.timestamp()), int(end.timestamp()), _iso(start), _iso(end)]
        if start not in per_day:
            rows.append([*times, "", "", "", "", "", ""])
            continue
        value = format(per_day[start].quantize(Decimal("1e-16")), "f")
        rows.append([*times, value, currency, "", "", "org-kopek", "Personal"])
    return _csv(OPENAI_COSTS_HEADER, rows)


def openai_api_pages(days: Sequence[Day], *, kind: str = "usage", per_page: int = 1) -> bytes:
    """The organization Usage (completions, ``group_by=model``) or Costs API answers for
    the days, ``per_page`` buckets a page, as one JSON list of pages (the last says
    ``has_more: false``)."""
    starts = sorted({d.start for d in days})
    buckets: list[dict[str, object]] = []
    for start in starts:
        here = [d for d in days if d.start == start]
        if kind == "usage":
            results: list[dict[str, object]] = [
                {
                    "object": "organization.usage.completions.result",
                    "input_tokens": d.input_tokens,
                    "output_tokens": d.output_tokens,
                    "input_cached_tokens": d.cached_input_tokens,
                    "input_audio_tokens": 0,
                    "output_audio_tokens": 0,
                    "num_model_requests": d.requests,
                    "project_id": None,
                    "user_id": None,
                    "api_key_id": None,
                    "model": d.model,
                    "batch": None,
                }
                for d in here
            ]
        else:
            usd = sum((d.cost_musd for d in here), Decimal(0)).scaleb(-6)
            results = [
                {
                    "object": "organization.costs.result",
                    "amount": {"value": f"@{usd}@", "currency": "usd"},
                    "line_item": None,
                    "project_id": None,
                }
            ]
        end = start + timedelta(days=1)
        buckets.append(
            {
                "object": "bucket",
                "start_time": int(start.timestamp()),
                "end_time": int(end.timestamp()),
                "results": results,
            }
        )
    pages = [
        {
            "object": "page",
            "data": buckets[i : i + per_page],
            "has_more": i + per_page < len(buckets),
            "next_page": f"page_{i + per_page}" if i + per_page < len(buckets) else None,
        }
        for i in range(0, len(buckets), per_page)
    ]
    # a JSON number, exactly as written (json.dumps has no Decimal)
    return json.dumps(pages, indent=1).replace('"@', "").replace('@"', "").encode()
