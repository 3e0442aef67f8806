"""OpenAI's organization Usage API (completions) and Costs API answers, saved as JSON.

``GET /v1/organization/usage/completions?…&group_by=model`` and
``GET /v1/organization/costs?…`` answer one *page*::

    {"object": "page", "has_more": false, "next_page": null,
     "data": [{"object": "bucket", "start_time": 1730419200, "end_time": 1730505600,
               "results": [{"object": "organization.usage.completions.result",
                            "input_tokens": 1000, "input_cached_tokens": 800,
                            "output_tokens": 500, "num_model_requests": 5,
                            "model": "gpt-4o-mini-2024-07-18", "project_id": null,
                            "user_id": null, "api_key_id": null, "batch": null}]}]}

A costs result is ``{"object": "organization.costs.result", "amount": {"value": 0.06,
"currency": "usd"}, "line_item": null, "project_id": null}``. A file holds one page or a
JSON list of the pages in order; the last must say ``"has_more": false`` (a page that
says more follow is refused: the usage would be partial). Buckets are Unix seconds, UTC;
numbers are read exactly (``0.06`` is 60,000 µUSD, never a float).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any

from budget.books.periods import ExportFileError, zone
from budget.books.readers.cells import Repeats, check_usd, label_of, unix_bucket, usd_musd, zone_of
from budget.books.readers.lines import CostLine, Granularity, ReadFile, UsageLine

__all__ = ["COMPLETIONS", "COSTS", "read_pages"]

COMPLETIONS = "organization.usage.completions.result"
COSTS = "organization.costs.result"
_MAX_COUNT = 10**18


def _load(data: bytes, file_name: str) -> list[dict[str, Any]]:
    try:
        found = json.loads(data.decode("utf-8-sig"), parse_float=Decimal)
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise ExportFileError(f"{file_name} is not readable JSON") from None
    pages = found if isinstance(found, list) else [found]
    if not pages or not all(isinstance(p, dict) and isinstance(p.get("data"), list) for p in pages):
        raise ExportFileError(
            f"{file_name} is JSON but not OpenAI Usage or Costs API pages (an object with "
            '"data": [buckets], or a list of them)'
        )
    last = pages[-1]
    if last.get("has_more") is True:
        raise ExportFileError(
            f"{file_name}: page {len(pages)} says more pages follow (has_more, next_page "
            f"{str(last.get('next_page'))[:40]!r}): fetch every page and send them together "
            "as one JSON list"
        )
    return pages


def _count(result: dict[str, Any], name: str, where: str, *, required: bool = True) -> int:
    value = result.get(name)
    if value is None and not required:
        return 0
    if isinstance(value, Decimal) and value == value.to_integral_value():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < _MAX_COUNT:
        raise ExportFileError(f"{where}: {name} {str(value)[:20]!r} is not a whole number ≥ 0")
    return value


@dataclass(slots=True)
class _Pages:
    """What the pages hold, gathered bucket by bucket."""

    file_name: str
    api_key: str | None
    kind: str = ""
    usage: list[tuple[datetime, datetime, dict[str, Any], int, str]] = field(default_factory=list)
    costs: list[tuple[datetime, datetime, Decimal, str, int]] = field(default_factory=list)
    widths: set[Granularity] = field(default_factory=set)
    repeats: list[str] = field(default_factory=list)
    keys: set[str] = field(default_factory=set)
    ordinal: int = 0

    def bucket(self, bucket: Any, where: str, buckets: Repeats) -> None:
        if not isinstance(bucket, dict) or not isinstance(
            results := bucket.get("results", bucket.get("result")), list
        ):
            raise ExportFileError(f"{where}: not a bucket with results")
        start, end, granularity = unix_bucket(
            str(bucket.get("start_time")), str(bucket.get("end_time")), where
        )
        if (repeat := buckets.seen(start, where)) is not None:
            raise ExportFileError(
                f"{repeat} (the same {start:%Y-%m-%d %H:%M} UTC bucket): a page sent twice? "
                "Nothing was compared or changed"
            )
        self.widths.add(granularity)
        seen = Repeats()
        for r, result in enumerate(results, start=1):
            self.result(result, f"{where}, result {r}", start, end, seen)

    def result(
        self, result: Any, where: str, start: datetime, end: datetime, seen: Repeats
    ) -> None:
        kind = result.get("object") if isinstance(result, dict) else None
        if kind not in (COMPLETIONS, COSTS):
            raise ExportFileError(
                f"{where}: {str(kind)[:60]!r} results — Kopek compares chat completions "
                "usage (/organization/usage/completions) and costs (/organization/costs)"
            )
        if self.kind and kind != self.kind:
            raise ExportFileError(f"{where}: usage and costs results mixed in one file")
        self.kind = kind
        self.ordinal += 1
        if kind == COSTS:
            self.cost(result, where, start, end, seen)
            return
        key = result.get("api_key_id") or ""
        self.keys.add(str(key))
        if self.api_key and key != self.api_key:
            return
        group = tuple(sorted((k, str(v)) for k, v in result.items()))
        if (repeat := seen.seen(group, where)) is not None:
            self.repeats.append(f"{repeat} (every field the same): counted twice")
        self.usage.append((start, end, result, self.ordinal, where))

    def cost(
        self, result: dict[str, Any], where: str, start: datetime, end: datetime, seen: Repeats
    ) -> None:
        amount = result.get("amount")
        if not isinstance(amount, dict) or amount.get("value") is None:
            return  # a bucket without cost
        check_usd(str(amount.get("currency") or ""), "amount.currency", where)
        value = amount["value"]
        if isinstance(value, bool) or not isinstance(value, int | Decimal | str):
            raise ExportFileError(f"{where}: amount.value {str(value)[:20]!r} is not a number")
        item = str(result.get("line_item") or "")
        if (repeat := seen.seen((item, str(result.get("project_id"))), where)) is not None:
            raise ExportFileError(
                f"{repeat} (the same bucket, line item and project): nothing was compared "
                "or changed"
            )
        musd = usd_musd(value if isinstance(value, str) else Decimal(value), "amount.value", where)
        self.costs.append((start, end, musd, item, self.ordinal))


def _usage_line(
    found: tuple[datetime, datetime, dict[str, Any], int, str], tz_name: str
) -> UsageLine:
    start, end, result, ordinal, where = found
    model = result.get("model")
    if not isinstance(model, str) or not model.strip():
        raise ExportFileError(f"{where} has no model: fetch the usage with group_by=model")
    input_tokens = _count(result, "input_tokens", where)
    cached = _count(result, "input_cached_tokens", where, required=False)
    if cached > input_tokens:
        raise ExportFileError(f"{where}: more cached input tokens than input tokens")
    tz = zone(tz_name)
    granularity: Granularity = "hour" if (end - start).total_seconds() == 3600 else "day"
    return UsageLine(
        start=start,
        end=end,
        label=label_of(start.astimezone(tz), granularity, tz),
        model=model.strip(),
        input_tokens=input_tokens,
        cached_input_tokens=cached,
        output_tokens=_count(result, "output_tokens", where),
        reasoning_tokens=None,
        cost_musd=None,
        line_no=ordinal,
    )


def read_pages(data: bytes, file_name: str, billing_tz: str, api_key: str | None) -> ReadFile:
    """Read Usage (completions) or Costs API pages saved as JSON (module docstring);
    ``api_key``: only the usage results of that ``api_key_id``.

    Raises:
        ExportFileError: not such pages, a page saying more follow, a bucket twice,
            another currency than USD, a result without model, a bad number (where it
            is named: ``page 1, bucket 2, result 3``).
        PeriodError: ``billing_tz`` is not an IANA zone.
    """
    zone(billing_tz)
    pages = _Pages(file_name, api_key)
    buckets = Repeats()
    for p, page in enumerate(_load(data, file_name), start=1):
        for b, bucket in enumerate(page["data"], start=1):
            pages.bucket(bucket, f"page {p}, bucket {b}", buckets)
    if len(pages.widths) > 1:
        raise ExportFileError(f"{file_name}: hourly and daily buckets mixed")
    granularity: Granularity = pages.widths.pop() if pages.widths else "day"
    starts = [u[0] for u in pages.usage] + [c[0] for c in pages.costs]
    tz_name, note = zone_of(starts, granularity, billing_tz)
    if api_key and pages.kind == COMPLETIONS and not pages.usage:
        raise ExportFileError(
            f"no result of {file_name} has api_key_id {api_key!r} (its keys: "
            f"{', '.join(sorted(k for k in pages.keys if k)[:5]) or 'none: group_by=api_key_id'})"
        )
    tz = zone(tz_name)
    notes = (note,) if note else ()
    if pages.kind == COSTS:
        costs = tuple(
            CostLine(s, e, label_of(s.astimezone(tz), granularity, tz), c, i, n)
            for s, e, c, i, n in pages.costs
        )
        return ReadFile(
            file_name,
            "OpenAI Costs API JSON",
            "openai",
            "costs",
            granularity,
            tz_name,
            costs=costs,
            notes=notes,
        )
    return ReadFile(
        file_name,
        "OpenAI Usage API JSON",
        "openai",
        "usage",
        granularity,
        tz_name,
        lines=tuple(_usage_line(u, tz_name) for u in pages.usage),
        notes=notes,
        repeats=tuple(pages.repeats),
        apply_off="the file repeats results word for word" if pages.repeats else "",
    )
