"""What a provider's file is read into: usage per bucket and model (:class:`UsageLine`),
money per bucket (:class:`CostLine`), and one file's reading (:class:`ReadFile`).

Buckets are aware UTC instants ``[start, end)``: a bucket is keyed by its UTC start, never
by a local label (on a day whose clocks go back, one local hour is two buckets). Money is
exact decimal µUSD (fractions of a µUSD kept until the sums are rounded); tokens are
whole numbers.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from typing import Literal

__all__ = [
    "EARLIEST",
    "LATEST",
    "MAX_EXPORT_BYTES",
    "CostLine",
    "Granularity",
    "ReadFile",
    "UsageLine",
]

#: Largest export read, the file or everything a ZIP unpacks to (Telegram's bots can
#: download up to 20 MB).
MAX_EXPORT_BYTES = 20 * 1024 * 1024
#: Buckets outside these years are refused (the comparison shifts windows by hours).
EARLIEST = datetime(1971, 1, 1, tzinfo=UTC)
LATEST = datetime(9998, 12, 31, tzinfo=UTC)

Granularity = Literal["hour", "day"]


@dataclass(frozen=True, slots=True)
class UsageLine:
    """The usage of one model in one bucket, as the provider billed it.

    Attributes:
        start, end: the bucket, aware UTC ``[start, end)``.
        label: the bucket as the report shows it (``2026-01-14``, ``2026-01-14T13``,
            ``2026-10-25T02+01:00`` for an hour that happens twice).
        model: the model as the provider names it.
        input_tokens: every prompt token, cached included.
        cached_input_tokens: the cached part of ``input_tokens``.
        output_tokens: generated tokens, reasoning included.
        reasoning_tokens: the reasoning part (``None`` when the file has no such count).
        cost_musd: the cost the file states (or its price × amount), exact µUSD
            (``None``: the file states no cost).
        line_no: the line of the file (the header is line 1; for JSON, the result's
            ordinal); several lines summed into one: the first.
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
class CostLine:
    """Money billed in one bucket, without a model or tokens (OpenAI's costs file).

    Attributes:
        start, end: the bucket, aware UTC ``[start, end)``.
        label: the bucket as the report shows it.
        cost_musd: exact µUSD (the file's currency was USD: anything else is refused).
        line_item: the file's ``line_item`` (empty when it has none).
        line_no: the line of the file (JSON: the result's ordinal).
    """

    start: datetime
    end: datetime
    label: str
    cost_musd: Decimal
    line_item: str
    line_no: int


FileKind = Literal["usage", "costs", "cost sheet"]


@dataclass(frozen=True, slots=True)
class ReadFile:
    """What one file of an upload holds.

    Attributes:
        file_name: the file (a ZIP's member: its name inside the ZIP).
        layout: its layout as the report names it (``DeepSeek amount sheet``).
        family: whose layout: ``deepseek``, ``openai`` or ``kopek``.
        kind: ``usage`` (tokens per model), ``costs`` (money per bucket, no model) or
            ``cost sheet`` (DeepSeek's money per day and wallet: checked, not compared).
        granularity: ``hour`` or ``day``.
        tz: the zone its buckets are cut in (``UTC`` when the file says so).
        lines, costs: what it holds.
        providers: values of a ``provider`` column (empty without one).
        notes: sentences for the report (what was summed, assumed or left out).
        repeats: rows repeated word for word that were kept (``line 5 repeats line 4``);
            a report with any applies nothing.
        apply_off: why no correction may be booked from this file (``""``: they may):
            rows repeated, several API keys' rows summed.
    """

    file_name: str
    layout: str
    family: str
    kind: FileKind
    granularity: Granularity
    tz: str
    lines: tuple[UsageLine, ...] = ()
    costs: tuple[CostLine, ...] = ()
    providers: frozenset[str] = frozenset()
    notes: tuple[str, ...] = ()
    repeats: tuple[str, ...] = ()
    apply_off: str = ""
