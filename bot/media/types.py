"""Values of document extraction: kinds, limits, results.

Units: characters are Python ``str`` characters (code points), sizes bytes, times
seconds, memory kibibytes (``ru_maxrss`` on Linux) or mebibytes (limits).

An extraction ends in exactly one of two values, never an exception:
:class:`Extracted` (the text, complete) or :class:`ExtractionFailed` (why not, which
limit and what was found). Both travel from the worker process as one JSON line
(:meth:`Extracted.to_json`, :func:`result_from_json`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import Any

__all__ = [
    "DocumentKind",
    "Extracted",
    "ExtractionFailed",
    "ExtractionLimits",
    "ExtractionResult",
    "Refusal",
    "result_from_json",
]


class DocumentKind(StrEnum):
    """What a document is read as."""

    PDF = "pdf"
    DOCX = "docx"
    HTML = "html"
    TEXT = "text"  # plain text, Markdown, source code, CSV


class Refusal(StrEnum):
    """Why a document gave no text; each names a limit or a property of the file.

    ``TOO_MANY_PAGES``, ``TOO_LONG``, ``TOO_LARGE_UNPACKED``, ``TIMEOUT`` and ``MEMORY``
    are the caps (:class:`ExtractionLimits`); the others describe the file.
    """

    TOO_MANY_PAGES = "too_many_pages"  # found = pages, limit = max_pages
    TOO_LONG = "too_long"  # limit = max_chars (found: chars read when it stopped)
    TOO_LARGE_UNPACKED = "too_large_unpacked"  # a zip (DOCX) declaring more than the cap
    TIMEOUT = "timeout"  # limit = timeout_s (whole seconds, rounded up)
    MEMORY = "memory"  # limit = memory_mb
    NO_TEXT_LAYER = "no_text_layer"  # a scanned PDF: pages of images, no text
    EMPTY = "empty"  # no text and no images
    ENCRYPTED = "encrypted"  # a password is needed
    UNREADABLE = "unreadable"  # not a valid file of its kind, or the reader crashed
    UNSUPPORTED = "unsupported"  # not a kind Kopek reads


@dataclass(frozen=True, slots=True)
class ExtractionLimits:
    """The caps of one extraction.

    Attributes:
        max_pages: most PDF pages read; a PDF with more is refused before any text.
        max_chars: most characters of text; reading stops and refuses one past it.
        max_unpacked_bytes: most bytes a DOCX (a zip) may declare unpacked, all parts.
        timeout_s: wall-clock deadline of the extraction, seconds (the worker is killed).
        memory_mb: the worker's address-space limit (``RLIMIT_AS``), MiB.
    """

    max_pages: int = 200
    max_chars: int = 200_000
    max_unpacked_bytes: int = 50_000_000
    timeout_s: float = 20.0
    memory_mb: int = 512

    def __post_init__(self) -> None:
        if min(self.max_pages, self.max_chars, self.max_unpacked_bytes, self.memory_mb) < 1:
            raise ValueError("extraction limits must be positive")
        if not self.timeout_s > 0:
            raise ValueError("timeout_s must be > 0")


@dataclass(frozen=True, slots=True)
class Extracted:
    """A document's whole text.

    Attributes:
        kind: what it was read as.
        text: the text (at most ``max_chars``), blank runs collapsed.
        pages: PDF pages read (``None`` for other kinds).
        title: the HTML ``<title>`` or the DOCX core title, ``""`` if none.
        peak_memory_kb: the worker's peak resident set, KiB (0 = not measured).
        seconds: the worker's time reading it, seconds.
    """

    kind: DocumentKind
    text: str
    pages: int | None = None
    title: str = ""
    peak_memory_kb: int = 0
    seconds: float = 0.0

    @property
    def chars(self) -> int:
        """Characters of :attr:`text`."""
        return len(self.text)

    def to_json(self) -> dict[str, Any]:
        """The JSON line's object (``"ok": true``)."""
        return {"ok": True, **asdict(self)}


@dataclass(frozen=True, slots=True)
class ExtractionFailed:
    """Why a document gave no text.

    Attributes:
        reason: the refusal (a template per reason in the chat path).
        kind: what it was read as (``None``: its kind was not recognised).
        limit: the cap that stopped it, in the reason's unit (pages, characters, bytes,
            seconds, MiB); ``None`` for properties of the file.
        found: what was found, same unit (``None``: not known, e.g. a timeout).
        detail: operator-facing detail for the log (short; never shown to users).
        peak_memory_kb: the worker's peak resident set, KiB (0 = not measured).
    """

    reason: Refusal
    kind: DocumentKind | None = None
    limit: int | None = None
    found: int | None = None
    detail: str = ""
    peak_memory_kb: int = 0

    def to_json(self) -> dict[str, Any]:
        """The JSON line's object (``"ok": false``)."""
        return {"ok": False, **asdict(self)}


ExtractionResult = Extracted | ExtractionFailed


def result_from_json(data: dict[str, Any]) -> ExtractionResult:
    """The value a worker's JSON line stands for.

    Raises:
        ValueError: not a result object (a field missing or of the wrong type).
    """
    try:
        if data.get("ok") is True:
            pages = data.get("pages")
            return Extracted(
                kind=DocumentKind(data["kind"]),
                text=str(data["text"]),
                pages=int(pages) if pages is not None else None,
                title=str(data.get("title", "")),
                peak_memory_kb=int(data.get("peak_memory_kb", 0)),
                seconds=float(data.get("seconds", 0.0)),
            )
        kind = data.get("kind")
        return ExtractionFailed(
            reason=Refusal(data["reason"]),
            kind=DocumentKind(kind) if kind is not None else None,
            limit=_opt_int(data.get("limit")),
            found=_opt_int(data.get("found")),
            detail=str(data.get("detail", ""))[:300],
            peak_memory_kb=int(data.get("peak_memory_kb", 0)),
        )
    except (KeyError, TypeError) as exc:
        raise ValueError(f"not an extraction result: {exc}") from None


def _opt_int(value: object) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"not an integer: {value!r}")
    return value
