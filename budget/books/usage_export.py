"""A provider's usage export, read into exact per-bucket rows (:func:`parse_export`).

Each file is recognised by its header row (names case-insensitive, comma- or
tab-separated) or, for JSON, by its shape; a ZIP is opened and its files read together.
The layouts, with a sample header each, are listed in ``docs/books.md`` ("Provider
exports read"); the readers are :mod:`budget.books.readers`:

* DeepSeek's usage download — the ZIP, its amount sheet, its cost sheet
  (:mod:`~budget.books.readers.deepseek`);
* OpenAI's usage CSV and costs CSV from the dashboard
  (:mod:`~budget.books.readers.openai`), and the organization Usage / Costs API pages
  as JSON (:mod:`~budget.books.readers.openai_api`);
* Kopek's own CSV (:mod:`~budget.books.readers.kopek`).

Amounts are USD only (any other currency is refused, line named; nothing is
converted), read with :class:`~decimal.Decimal` and kept as exact µUSD. Buckets are
keyed by their UTC start. A file that no reader takes is refused with what it looks
like ("a tab-separated file with columns …: a DeepSeek amount sheet without
api_key_name").

Everything here is a pure function of the bytes: the bot runs :func:`parse_export` in a
worker thread. Why keys are UTC, currencies refused and repeats refused or named:
``docs/decisions/040-provider-exports.md``.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from decimal import Decimal

from budget.books.periods import ExportFileError, zone
from budget.books.readers import deepseek, kopek, openai, openai_api
from budget.books.readers.archive import is_zip, unzip
from budget.books.readers.lines import (
    EARLIEST,
    LATEST,
    MAX_EXPORT_BYTES,
    CostLine,
    Granularity,
    ReadFile,
    UsageLine,
)
from budget.books.readers.table import Table, looks_like, read_table
from budget.policy.money import round_musd, usd_text

__all__ = [
    "EARLIEST",
    "LATEST",
    "LAYOUT_HELP",
    "MAX_EXPORT_BYTES",
    "CostLine",
    "ProviderExport",
    "UsageLine",
    "parse_export",
]

LAYOUT_HELP = (
    "Kopek reads DeepSeek's usage download (the ZIP, or its amount sheet: utc_date, model, "
    "api_key_name, type, price, amount), OpenAI's usage CSV (start_time, end_time, model, "
    "input_tokens, input_cached_tokens, output_tokens) and costs CSV (start_time, "
    "end_time, amount_value, amount_currency), OpenAI's Usage and Costs API pages (JSON), "
    "and its own CSV (date or hour, model, input_tokens, cached_input_tokens, "
    "output_tokens, cost_usd)"
)


@dataclass(frozen=True, slots=True)
class ProviderExport:
    """A parsed usage export (one file, or the files of one ZIP).

    Attributes:
        file_name: as given (shown in reports and correction events).
        sha256: hex digest of the uploaded bytes.
        layout: what was read, as the report names it (``DeepSeek amount sheet + cost
            sheet``).
        granularity: ``"hour"`` or ``"day"`` (of the usage lines; else of the costs).
        tz: the zone its buckets are cut in (``UTC`` when the file says so, else the
            billing zone it was read in).
        lines: usage per bucket and model.
        providers: values of a ``provider`` column (``deepseek`` for DeepSeek's sheets).
        costs: money per bucket without a model (OpenAI's costs).
        notes: sentences for the report (keys summed, zones, a cost sheet's total).
        repeats: rows repeated word for word and kept (``line 5 repeats line 4``).
        apply_off: why no correction may be booked from it (``""``: they may): rows
            repeated, several API keys summed.
    """

    file_name: str
    sha256: str
    layout: str
    granularity: Granularity
    tz: str
    lines: tuple[UsageLine, ...]
    providers: frozenset[str] = frozenset()
    costs: tuple[CostLine, ...] = ()
    notes: tuple[str, ...] = ()
    repeats: tuple[str, ...] = ()
    apply_off: str = ""

    @property
    def has_cost(self) -> bool:
        """True when there are usage lines and every one states its cost."""
        return bool(self.lines) and all(line.cost_musd is not None for line in self.lines)

    @property
    def has_reasoning(self) -> bool:
        """True when the usage lines carry reasoning tokens."""
        return bool(self.lines) and all(line.reasoning_tokens is not None for line in self.lines)


def _near_miss(table: Table) -> str | None:
    """The known layout ``table`` nearly has: ``a DeepSeek amount sheet without api_key_name``."""
    candidates = [
        (deepseek.AMOUNT_LAYOUT, deepseek.AMOUNT_SIGNATURE, deepseek.AMOUNT_NEEDS),
        (deepseek.COST_LAYOUT, deepseek.COST_SIGNATURE, deepseek.COST_NEEDS),
        (openai.USAGE_LAYOUT, openai.USAGE_SIGNATURE, openai.USAGE_NEEDS),
        (openai.COSTS_LAYOUT, openai.COSTS_SIGNATURE, openai.COSTS_NEEDS),
        (kopek.LAYOUT, kopek.SIGNATURE, (*kopek.NEEDS, "date or hour")),
    ]
    best: tuple[int, str] | None = None
    for layout, signature, needs in candidates:
        overlap = len(signature & set(table.cols))
        missing = [n for n in needs if n not in table.cols]
        if "date or hour" in missing and (table.has("date") or table.has("hour")):
            missing.remove("date or hour")
        if overlap >= 3 and missing and (best is None or overlap > best[0]):
            best = (overlap, f"a {layout} without {', '.join(missing)}")
    return None if best is None else best[1]


def _read_table(table: Table, billing_tz: str, api_key: str | None) -> ReadFile:
    if table.has(*deepseek.AMOUNT_NEEDS):
        return deepseek.read_amount(table, api_key)
    if table.has(*deepseek.COST_NEEDS):
        return deepseek.read_cost(table)
    if table.has(*openai.USAGE_NEEDS):
        return openai.read_usage(table, billing_tz, api_key)
    if table.has(*openai.COSTS_NEEDS) and not table.has("model"):
        return openai.read_costs(table, billing_tz)
    if kopek.matches(table):
        if api_key:
            raise ExportFileError(
                f"{table.file_name} ({kopek.LAYOUT}) is not split by API key: send it "
                "without naming one"
            )
        return kopek.read(table, billing_tz)
    raise ExportFileError(
        f"{table.file_name}: unknown layout — {looks_like(table, _near_miss(table))}. "
        f"{LAYOUT_HELP}."
    )


def _read_file(name: str, data: bytes, billing_tz: str, api_key: str | None) -> ReadFile:
    if data.removeprefix(b"\xef\xbb\xbf").lstrip()[:1] in (b"{", b"["):
        return openai_api.read_pages(data, name, billing_tz, api_key)
    return _read_table(read_table(data, name), billing_tz, api_key)


def _one(parts: list[ReadFile], kind: str, file_name: str) -> ReadFile | None:
    found = [p for p in parts if p.kind == kind]
    if len(found) > 1:
        names = ", ".join(p.file_name for p in found)
        raise ExportFileError(
            f"{file_name} holds {len(found)} {kind} files ({names}): send one at a time"
        )
    return found[0] if found else None


def _merge(parts: list[ReadFile], file_name: str, sha256: str) -> ProviderExport:
    usage = _one(parts, "usage", file_name)
    costs = _one(parts, "costs", file_name)
    sheet = _one(parts, "cost sheet", file_name)
    if len({p.family for p in parts}) > 1:
        kinds = " and ".join(f"a {p.layout}" for p in parts)
        raise ExportFileError(f"{file_name} mixes {kinds}: send one provider's files")
    if sheet is not None and usage is None:
        raise ExportFileError(
            f"{sheet.file_name} is a {deepseek.COST_LAYOUT}: it holds no tokens. Send the ZIP "
            "DeepSeek serves (amount and cost sheets) or its amount sheet"
        )
    main = usage or costs
    if main is None or not (main.lines or main.costs):
        raise ExportFileError(f"{file_name} has a header but no usage rows")
    notes = [n for p in parts for n in p.notes]
    if sheet is not None and usage is not None:
        priced = sum((ln.cost_musd or Decimal(0) for ln in usage.lines), Decimal(0))
        notes.append(f"the amount sheet's price × amount: {usd_text(round_musd(priced))}")
    return ProviderExport(
        file_name=file_name,
        sha256=sha256,
        layout=" + ".join(p.layout for p in parts),
        granularity=main.granularity,
        tz=main.tz,
        lines=usage.lines if usage is not None else (),
        providers=frozenset(p for part in parts for p in part.providers),
        costs=costs.costs if costs is not None else (),
        notes=tuple(notes),
        repeats=tuple(r for p in parts for r in p.repeats),
        apply_off=next((p.apply_off for p in parts if p.apply_off), ""),
    )


def parse_export(
    data: bytes, file_name: str, billing_tz: str, *, api_key: str | None = None
) -> ProviderExport:
    """Read a provider usage export (layouts in the module docstring).

    Args:
        data: the file's bytes (UTF-8 text with an optional BOM, JSON, or a ZIP of them).
        file_name: its name, for reports.
        billing_tz: the provider's billing zone (the zone of files whose buckets are
            local days or hours: Kopek's CSV; files stating UTC are read in UTC).
        api_key: compare only this API key's rows (DeepSeek's ``api_key_name``,
            OpenAI's ``api_key_id``); ``None``: every key's, summed.

    Raises:
        ExportFileError: too big, empty, not UTF-8 text, JSON or ZIP, an unknown layout
            (saying what the file looks like), a currency other than USD, a repeated
            row, a bad value (with its line), or no rows.
        PeriodError: ``billing_tz`` is not an IANA zone.
    """
    zone(billing_tz)
    if len(data) > MAX_EXPORT_BYTES:
        raise ExportFileError(
            f"{file_name}: {len(data) / 1024 / 1024:.1f} MiB is over the 20 MiB limit; "
            "export a shorter period"
        )
    if not data.strip():
        raise ExportFileError(f"{file_name} is empty")
    key = api_key.strip() if api_key else None
    if not is_zip(data):
        parts = [_read_file(file_name, data, billing_tz, key)]
    else:
        parts = []
        for name, body in unzip(data, file_name):
            try:
                parts.append(_read_file(name, body, billing_tz, key))
            except ExportFileError as exc:
                raise ExportFileError(f"{file_name} → {exc}") from None
    return _merge(parts, file_name, hashlib.sha256(data).hexdigest())
