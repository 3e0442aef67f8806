"""Plain text, Markdown, source code and CSV: decoded, cleaned, capped; and the text
helpers the other extractors share (:func:`clean`, :class:`TextSink`).

Decoding: a byte-order mark decides (UTF-8, UTF-16 LE/BE); else strict UTF-8; else
charset-normalizer's best guess from the first :data:`DETECT_BYTES` bytes (it weighs
the candidate code pages by how plausible the decoded text is: cp1251 Russian, cp1252
Western, Shift-JIS…), undecodable bytes replaced. CSV is read as text: models read it
as it is.
"""

from __future__ import annotations

import codecs
import re

from charset_normalizer import from_bytes

from bot.media.types import DocumentKind, Extracted, ExtractionFailed, ExtractionLimits, Refusal

__all__ = ["DETECT_BYTES", "TextSink", "TooLong", "clean", "decode", "extract_text"]

#: Bytes charset detection looks at (enough for a confident guess, bounded in time).
DETECT_BYTES = 65_536

_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\u200b\ufeff]")
_BLANK_RUN = re.compile(r"\n[ \t]*\n(?:[ \t]*\n)+")
_TRAILING = re.compile(r"[ \t]+\n")


def clean(text: str) -> str:
    """Text as a model should see it: ``\\r\\n`` and ``\\r`` as ``\\n``, control
    characters (NUL, form feeds, zero-width spaces, BOMs) dropped, trailing spaces cut,
    runs of blank lines kept as one, ends stripped."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    text = _CONTROL.sub("", text)
    text = _TRAILING.sub("\n", text)
    return _BLANK_RUN.sub("\n\n", text).strip()


class TooLong(Exception):
    """Raised by :class:`TextSink` one character past its cap."""

    def __init__(self, read: int) -> None:
        super().__init__(f"over the cap after {read} characters")
        self.read = read


class TextSink:
    """Collects cleaned pieces of text up to ``max_chars`` characters.

    Raises:
        TooLong: from :meth:`add`, as soon as the text would pass ``max_chars``.
    """

    __slots__ = ("_chars", "_max", "_parts")

    def __init__(self, max_chars: int) -> None:
        self._max = max_chars
        self._parts: list[str] = []
        self._chars = 0

    def add(self, piece: str) -> None:
        """Add one piece (a page, a paragraph); blank pieces are skipped."""
        piece = clean(piece)
        if not piece:
            return
        self._chars += len(piece) + (2 if self._parts else 0)
        if self._chars > self._max:
            raise TooLong(self._chars)
        self._parts.append(piece)

    @property
    def text(self) -> str:
        """The pieces, a blank line between two."""
        return "\n\n".join(self._parts)


def decode(data: bytes) -> str:
    """``data`` as text (see the module docstring for the order of guesses)."""
    for bom, codec in (
        (codecs.BOM_UTF8, "utf-8-sig"),
        (codecs.BOM_UTF16_LE, "utf-16"),
        (codecs.BOM_UTF16_BE, "utf-16"),
    ):
        if data.startswith(bom):
            return data.decode(codec, errors="replace")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        pass
    best = from_bytes(data[:DETECT_BYTES]).best()
    encoding = best.encoding if best is not None else "cp1252"
    return data.decode(encoding, errors="replace")


def extract_text(data: bytes, limits: ExtractionLimits) -> Extracted | ExtractionFailed:
    """A plain-text document's text, cleaned.

    Returns:
        :class:`Extracted`, or :class:`ExtractionFailed` with ``TOO_LONG`` (over
        ``max_chars`` after cleaning) or ``EMPTY``.
    """
    text = clean(decode(data))
    if len(text) > limits.max_chars:
        return ExtractionFailed(
            Refusal.TOO_LONG, DocumentKind.TEXT, limit=limits.max_chars, found=len(text)
        )
    if not text:
        return ExtractionFailed(Refusal.EMPTY, DocumentKind.TEXT)
    return Extracted(DocumentKind.TEXT, text)
