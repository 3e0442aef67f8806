"""The one CSV writer: every CSV file Kopek writes goes through :func:`csv_writer` (the
spend export and its totals, the reconcile differences, whatever comes next;
``tests/project/test_csv_writers.py`` fails on a ``csv.writer`` anywhere else).

Spreadsheet formula injection (OWASP "CSV Injection"): Excel, LibreOffice and Google
Sheets run a cell that starts with ``=``, ``+``, ``-`` or ``@`` as a formula, and a
leading tab or carriage return is dropped before that test. A text cell Kopek writes
comes from outside as often as not — a team name an admin typed (``-A1``), a model
name copied from a provider's file (``=HYPERLINK(...)``) — so every text cell starting
with one of those characters is written with a ``'`` in front (the spreadsheets' own
"this is text" mark; a reader of the raw file sees the value right after it).
Numbers (``int``, ``Decimal``) are written as numbers: ``-5`` stays ``-5``.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable
from decimal import Decimal
from typing import TextIO

__all__ = ["FORMULA_STARTS", "Cell", "CsvOut", "csv_bytes", "csv_writer", "safe_cell"]

#: First characters that make a spreadsheet read a text cell as a formula.
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")

#: What a cell may hold: text, a whole number, an exact decimal, or nothing (empty).
Cell = str | int | Decimal | None


def safe_cell(value: Cell) -> str | int | Decimal:
    """``value`` as written: text starting with one of :data:`FORMULA_STARTS` gets a
    leading ``'``; ``None`` is the empty cell; numbers are unchanged."""
    if value is None:
        return ""
    if isinstance(value, str) and value.startswith(FORMULA_STARTS):
        return "'" + value
    return value


class CsvOut:
    """A :func:`csv.writer` whose every cell goes through :func:`safe_cell`."""

    __slots__ = ("_writer",)

    def __init__(self, out: TextIO) -> None:
        self._writer = csv.writer(out)

    def writerow(self, cells: Iterable[Cell]) -> None:
        """Write one row."""
        self._writer.writerow([safe_cell(c) for c in cells])

    def writerows(self, rows: Iterable[Iterable[Cell]]) -> None:
        """Write every row of ``rows``."""
        for row in rows:
            self.writerow(row)


def csv_writer(out: TextIO) -> CsvOut:
    """The writer for ``out`` (a text stream opened with ``newline=""``)."""
    return CsvOut(out)


def csv_bytes(rows: Iterable[Iterable[Cell]]) -> bytes:
    """``rows`` as UTF-8 CSV bytes (a document the bot sends)."""
    buf = io.StringIO(newline="")
    csv_writer(buf).writerows(rows)
    return buf.getvalue().encode()
