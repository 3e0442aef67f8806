"""Kopek's own CSV layout, for a provider whose export is none of the others' (or a
sheet an operator fills by hand).

Columns (names case-insensitive, any order): ``date`` (``YYYY-MM-DD``) or ``hour``
(``YYYY-MM-DDTHH[:00]``, optionally with a UTC offset or ``Z``: ``2026-10-25T02:00+01:00``),
in the billing zone; ``model``; ``input_tokens`` (cached included);
``cached_input_tokens``; ``output_tokens``; ``cost_usd``; optional ``reasoning_tokens``,
``requests``, ``provider`` and ``currency`` (``USD``, the only one read)::

    date,model,input_tokens,cached_input_tokens,output_tokens,cost_usd
    2026-01-14,deepseek-chat,4544,912,1377,0.001862

A local hour that happens twice (the clocks go back) must carry its offset; one bucket,
model and provider on two rows is refused (``line 3 repeats line 2``).
"""

from __future__ import annotations

from budget.books.periods import ExportFileError, zone
from budget.books.readers.cells import Repeats, check_usd, count, local_bucket, usd_musd
from budget.books.readers.lines import Granularity, ReadFile, UsageLine
from budget.books.readers.table import Table

__all__ = ["LAYOUT", "NEEDS", "SIGNATURE", "matches", "read"]

LAYOUT = "Kopek CSV"
NEEDS = ("model", "input_tokens", "cached_input_tokens", "output_tokens", "cost_usd")
SIGNATURE = frozenset({"date", "hour", *NEEDS, "reasoning_tokens", "requests", "provider"})


def matches(table: Table) -> bool:
    """True when ``table`` has this layout's columns."""
    return (table.has("date") or table.has("hour")) and table.has(*NEEDS)


def read(table: Table, billing_tz: str) -> ReadFile:
    """Read a Kopek CSV whose days or hours are cut in ``billing_tz``.

    Raises:
        ExportFileError: a bad value or a repeated row (its line named), no rows.
        PeriodError: ``billing_tz`` is not an IANA zone.
    """
    tz = zone(billing_tz)
    granularity: Granularity = "hour" if table.has("hour") else "day"
    lines: list[UsageLine] = []
    providers: set[str] = set()
    repeats = Repeats()
    for n, row in table.rows():
        where = f"line {n}"
        model = table.cell(row, "model") or ""
        if not model:
            raise ExportFileError(f"{where}: no model")
        column = "hour" if granularity == "hour" else "date"
        start, end, label = local_bucket(table.cell(row, column), granularity, tz, where)
        if table.has("currency"):
            check_usd(table.cell(row, "currency"), "currency", where)
        provider = (table.cell(row, "provider") or "").lower()
        if provider:
            providers.add(provider)
        if (repeat := repeats.seen((start, model, provider), where)) is not None:
            raise ExportFileError(
                f"{repeat} ({label}, {model}{', ' + provider if provider else ''}): the same "
                "bucket and model twice would be billed twice; nothing was compared or changed"
            )
        input_tokens = count(table.cell(row, "input_tokens"), "input_tokens", where)
        cached = count(table.cell(row, "cached_input_tokens"), "cached_input_tokens", where)
        if cached > input_tokens:
            raise ExportFileError(f"{where}: more cached input tokens than input tokens")
        reasoning = table.cell(row, "reasoning_tokens")
        cost = table.cell(row, "cost_usd")
        lines.append(
            UsageLine(
                start=start,
                end=end,
                label=label,
                model=model,
                input_tokens=input_tokens,
                cached_input_tokens=cached,
                output_tokens=count(table.cell(row, "output_tokens"), "output_tokens", where),
                reasoning_tokens=count(reasoning, "reasoning_tokens", where) if reasoning else None,
                cost_musd=usd_musd(cost, table.named("cost_usd"), where) if cost else None,
                line_no=n,
            )
        )
    return ReadFile(
        file_name=table.file_name,
        layout=LAYOUT,
        family="kopek",
        kind="usage",
        granularity=granularity,
        tz=billing_tz,
        lines=tuple(lines),
        providers=frozenset(providers),
    )
