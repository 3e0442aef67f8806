"""DOCX text with python-docx: paragraphs and tables in document order, under the caps.

A DOCX is a zip, and python-docx reads every part of it into memory when it opens the
package, so a zip bomb (a ``word/document.xml`` of gigabytes deflated into kilobytes)
is refused *before* python-docx sees it: the sizes the zip's central directory declares
are added up and compared with ``max_unpacked_bytes``. The declared sizes are binding:
:mod:`zipfile` never returns more than a member's declared ``file_size`` (it cuts the
decompressed stream there, ``ZipExtFile._read1``, and a member that inflates to more or
less fails its CRC check), so a zip that lies about its sizes yields no more than it
declared. XML entities are not expanded (python-docx's parser has
``resolve_entities=False``), so a "billion laughs" document stays its own size.
"""

from __future__ import annotations

import io
import zipfile

import docx
from docx.table import Table

from bot.media.plain_text import TextSink, TooLong
from bot.media.types import DocumentKind, Extracted, ExtractionFailed, ExtractionLimits, Refusal

__all__ = ["MAX_ZIP_MEMBERS", "extract_docx"]

#: Most members a DOCX may hold (a real one has a few dozen; each costs memory to list).
MAX_ZIP_MEMBERS = 2_000

_DOCX = DocumentKind.DOCX


def _check_zip(data: bytes, limits: ExtractionLimits) -> ExtractionFailed | set[str]:
    """The zip's declared shape against the caps, before anything is inflated.

    Returns:
        The members' names when within the caps, else the refusal.
    """
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            members = archive.infolist()
    except (zipfile.BadZipFile, ValueError, EOFError) as exc:
        return ExtractionFailed(Refusal.UNREADABLE, _DOCX, detail=f"not a zip: {exc}"[:200])
    if len(members) > MAX_ZIP_MEMBERS:
        return ExtractionFailed(
            Refusal.TOO_LARGE_UNPACKED, _DOCX, detail=f"{len(members)} zip members"
        )
    unpacked = sum(member.file_size for member in members)
    if unpacked > limits.max_unpacked_bytes:
        return ExtractionFailed(
            Refusal.TOO_LARGE_UNPACKED, _DOCX, limit=limits.max_unpacked_bytes, found=unpacked
        )
    return {member.filename for member in members}


def _table_text(table: Table) -> str:
    """A table as lines of ``cell | cell``; a merged cell (python-docx repeats it in
    every grid column it spans) is written once."""
    lines = []
    for row in table.rows:
        cells: list[str] = []
        for cell in row.cells:
            text = " ".join(cell.text.split())
            if not cells or text != cells[-1]:
                cells.append(text)
        if any(cells):
            lines.append(" | ".join(cells))
    return "\n".join(lines)


def extract_docx(data: bytes, limits: ExtractionLimits) -> Extracted | ExtractionFailed:
    """A DOCX's text: each paragraph, each table row, in document order.

    Returns:
        :class:`Extracted` (``title`` from the document's core properties, if it has
        them), or
        :class:`ExtractionFailed`: ``UNREADABLE``, ``TOO_LARGE_UNPACKED``, ``TOO_LONG``
        or ``EMPTY``.

    ``MemoryError`` is not caught here: the worker reports it as ``MEMORY``.
    """
    names = _check_zip(data, limits)
    if isinstance(names, ExtractionFailed):
        return names
    sink = TextSink(limits.max_chars)
    try:
        document = docx.Document(io.BytesIO(data))
        for block in document.iter_inner_content():
            sink.add(_table_text(block) if isinstance(block, Table) else block.text)
        # python-docx makes up a core-properties part titled "Word Document" when the
        # file has none: only a title the file carries is the document's
        has_core = "docProps/core.xml" in names
        title = (document.core_properties.title or "") if has_core else ""
    except TooLong as exc:
        return ExtractionFailed(Refusal.TOO_LONG, _DOCX, limit=limits.max_chars, found=exc.read)
    except MemoryError:
        raise
    except Exception as exc:  # noqa: BLE001 - any failure of a hostile file is "unreadable"
        detail = f"{type(exc).__name__}: {exc}"[:200]
        return ExtractionFailed(Refusal.UNREADABLE, _DOCX, detail=detail)
    if not sink.text:
        return ExtractionFailed(Refusal.EMPTY, _DOCX)
    return Extracted(_DOCX, sink.text, title=title.strip()[:200])
