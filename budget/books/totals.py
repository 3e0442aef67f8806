"""The totals of a spend export (:mod:`budget.books.export`): sums per provider key, per
``key:model``, per local day and in all, over the attempts still in the ledger and the
sums retention kept of those it pruned (:mod:`budget.books.pruned`). Money µUSD.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, TextIO

from budget.books.csv_out import csv_writer
from budget.books.periods import Period
from budget.books.pruned import PrunedSum


class Attempt(Protocol):
    """What the totals read of a booked attempt (:class:`budget.books.export.Attempt`)."""

    @property
    def provider(self) -> str: ...
    @property
    def model(self) -> str: ...
    @property
    def usage_input(self) -> int | None: ...
    @property
    def usage_cached_input(self) -> int | None: ...
    @property
    def usage_output(self) -> int | None: ...
    @property
    def usage_reasoning(self) -> int | None: ...
    @property
    def actual_musd(self) -> int | None: ...
    @property
    def list_actual_musd(self) -> int | None: ...
    @property
    def estimated(self) -> int: ...


__all__ = ["TOTALS_COLUMNS", "ExportSummary", "ExportTotals"]

TOTALS_COLUMNS: tuple[str, ...] = (
    "group",
    "key",
    "attempts",
    "input_tokens",
    "cached_input_tokens",
    "output_tokens",
    "reasoning_tokens",
    "cost_musd",
    "list_price_musd",
    "estimated",
)


@dataclass(slots=True)
class _Sum:
    attempts: int = 0
    input_tokens: int = 0
    cached_input_tokens: int = 0
    output_tokens: int = 0
    reasoning_tokens: int = 0
    cost_musd: int = 0
    list_price_musd: int = 0
    estimated: int = 0

    def add(self, row: Attempt) -> None:
        self.attempts += 1
        self.input_tokens += int(row.usage_input or 0)
        self.cached_input_tokens += int(row.usage_cached_input or 0)
        self.output_tokens += int(row.usage_output or 0)
        self.reasoning_tokens += int(row.usage_reasoning or 0)
        self.cost_musd += int(row.actual_musd or 0)
        self.list_price_musd += int(row.list_actual_musd or 0)
        self.estimated += int(row.estimated or 0)

    def add_pruned(self, row: PrunedSum) -> None:
        """A sum retention kept (never estimated: those bookings are not pruned)."""
        self.attempts += row.attempts
        self.input_tokens += row.input_tokens
        self.cached_input_tokens += row.cached_input_tokens
        self.output_tokens += row.output_tokens
        self.reasoning_tokens += row.reasoning_tokens
        self.cost_musd += row.cost_musd
        self.list_price_musd += row.list_price_musd

    def cells(self) -> list[int]:
        return [
            self.attempts,
            self.input_tokens,
            self.cached_input_tokens,
            self.output_tokens,
            self.reasoning_tokens,
            self.cost_musd,
            self.list_price_musd,
            self.estimated,
        ]


@dataclass(slots=True)
class ExportSummary:
    """What an export wrote.

    Attributes:
        period: the period exported.
        rows: attempt rows written.
        cost_musd: sum of ``cost_musd`` over the rows and the pruned sums.
        list_price_musd: sum of ``list_price_musd`` over the rows and the pruned sums.
        estimated: rows flagged estimated.
        per_provider: ``cost_musd`` per key name.
        pruned_attempts: attempts counted from the sums retention kept (no row each).
    """

    period: Period
    rows: int = 0
    cost_musd: int = 0
    list_price_musd: int = 0
    estimated: int = 0
    per_provider: dict[str, int] = field(default_factory=dict)
    pruned_attempts: int = 0

    @property
    def attempts_text(self) -> str:
        """``"12 attempts"``, naming those counted only in the totals (pruned)."""
        total = self.rows + self.pruned_attempts
        if not self.pruned_attempts:
            return f"{total} attempts"
        return (
            f"{total} attempts ({self.pruned_attempts} older than the retention window:"
            " in the totals only)"
        )


@dataclass(slots=True)
class ExportTotals:
    """The sums of the totals file: per provider key, per ``key:model``, per local day."""

    by_key: dict[str, _Sum] = field(default_factory=dict)
    by_model: dict[str, _Sum] = field(default_factory=dict)
    by_day: dict[str, _Sum] = field(default_factory=dict)
    total: _Sum = field(default_factory=_Sum)
    pruned: int = 0

    def _tables(self, provider: str, model: str, local_day: str) -> list[_Sum]:
        return [
            table.setdefault(key, _Sum())
            for table, key in (
                (self.by_key, provider),
                (self.by_model, f"{provider}:{model}"),
                (self.by_day, local_day),
            )
        ] + [self.total]

    def add(self, row: Attempt, local_day: str) -> None:
        """One attempt row, granted on ``local_day`` of the export's zone."""
        for one in self._tables(row.provider, row.model, local_day):
            one.add(row)

    def add_pruned(self, row: PrunedSum, local_day: str) -> None:
        """One pruned slot's sums, its slot starting on ``local_day``."""
        for one in self._tables(row.provider, row.model, local_day):
            one.add_pruned(row)
        self.pruned += row.attempts

    def summary(self, period: Period) -> ExportSummary:
        return ExportSummary(
            period,
            rows=self.total.attempts - self.pruned,
            cost_musd=self.total.cost_musd,
            list_price_musd=self.total.list_price_musd,
            estimated=self.total.estimated,
            per_provider={k: s.cost_musd for k, s in self.by_key.items()},
            pruned_attempts=self.pruned,
        )

    def write(self, out: TextIO, period: Period) -> None:
        writer = csv_writer(out)
        writer.writerow(TOTALS_COLUMNS)
        for group, table in (
            ("provider", self.by_key),
            ("model", self.by_model),
            ("day", self.by_day),
        ):
            for key in sorted(table):
                writer.writerow([group, key, *table[key].cells()])
        writer.writerow(["all", period.label, *self.total.cells()])
