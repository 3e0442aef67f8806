"""OpenAI's usage and costs files as the dashboard downloads them (CSV; a copy pasted
from a spreadsheet is tab-separated and read the same).

* **Usage CSV** (platform.openai.com → Usage → Export; the completions usage the
  organization Usage API returns, as CSV): one row per bucket and group (project, user,
  API key, model, batch, service tier — and sometimes several rows with the same group)::

      start_time,end_time,start_time_iso,end_time_iso,project_id,num_model_requests,
      user_id,api_key_id,model,batch,service_tier,input_tokens,output_tokens,
      input_cached_tokens,input_uncached_tokens,input_text_tokens,…,output_image_tokens

  ``start_time``/``end_time`` are Unix seconds (1-hour or 1-day buckets, UTC); counts are
  written as floats (``5760.0``); a bucket without usage is a row with only its times;
  ``input_tokens`` counts cached tokens too (= ``input_cached_tokens`` +
  ``input_uncached_tokens``, checked when both are there). No cost column: costs come
  from the price card (or from the costs CSV of the same ZIP). A shorter form with only
  ``start_time, end_time, model, input_tokens, input_cached_tokens, output_tokens`` and
  an optional ``cost_usd`` (or ``amount_value`` + ``amount_currency``) is read the same.
  With an API key named, only its rows (``api_key_id``) are read.
* **Costs CSV** (Usage → Export on the cost view): money per UTC day, no model or tokens::

      start_time,end_time,start_time_iso,end_time_iso,amount_value,amount_currency,
      line_item,project_id,organization_id,organization_name

  ``amount_currency`` must be ``usd`` on every row that has an amount (anything else is
  refused: nothing is converted); a day without cost has an empty amount, read as $0
  (the ledger's day is then compared with nothing billed).

Rows repeated word for word in a usage file are kept (OpenAI does write rows of the same
group twice) and named in the report, which then applies nothing; a costs row repeating
a bucket, line item and project is refused.
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal

from budget.books.periods import ExportFileError, zone
from budget.books.readers.cells import (
    Repeats,
    check_usd,
    count,
    label_of,
    unix_bucket,
    usd_musd,
    zone_of,
)
from budget.books.readers.lines import CostLine, Granularity, ReadFile, UsageLine
from budget.books.readers.table import Table

__all__ = [
    "COSTS_LAYOUT",
    "COSTS_NEEDS",
    "COSTS_SIGNATURE",
    "USAGE_LAYOUT",
    "USAGE_NEEDS",
    "USAGE_SIGNATURE",
    "read_costs",
    "read_usage",
]

USAGE_LAYOUT = "OpenAI usage CSV"
COSTS_LAYOUT = "OpenAI costs CSV"
_TIMES = ("start_time", "end_time")
USAGE_NEEDS = (*_TIMES, "model", "input_tokens", "input_cached_tokens", "output_tokens")
USAGE_SIGNATURE = frozenset(
    {
        *USAGE_NEEDS,
        "start_time_iso",
        "end_time_iso",
        "project_id",
        "num_model_requests",
        "user_id",
        "api_key_id",
        "batch",
        "service_tier",
        "input_uncached_tokens",
    }
)
COSTS_NEEDS = (*_TIMES, "amount_value", "amount_currency")
COSTS_SIGNATURE = frozenset(
    {*COSTS_NEEDS, "start_time_iso", "end_time_iso", "line_item", "project_id", "organization_id"}
)
_TIME_COLUMNS = frozenset({*_TIMES, "start_time_iso", "end_time_iso"})


def _empty_bucket(table: Table, row: list[str]) -> bool:
    """A row holding only its bucket's times (a day without usage or cost)."""
    return not any(
        c.strip() for name, c in zip(table.header, row, strict=True) if name not in _TIME_COLUMNS
    )


def _granularity(widths: set[Granularity]) -> Granularity:
    if len(widths) > 1:
        raise ExportFileError("hourly and daily buckets mixed in one file")
    return widths.pop() if widths else "day"


def _usage_cost(table: Table, row: list[str], where: str) -> Decimal | None:
    column = "cost_usd" if table.has("cost_usd") else "amount_value"
    raw = table.cell(row, column)
    if not raw:
        return None
    if table.has("amount_currency"):
        check_usd(table.cell(row, "amount_currency"), "amount_currency", where)
    return usd_musd(raw, table.named(column), where)


def _usage_row(table: Table, row: list[str], n: int, tz_name: str) -> UsageLine:
    where = f"line {n}"
    model = table.cell(row, "model") or ""
    if not model:
        raise ExportFileError(
            f"{where}: no model — export the usage grouped by model (Group by: Model)"
        )
    start, end, _ = unix_bucket(
        table.cell(row, "start_time"), table.cell(row, "end_time"), where, floats=True
    )
    input_tokens = count(table.cell(row, "input_tokens"), "input_tokens", where, floats=True)
    cached = count(
        table.cell(row, "input_cached_tokens"), "input_cached_tokens", where, floats=True
    )
    if cached > input_tokens:
        raise ExportFileError(f"{where}: more cached input tokens than input tokens")
    uncached = table.cell(row, "input_uncached_tokens")
    if (
        uncached
        and count(uncached, "input_uncached_tokens", where, floats=True) + cached != input_tokens
    ):
        raise ExportFileError(
            f"{where}: input_tokens is not input_cached_tokens + input_uncached_tokens"
        )
    reasoning = table.cell(row, "output_reasoning_tokens")
    granularity: Granularity = "hour" if (end - start).total_seconds() == 3600 else "day"
    tz = zone(tz_name)
    return UsageLine(
        start=start,
        end=end,
        label=label_of(start.astimezone(tz), granularity, tz),
        model=model,
        input_tokens=input_tokens,
        cached_input_tokens=cached,
        output_tokens=count(table.cell(row, "output_tokens"), "output_tokens", where, floats=True),
        reasoning_tokens=count(reasoning, "output_reasoning_tokens", where, floats=True)
        if reasoning
        else None,
        cost_musd=_usage_cost(table, row, where),
        line_no=n,
    )


def read_usage(table: Table, billing_tz: str, api_key: str | None) -> ReadFile:
    """Read an OpenAI usage CSV (module docstring); ``api_key``: only that
    ``api_key_id``'s rows.

    Raises:
        ExportFileError: a bad value (its line named), mixed bucket widths, an API key
            named for a file without ``api_key_id`` or with no row of it.
        PeriodError: ``billing_tz`` is not an IANA zone.
    """
    zone(billing_tz)
    if api_key and not table.has("api_key_id"):
        raise ExportFileError(
            f"{table.file_name} is not split by API key (no api_key_id column): send it "
            f"without naming a key, or export it grouped by API key"
        )
    rows: list[tuple[int, list[str]]] = []
    repeats: list[str] = []
    seen = Repeats()
    keys: set[str] = set()
    for n, row in table.rows():
        if _empty_bucket(table, row):
            continue
        key = table.cell(row, "api_key_id") or ""
        keys.add(key)
        if api_key and key != api_key:
            continue
        if (repeat := seen.seen(tuple(c.strip() for c in row), f"line {n}")) is not None:
            repeats.append(f"{repeat} (every cell the same): counted twice, as the file says")
        rows.append((n, row))
    if api_key and not rows:
        raise ExportFileError(
            f"no row of {table.file_name} has api_key_id {api_key!r} (its keys: "
            f"{', '.join(sorted(k for k in keys if k)[:5]) or 'none'})"
        )
    starts = [
        unix_bucket(
            table.cell(r, "start_time"), table.cell(r, "end_time"), f"line {n}", floats=True
        )
        for n, r in rows
    ]
    granularity = _granularity({g for _, _, g in starts})
    tz_name, note = zone_of([s for s, _, _ in starts], granularity, billing_tz)
    lines = tuple(_usage_row(table, row, n, tz_name) for n, row in rows)
    notes = [note] if note else []
    if api_key:
        notes.append(f"only the rows of API key {api_key} ({len(lines)} rows)")
    return ReadFile(
        file_name=table.file_name,
        layout=USAGE_LAYOUT,
        family="openai",
        kind="usage",
        granularity=granularity,
        tz=tz_name,
        lines=lines,
        notes=tuple(notes),
        repeats=tuple(repeats),
        apply_off="the file repeats rows word for word" if repeats else "",
    )


def read_costs(table: Table, billing_tz: str) -> ReadFile:
    """Read an OpenAI costs CSV (module docstring).

    Raises:
        ExportFileError: a currency other than USD, a bad value or a repeated bucket
            (the line named).
        PeriodError: ``billing_tz`` is not an IANA zone.
    """
    zone(billing_tz)
    found: list[tuple[datetime, datetime, Decimal, str, int]] = []
    widths: set[Granularity] = set()
    seen = Repeats()
    for n, row in table.rows():
        where = f"line {n}"
        start, end, granularity = unix_bucket(
            table.cell(row, "start_time"), table.cell(row, "end_time"), where, floats=True
        )
        amount = table.cell(row, "amount_value")
        if amount:
            check_usd(table.cell(row, "amount_currency"), "amount_currency", where)
        line_item = table.cell(row, "line_item") or ""
        project = table.cell(row, "project_id") or ""
        if (repeat := seen.seen((start, line_item, project), where)) is not None:
            raise ExportFileError(
                f"{repeat} (the same bucket, line item and project): it would be billed "
                "twice; nothing was compared or changed"
            )
        widths.add(granularity)
        cost = usd_musd(amount, table.named("amount_value"), where) if amount else Decimal(0)
        found.append((start, end, cost, line_item, n))  # an empty amount: a day without cost
    granularity = _granularity(widths)
    tz_name, note = zone_of([f[0] for f in found], granularity, billing_tz)
    tz = zone(tz_name)
    costs = tuple(
        CostLine(s, e, label_of(s.astimezone(tz), granularity, tz), cost, item, n)
        for s, e, cost, item, n in found
    )
    return ReadFile(
        file_name=table.file_name,
        layout=COSTS_LAYOUT,
        family="openai",
        kind="costs",
        granularity=granularity,
        tz=tz_name,
        costs=costs,
        notes=(note,) if note else (),
    )
