"""A provider's file as a table: bytes → text → header and rows, and what a file looks
like when no reader takes it (:func:`looks_like`).

Pure functions over bytes (no I/O, no clock, no event loop): the bot calls the readers in
a worker thread. Rows are parsed lazily (:meth:`Table.rows`), so a 20 MB file is held
once, as its text, not again as a list of rows.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator
from dataclasses import dataclass, field

from budget.books.periods import ExportFileError

__all__ = ["Table", "looks_like", "read_table"]

_DELIMITERS = {",": "comma-separated", "\t": "tab-separated", ";": "semicolon-separated"}


@dataclass(frozen=True, slots=True)
class Table:
    """A delimited text file with a header row.

    Attributes:
        file_name: for messages.
        header: the column names, stripped and lower-cased (the file's order).
        delimiter: ``,``, tab or ``;`` (chosen from the header line).
        text: the whole text (rows are parsed from it on demand).
        cols: column name → index.
        written: the column names as the file writes them (stripped, case kept), for
            messages that name a column the way the admin sees it.
    """

    file_name: str
    header: tuple[str, ...]
    delimiter: str
    text: str
    cols: dict[str, int] = field(default_factory=dict)
    written: tuple[str, ...] = ()

    def has(self, *names: str) -> bool:
        """True when every one of ``names`` is a column."""
        return all(n in self.cols for n in names)

    def named(self, name: str) -> str:
        """Column ``name`` as the file's header writes it (``Cost_USD`` for
        ``cost_usd``); ``name`` itself when the file has no such column."""
        i = self.cols.get(name)
        return self.written[i] if i is not None and i < len(self.written) else name

    def cell(self, cells: list[str], name: str) -> str | None:
        """The stripped cell of column ``name`` (``None``: no such column)."""
        i = self.cols.get(name)
        return cells[i].strip() if i is not None and i < len(cells) else None

    def rows(self) -> Iterator[tuple[int, list[str]]]:
        """``(line number, cells)`` of every row after the header; blank rows skipped,
        empty cells past the header's last column dropped.

        Raises:
            ExportFileError: a row with another number of fields than the header, or
                text the CSV reader cannot read (the line named).
        """
        reader = csv.reader(io.StringIO(self.text, newline=""), delimiter=self.delimiter)
        try:
            next(reader, None)
            for cells in reader:
                if not any(c.strip() for c in cells):
                    continue
                if len(cells) > len(self.header) and not any(
                    c.strip() for c in cells[len(self.header) :]
                ):
                    del cells[len(self.header) :]  # empty cells past the header (a paste)
                if len(cells) != len(self.header):
                    raise ExportFileError(
                        f"line {reader.line_num}: {len(cells)} fields where the header "
                        f"has {len(self.header)}"
                    )
                yield reader.line_num, cells
        except csv.Error as exc:
            raise ExportFileError(
                f"{self.file_name} line {reader.line_num} is not readable CSV: {exc}"
            ) from None

    @property
    def kind(self) -> str:
        """``comma-separated`` / ``tab-separated`` / ``semicolon-separated``."""
        return _DELIMITERS[self.delimiter]


def _binary_kind(data: bytes) -> str | None:
    """What a file that is not UTF-8 text looks like, when it is recognisable."""
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        return "UTF-16 text (a spreadsheet's 'Unicode text'): save it as CSV UTF-8"
    if data.startswith(b"%PDF"):
        return "a PDF (an invoice?): send the usage export (CSV) instead"
    if data.startswith(b"\xd0\xcf\x11\xe0"):
        return "an old Excel workbook (.xls): save the sheet as CSV UTF-8"
    return None


def read_table(data: bytes, file_name: str) -> Table:
    """The header and the text of a delimited file.

    Raises:
        ExportFileError: empty, not UTF-8 (saying what it looks like when it can), no
            header.
    """
    if not data.strip():
        raise ExportFileError(f"{file_name} is empty")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        kind = _binary_kind(data)
        detail = f": it looks like {kind}" if kind else " (a CSV export is)"
        raise ExportFileError(f"{file_name} is not UTF-8 text{detail}") from None
    first = text.lstrip("\r\n").split("\n", 1)[0]
    delimiter = max(_DELIMITERS, key=first.count)
    if first.count(delimiter) == 0:
        delimiter = ","
    try:
        header_cells = next(csv.reader(io.StringIO(first, newline=""), delimiter=delimiter))
    except (csv.Error, StopIteration):
        raise ExportFileError(f"{file_name} has no readable header line") from None
    written = tuple(h.strip() for h in header_cells)
    header = tuple(h.lower() for h in written)
    cols = {name: i for i, name in enumerate(header) if name}
    return Table(file_name, header, delimiter, text.lstrip("\r\n"), cols, written)


def looks_like(table: Table, near: str | None) -> str:
    """A sentence saying what ``table`` looks like: its delimiter and first columns, and
    the known layout it nearly is (``near``, e.g. "a DeepSeek amount sheet without
    api_key_name")."""
    shown = ", ".join(h for h in table.header[:12] if h) or "none"
    more = f" (+{len(table.header) - 12} more)" if len(table.header) > 12 else ""
    what = f"a {table.kind} file with columns {shown}{more}"
    if near:
        what += f": {near}"
    return what
