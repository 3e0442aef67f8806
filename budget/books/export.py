"""Spend export: one CSV row per attempt booked in a period, and a totals CSV.

``/budget export`` and ``python -m budget export`` both call :func:`write_export`.
An attempt is *booked* when its hold ended with money on the books: settled (its
actual cost) or expired (booked at its bound — ceiling plus admission margin —, flagged
estimated). Released holds
(0 µUSD, the provider never reached) and holds still in flight are not rows. An
attempt belongs to the period its hold was granted in (the windows it counts
against are fixed at grant, see :mod:`budget.ledger`).

Rows are read with SQLAlchemy's server-side streaming (``yield_per``), written as
they arrive: memory stays flat whatever the period. Only the totals (one entry per
provider, model and day) are kept.

Columns of the attempts file (:data:`EXPORT_COLUMNS`): ``utc_time`` and
``local_time`` (ISO 8601, seconds), ``day_key`` (the ledger's day window, cut in
BUDGET_TZ), ``user_id``, ``team``, ``origin`` (chat/digest), ``operation_id``,
``provider`` (the company, e.g. ``groq``), ``key_name`` (the configured key, e.g.
``groq2``), ``model``, token counts (``input_tokens`` counts every prompt token,
cached ones included; ``output_tokens`` counts reasoning), ``current_*_usd_per_mtok``
(unit prices in USD per 1M tokens at the attempt's start, from the price card of the
process that exports — its ``PRICE_OVERRIDES`` —, not necessarily the card the attempt
was booked with: the ledger keeps only that card's version) and
``current_price_source`` (``genai-prices <version>`` or ``override: …``),
``price_version`` (the version of the card the ledger priced it with),
``prices_as_booked`` (1 when that version is the exporting card's, so the unit prices
are the booking's; 0 when they may differ), ``cost_musd`` (what the ledger booked, corrections
included), ``list_price_musd`` (the list-price equivalent; for free tiers what the
call would have cost), and the flags ``estimated``, ``late``, ``stopped``,
``corrected`` (0/1), ``state``, ``hold_id`` and ``input_unit`` (:data:`INPUT_UNITS`: what
``input_tokens`` counts — ``tokens``; ``seconds`` of audio for a transcription, origin
``transcription``, whose ``output_tokens`` are 0; ``text_and_image_tokens`` for a vision
call, origin ``vision``, whose input tokens include its images').

The totals file (:data:`TOTALS_COLUMNS`, :mod:`budget.books.totals`) has one row per
provider key, per ``key:model`` and per local day of the chosen zone, then one ``all``
row; days retention pruned count from the sums it kept (:mod:`budget.books.pruned`).

Both are written by :func:`budget.books.csv_out.csv_writer`: a text cell a spreadsheet
would run as a formula (a team named ``-A1``) is written with a leading ``'``.

Files on disk (``python -m budget``'s ``--out`` and ``--diff-out``, ``python -m bot
export-config``) are written through :class:`ReplacedOnSuccess`: a temporary file beside
each target, renamed over it only when everything was written, so a failed read never
leaves a truncated file in place of the previous export.
"""

from __future__ import annotations

import errno
import os
import secrets
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import IO, Any, BinaryIO, NamedTuple, Self, TextIO

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from budget.books.csv_out import Cell, csv_writer
from budget.books.periods import Period, price_source, rates_at, zone
from budget.books.pruned import pruned_sums
from budget.books.totals import TOTALS_COLUMNS, ExportSummary, ExportTotals
from budget.pricing.names import family
from budget.pricing.prices import ModelRates, PriceCard
from budget.pricing.rates import SPEECH_MODELS_PER_SECOND
from budget.storage.tables import corrections, holds
from budget.types import Origin

__all__ = [
    "EXPORT_COLUMNS",
    "INPUT_UNITS",
    "STREAM_BATCH",
    "TOTALS_COLUMNS",
    "Attempt",
    "ExportSummary",
    "ReplacedOnSuccess",
    "booked_attempts",
    "input_unit",
    "write_export",
]

#: Rows fetched per round trip while streaming (the event loop runs between batches).
STREAM_BATCH = 200

EXPORT_COLUMNS: tuple[str, ...] = (
    "utc_time",
    "local_time",
    "day_key",
    "user_id",
    "team",
    "origin",
    "operation_id",
    "provider",
    "key_name",
    "model",
    "input_tokens",
    "cached_input_tokens",
    "output_tokens",
    "reasoning_tokens",
    "current_input_usd_per_mtok",
    "current_cached_input_usd_per_mtok",
    "current_output_usd_per_mtok",
    "current_price_source",
    "price_version",
    "prices_as_booked",
    "cost_musd",
    "list_price_musd",
    "estimated",
    "late",
    "stopped",
    "corrected",
    "state",
    "hold_id",
    "input_unit",
)
#: The values of ``input_unit`` (see :func:`input_unit`).
INPUT_UNITS = ("tokens", "seconds", "text_and_image_tokens")


class Attempt(NamedTuple):
    """One booked attempt as :func:`booked_attempts` yields it (the hold's columns;
    ``granted_at`` epoch seconds, money µUSD, ``corr`` true when corrected)."""

    hold_id: str
    operation_id: str
    user_id: int
    team: str | None
    origin: str
    provider: str
    model: str
    state: str
    granted_at: float
    day_key: str
    usage_input: int | None
    usage_cached_input: int | None
    usage_output: int | None
    usage_reasoning: int | None
    actual_musd: int | None
    list_actual_musd: int | None
    estimated: int
    late: int
    price_version: str | None
    input_tokens: int
    max_tokens: int
    ceiling_musd: int
    stopped: int
    corr: bool


def _select(period: Period, key_name: str | None) -> sa.Select[Any]:
    corrected = (
        sa.exists().where(corrections.c.hold_id == holds.c.hold_id).correlate(holds).label("corr")
    )
    stopped_col = holds.c.get("stopped")
    stopped = (
        stopped_col.label("stopped") if stopped_col is not None else sa.literal(0).label("stopped")
    )
    stmt = (
        sa.select(
            holds.c.hold_id,
            holds.c.operation_id,
            holds.c.user_id,
            holds.c.team,
            holds.c.origin,
            holds.c.provider,
            holds.c.model,
            holds.c.state,
            holds.c.granted_at,
            holds.c.day_key,
            holds.c.usage_input,
            holds.c.usage_cached_input,
            holds.c.usage_output,
            holds.c.usage_reasoning,
            holds.c.actual_musd,
            holds.c.list_actual_musd,
            holds.c.estimated,
            holds.c.late,
            holds.c.price_version,
            holds.c.input_tokens,
            holds.c.max_tokens,
            holds.c.ceiling_musd,
            stopped,
            corrected,
        )
        .where(holds.c.state.in_(("settled", "expired")))
        .where(holds.c.granted_at >= period.start.timestamp())
        .where(holds.c.granted_at < period.end.timestamp())
        .order_by(holds.c.granted_at, holds.c.hold_id)
    )
    if key_name is not None:
        stmt = stmt.where(holds.c.provider == key_name)
    return stmt


async def booked_attempts(
    engine: AsyncEngine, period: Period, *, key_name: str | None = None
) -> AsyncIterator[Attempt]:
    """Stream the booked attempts granted in ``period`` (oldest first), ``STREAM_BATCH``
    rows per round trip; each row has the attributes of :data:`EXPORT_COLUMNS`' sources
    (``granted_at`` epoch seconds, ``actual_musd`` …). ``key_name`` limits to one key."""
    async with engine.connect() as conn:
        result = await conn.stream(
            _select(period, key_name).execution_options(yield_per=STREAM_BATCH)
        )
        async for partition in result.partitions():
            for row in partition:
                yield Attempt._make(row)


def _dec(value: Any) -> str:
    return "" if value is None else format(value.normalize(), "f")


class _Prices:
    """The exporting card's rates and their source per key, model and 15 minutes
    (time-of-day prices change on quarter hours at the finest)."""

    __slots__ = ("_card", "_seen")

    def __init__(self, card: PriceCard) -> None:
        self._card = card
        self._seen: dict[tuple[str, str, int], tuple[ModelRates | None, str]] = {}

    def at(self, row: Attempt, at: datetime) -> tuple[ModelRates | None, str]:
        key = (row.provider, row.model, int(row.granted_at // 900))
        if key not in self._seen:
            rates = rates_at(self._card, row.provider, row.model, at)
            self._seen[key] = (rates, price_source(rates))
        return self._seen[key]


def _attempt_cells(
    row: Attempt, at: datetime, local_at: datetime, prices: _Prices, card_version: str
) -> list[Cell]:
    """One row of the attempts file, in :data:`EXPORT_COLUMNS` order."""
    rates, source = prices.at(row, at)
    return [
        at.isoformat(timespec="seconds"),
        local_at.isoformat(timespec="seconds"),
        row.day_key,
        row.user_id,
        row.team or "",
        row.origin,
        row.operation_id,
        family(row.provider),
        row.provider,
        row.model,
        int(row.usage_input or 0),
        int(row.usage_cached_input or 0),
        int(row.usage_output or 0),
        int(row.usage_reasoning or 0),
        _dec(rates.input) if rates else "",
        _dec(rates.cached) if rates else "",
        _dec(rates.output) if rates else "",
        source,
        row.price_version or "",
        int(row.price_version == card_version),
        int(row.actual_musd or 0),
        None if row.list_actual_musd is None else int(row.list_actual_musd),
        int(row.estimated or 0),
        int(row.late or 0),
        int(row.stopped or 0),
        int(bool(row.corr)),
        row.state,
        row.hold_id,
        input_unit(row.origin, row.provider, row.model),
    ]


def input_unit(origin: str, key_name: str, model: str) -> str:
    """What a row's ``input_tokens`` count (:data:`INPUT_UNITS`): ``seconds`` of audio for
    a transcription (priced per second:
    docs/decisions/083-a-transcription-is-held-in-audio-seconds.md; a hold booked before
    transcriptions had their own origin is known by its speech model),
    ``text_and_image_tokens`` for a vision call (the prompt's tokens, its images' among
    them: the provider bills them as input tokens), else ``tokens``."""
    if origin == Origin.TRANSCRIPTION or f"{family(key_name)}:{model}" in SPEECH_MODELS_PER_SECOND:
        return "seconds"
    if origin == Origin.VISION:
        return "text_and_image_tokens"
    return "tokens"


async def write_export(
    engine: AsyncEngine,
    card: PriceCard,
    period: Period,
    out: TextIO,
    totals_out: TextIO | None = None,
    *,
    tz: str | None = None,
    key_name: str | None = None,
) -> ExportSummary:
    """Write the attempts of ``period`` as CSV to ``out`` and the totals to ``totals_out``
    (both through :func:`budget.books.csv_out.csv_writer`: a text cell that a spreadsheet
    would run as a formula is written with a leading ``'``).

    Args:
        engine: the bot's database (the ledger's tables).
        card: the exporting process's price card (the ``current_*`` unit prices and
            their source per row; ``prices_as_booked`` compares its version with the
            hold's ``price_version``).
        period: which attempts (by grant time).
        out: text stream for the attempts file (opened with ``newline=""``).
        totals_out: text stream for the totals file (``None``: not written).
        tz: zone of ``local_time`` and of the per-day totals (default ``period.tz``).
        key_name: only this provider key.

    Returns:
        The summary (rows, µUSD sums).

    Raises:
        PeriodError: ``tz`` is not an IANA zone.
        sqlalchemy.exc.SQLAlchemyError: the database could not be read.
    """
    local = zone(tz or period.tz)
    writer = csv_writer(out)
    writer.writerow(EXPORT_COLUMNS)
    prices = _Prices(card)
    totals = ExportTotals()
    async for row in booked_attempts(engine, period, key_name=key_name):
        at = datetime.fromtimestamp(row.granted_at, UTC)
        local_at = at.astimezone(local)
        writer.writerow(_attempt_cells(row, at, local_at, prices, card.version))
        totals.add(row, local_at.date().isoformat())
    async for pruned in pruned_sums(engine, period, key_name=key_name):
        slot_day = datetime.fromtimestamp(pruned.at, UTC).astimezone(local).date()
        totals.add_pruned(pruned, slot_day.isoformat())
    if totals_out is not None:
        totals.write(totals_out, period)
    return totals.summary(period)


class ReplacedOnSuccess:
    """Files written beside their targets, renamed over them only by :meth:`commit`.

    ``open(target)`` (text) or ``open_binary(target)`` creates a new file
    ``.<name>.<random>.tmp`` in the target's folder
    (mode 0666 less the umask, as a plain ``open`` would create the target) and returns
    it; :meth:`commit` closes every file and renames each over its target (``os.replace``,
    atomic within a folder); leaving the ``with`` block without a commit (an error)
    closes and deletes them: the targets are then as they were. A dozen lines rather
    than a dependency (``atomicwrites``, the usual one, is archived).

    Raises (from the ``open`` methods and :meth:`commit`):
        OSError: the folder cannot be written, or the target is a directory
            (``IsADirectoryError``, before anything is created).
    """

    def __init__(self) -> None:
        self._files: list[tuple[Path, Path, IO[Any]]] = []

    def open(self, target: Path) -> TextIO:
        """A new temporary text file for ``target`` (UTF-8, ``newline=""``)."""
        fd, temp = self._create(target)
        file = os.fdopen(fd, "w", newline="", encoding="utf-8")
        self._files.append((target, temp, file))
        return file

    def open_binary(self, target: Path) -> BinaryIO:
        """A new temporary binary file for ``target``."""
        fd, temp = self._create(target)
        file = os.fdopen(fd, "wb")
        self._files.append((target, temp, file))
        return file

    @staticmethod
    def _create(target: Path) -> tuple[int, Path]:
        if target.is_dir():
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(target))
        temp = target.with_name(f".{target.name}.{secrets.token_hex(4)}.tmp")
        return os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666), temp

    def commit(self) -> None:
        """Close every file and rename each over its target, in the order opened."""
        for _, _, file in self._files:
            file.close()
        while self._files:
            target, temp, _ = self._files[0]
            os.replace(temp, target)
            self._files.pop(0)

    def discard(self) -> None:
        """Close and delete every file not yet renamed (the targets are untouched)."""
        for _, temp, file in self._files:
            file.close()
            temp.unlink(missing_ok=True)
        self._files.clear()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.discard()
