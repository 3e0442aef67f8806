"""DeepSeek's usage download (platform.deepseek.com → Usage → Export): a ZIP of two
CSV sheets, ``amount-<from>_<to>.csv`` and ``cost-<from>_<to>.csv`` (either read alone
too, except that a cost sheet alone holds no tokens).

* **Amount sheet**: one row per UTC day, model, API key and token type, no cost column::

      user_id,utc_date,model,api_key_name,api_key,type,price,amount
      u1,2026-07-25,deepseek-chat,kopek,sk-…3f,input_cache_hit_tokens,0.000000028,1000

  ``type`` is ``input_cache_hit_tokens``, ``input_cache_miss_tokens``, ``output_tokens``
  or ``request_count``; ``price`` is the price of one unit (USD per token for a USD
  account; ``2.8e-8`` is read exactly); ``utc_date`` is a UTC day (``YYYY-MM-DD`` or
  ``YYYYMMDD``) whatever ``DEEPSEEK_BILLING_TZ`` says. Read per day and model: input =
  hit + miss, cached = hit, output = output, cost = Σ price × amount. A day may hold
  two rows of one type at two prices (off-peak hours): both count. With an API key
  named (its ``api_key_name``), only its rows; without, every key's rows are summed,
  the report says which keys, and no correction is booked from the sum (another app's
  usage is in it).
* **Cost sheet**: ``user_id,utc_date,model,wallet_type,cost,currency`` — what each
  wallet (``paid``, ``granted``) paid per day and model. Its ``currency`` says what the
  amount sheet's prices are in: anything but USD (a CNY account) is refused, nothing is
  converted. In USD its total is set beside the amount sheet's in the report.

The same day, model, key, type and price on two rows is refused (``line 5 repeats
line 3``): it would be billed twice.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal

from budget.books.periods import ExportFileError
from budget.books.readers.cells import Repeats, check_usd, count, price_musd, usd_musd, utc_day
from budget.books.readers.lines import ReadFile, UsageLine
from budget.books.readers.table import Table
from budget.policy.money import round_musd, usd_text

__all__ = [
    "AMOUNT_LAYOUT",
    "AMOUNT_NEEDS",
    "AMOUNT_SIGNATURE",
    "COST_LAYOUT",
    "COST_NEEDS",
    "COST_SIGNATURE",
    "TYPES",
    "read_amount",
    "read_cost",
]

AMOUNT_LAYOUT = "DeepSeek amount sheet"
COST_LAYOUT = "DeepSeek cost sheet"
AMOUNT_NEEDS = ("utc_date", "model", "api_key_name", "type", "price", "amount")
AMOUNT_SIGNATURE = frozenset({*AMOUNT_NEEDS, "user_id", "api_key"})
COST_NEEDS = ("utc_date", "model", "wallet_type", "cost", "currency")
COST_SIGNATURE = frozenset({*COST_NEEDS, "user_id", "api_key_name"})
TYPES = ("input_cache_hit_tokens", "input_cache_miss_tokens", "output_tokens", "request_count")


@dataclass(slots=True)
class _Day:
    """One day and model of the amount sheet, summed."""

    hit: int = 0
    miss: int = 0
    output: int = 0
    cost_musd: Decimal = Decimal(0)
    line_no: int = 0


def _names_note(names: set[str], api_key: str | None, file_name: str) -> str | None:
    if api_key is not None:
        if api_key not in names:
            shown = ", ".join(sorted(names)[:8]) or "none"
            raise ExportFileError(
                f"no row of {file_name} has api_key_name {api_key!r} (its keys: {shown})"
            )
        return f"only the rows of API key {api_key}"
    if len(names) > 1:
        return (
            f"summed over {len(names)} API keys ({', '.join(sorted(names)[:8])}); name one "
            "to compare only its rows"
        )
    return None


def read_amount(table: Table, api_key: str | None) -> ReadFile:
    """Read a DeepSeek amount sheet (module docstring); ``api_key``: only the rows whose
    ``api_key_name`` it is.

    Raises:
        ExportFileError: an unknown type, a bad value, a repeated row (the line named),
            an API key no row has.
    """
    days: dict[tuple[datetime, str], _Day] = defaultdict(_Day)
    names: set[str] = set()
    seen = Repeats()
    for n, row in table.rows():
        where = f"line {n}"
        name = table.cell(row, "api_key_name") or ""
        names.add(name)
        start, _ = utc_day(table.cell(row, "utc_date"), where)
        model = table.cell(row, "model") or ""
        kind = table.cell(row, "type") or ""
        if not model:
            raise ExportFileError(f"{where}: no model")
        if kind not in TYPES:
            raise ExportFileError(f"{where}: type {kind[:40]!r} is not one of {', '.join(TYPES)}")
        price = price_musd(table.cell(row, "price"), table.named("price"), where)
        key = (start, model, name, table.cell(row, "api_key") or "", kind, price)
        if (repeat := seen.seen(key, where)) is not None:
            raise ExportFileError(
                f"{repeat} (the same day, model, API key, type and price): it would be "
                "billed twice; nothing was compared or changed"
            )
        if api_key is not None and name != api_key:
            continue
        amount = count(table.cell(row, "amount"), "amount", where, floats=True)
        day = days[(start, model)]
        day.line_no = day.line_no or n
        day.cost_musd += price * amount
        if kind == "input_cache_hit_tokens":
            day.hit += amount
        elif kind == "input_cache_miss_tokens":
            day.miss += amount
        elif kind == "output_tokens":
            day.output += amount
    note = _names_note(names, api_key, table.file_name)
    summed = api_key is None and len(names) > 1
    lines = tuple(
        UsageLine(
            start=start,
            end=start + timedelta(days=1),
            label=start.date().isoformat(),
            model=model,
            input_tokens=day.hit + day.miss,
            cached_input_tokens=day.hit,
            output_tokens=day.output,
            reasoning_tokens=None,
            cost_musd=day.cost_musd,
            line_no=day.line_no,
        )
        for (start, model), day in sorted(days.items())
    )
    return ReadFile(
        file_name=table.file_name,
        layout=AMOUNT_LAYOUT,
        family="deepseek",
        kind="usage",
        granularity="day",
        tz="UTC",
        lines=lines,
        providers=frozenset({"deepseek"}),
        notes=(note,) if note else (),
        apply_off="it sums several API keys' rows (name yours to correct from it)"
        if summed
        else "",
    )


def read_cost(table: Table) -> ReadFile:
    """Read a DeepSeek cost sheet: every row's currency must be USD; the wallets' totals
    become a note.

    Raises:
        ExportFileError: a currency other than USD, a bad value, a repeated row (the
            line named).
    """
    wallets: dict[str, Decimal] = defaultdict(Decimal)
    seen = Repeats()
    for n, row in table.rows():
        where = f"line {n}"
        check_usd(table.cell(row, "currency"), "currency", where)
        start, _ = utc_day(table.cell(row, "utc_date"), where)
        wallet = table.cell(row, "wallet_type") or "?"
        key = (start, table.cell(row, "model"), table.cell(row, "api_key_name"), wallet)
        if (repeat := seen.seen(key, where)) is not None:
            raise ExportFileError(
                f"{repeat} (the same day, model and wallet): nothing was compared or changed"
            )
        wallets[wallet] += usd_musd(table.cell(row, "cost"), table.named("cost"), where)
    total = sum(wallets.values(), Decimal(0))
    parts = ", ".join(f"{w} {usd_text(round_musd(v))}" for w, v in sorted(wallets.items()))
    return ReadFile(
        file_name=table.file_name,
        layout=COST_LAYOUT,
        family="deepseek",
        kind="cost sheet",
        granularity="day",
        tz="UTC",
        providers=frozenset({"deepseek"}),
        notes=(f"cost sheet {table.file_name}: {usd_text(round_musd(total))} in USD ({parts})",),
    )
