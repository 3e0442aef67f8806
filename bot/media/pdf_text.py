"""PDF text with pypdf, under the page and character caps.

Why pypdf (not pdfminer.six): ``docs/decisions/081-pypdf-python-docx-trafilatura.md``
(measured: a 100-page text PDF in 0.70 s with pypdf, 4.37 s with pdfminer.six, the same
text). pypdf bounds each stream it inflates itself (``pypdf.filters`` limits, 75 MB by
default; a larger one raises ``LimitReachedError``); the worker's address-space limit
and deadline bound the rest.

Order of checks: unreadable (no cross-reference table, broken objects) → encrypted (an
empty user password is tried, as viewers do) → more pages than ``max_pages`` (before
any text is read) → the text, page by page, until it passes ``max_chars``. A PDF with
no text at all is ``NO_TEXT_LAYER`` when its pages draw images (a scan without OCR),
``EMPTY`` when they draw nothing readable either.
"""

from __future__ import annotations

import io
import logging
from typing import Any

from pypdf import PdfReader
from pypdf.errors import DependencyError, FileNotDecryptedError, LimitReachedError

from bot.media.plain_text import TextSink, TooLong
from bot.media.types import DocumentKind, Extracted, ExtractionFailed, ExtractionLimits, Refusal

__all__ = ["extract_pdf"]

_PDF = DocumentKind.PDF


def _detail(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:200]


def _has_images(page: Any) -> bool:
    """Whether a page's resources name an image XObject (read from the dictionary; no
    image is decoded)."""
    try:
        resources = page.get("/Resources")
        xobjects = resources.get_object().get("/XObject") if resources is not None else None
        if xobjects is None:
            return False
        return any(xobjects[name].get_object().get("/Subtype") == "/Image" for name in xobjects)
    except MemoryError:
        raise
    except Exception:  # noqa: BLE001 - a broken resource dictionary just has no image
        return False


def _open(data: bytes) -> PdfReader | ExtractionFailed:
    try:
        reader = PdfReader(io.BytesIO(data), strict=False)
    except MemoryError:
        raise
    except Exception as exc:  # noqa: BLE001 - any failure of a hostile file is "unreadable"
        return ExtractionFailed(Refusal.UNREADABLE, _PDF, detail=_detail(exc))
    if reader.is_encrypted:
        try:
            if not reader.decrypt(""):
                return ExtractionFailed(Refusal.ENCRYPTED, _PDF)
        except (DependencyError, FileNotDecryptedError, NotImplementedError) as exc:
            return ExtractionFailed(Refusal.ENCRYPTED, _PDF, detail=_detail(exc))
        except MemoryError:
            raise
        except Exception as exc:  # noqa: BLE001 - a broken encryption dictionary
            return ExtractionFailed(Refusal.ENCRYPTED, _PDF, detail=_detail(exc))
    return reader


def extract_pdf(data: bytes, limits: ExtractionLimits) -> Extracted | ExtractionFailed:
    """A PDF's text, page by page.

    Returns:
        :class:`Extracted` (``pages`` = pages read), or :class:`ExtractionFailed`:
        ``UNREADABLE``, ``ENCRYPTED``, ``TOO_MANY_PAGES`` (``found`` = pages),
        ``TOO_LONG``, ``NO_TEXT_LAYER`` (scanned) or ``EMPTY``.

    ``MemoryError`` is not caught here: the worker reports it as ``MEMORY``.
    """
    logging.getLogger("pypdf").setLevel(logging.ERROR)  # its warnings are the file's
    opened = _open(data)
    if isinstance(opened, ExtractionFailed):
        return opened
    reader = opened
    try:
        count = len(reader.pages)
    except MemoryError:
        raise
    except Exception as exc:  # noqa: BLE001 - a broken page tree
        return ExtractionFailed(Refusal.UNREADABLE, _PDF, detail=_detail(exc))
    if count > limits.max_pages:
        return ExtractionFailed(Refusal.TOO_MANY_PAGES, _PDF, limit=limits.max_pages, found=count)
    sink = TextSink(limits.max_chars)
    images = False
    try:
        for page in reader.pages:
            text = page.extract_text() or ""
            if text.strip():
                sink.add(text)
            elif not images:
                images = _has_images(page)
    except TooLong as exc:
        return ExtractionFailed(Refusal.TOO_LONG, _PDF, limit=limits.max_chars, found=exc.read)
    except LimitReachedError as exc:
        return ExtractionFailed(Refusal.UNREADABLE, _PDF, detail=_detail(exc))
    except RecursionError as exc:  # form XObjects drawing each other
        return ExtractionFailed(Refusal.UNREADABLE, _PDF, detail=_detail(exc))
    except MemoryError:
        raise
    except Exception as exc:  # noqa: BLE001 - any failure of a hostile file is "unreadable"
        return ExtractionFailed(Refusal.UNREADABLE, _PDF, detail=_detail(exc))
    if not sink.text:
        reason = Refusal.NO_TEXT_LAYER if images else Refusal.EMPTY
        return ExtractionFailed(reason, _PDF, found=count)
    return Extracted(_PDF, sink.text, pages=count)
