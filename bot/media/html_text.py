"""The main text of an HTML page: trafilatura first, selectolax's whole-body text when
trafilatura finds no main content.

Why both (``docs/decisions/081-pypdf-python-docx-trafilatura.md``): trafilatura drops
navigation, footers, counters and link lists, so the model is not paid to read them —
on eight real pages from trafilatura's own test set it kept 0.6–1.6× the characters a
"drop nav/header/footer, take ``<article>``" selectolax pass kept, 8–29 ms a page against
about 1 ms. selectolax (already the digests' HTML reader) answers for pages with no
main content trafilatura can find (short pages, listings), and gives the ``<title>``.
Neither follows links or fetches anything.
"""

from __future__ import annotations

import codecs
import logging
import re

import trafilatura
from selectolax.lexbor import LexborHTMLParser

from bot.media.plain_text import TextSink, TooLong, decode
from bot.media.types import DocumentKind, Extracted, ExtractionFailed, ExtractionLimits, Refusal

__all__ = ["body_text", "extract_html", "html_decode"]

_HTML = DocumentKind.HTML
_NOISE = "script, style, noscript, template, svg, iframe, nav, header, footer, aside, form"
_META_CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?([A-Za-z0-9_.:-]+)""", re.IGNORECASE)


def html_decode(data: bytes) -> str:
    """A page's bytes as text: the ``<meta charset>`` (or ``http-equiv`` content type) of
    its first 4 KB when it names a known codec, else :func:`bot.media.plain_text.decode`.
    A byte-order mark wins over either (HTML's own rule)."""
    if not data.startswith((codecs.BOM_UTF8, codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        match = _META_CHARSET.search(data[:4096])
        if match is not None:
            try:
                return data.decode(codecs.lookup(match.group(1).decode("ascii")).name, "replace")
            except LookupError:
                pass
    return decode(data)


def body_text(html: str) -> tuple[str, str]:
    """``(title, text)`` of a page by selectolax: the ``<body>``'s text, one line per
    block, scripts, styles and page furniture (nav, header, footer, aside, forms)
    removed."""
    tree = LexborHTMLParser(html)
    title_node = tree.css_first("title")
    title = " ".join(title_node.text().split()) if title_node is not None else ""
    for node in tree.css(_NOISE):
        node.decompose()
    body = tree.body
    text = body.text(separator="\n") if body is not None else ""
    lines = (" ".join(line.split()) for line in text.splitlines())
    return title, "\n".join(line for line in lines if line)


def extract_html(data: bytes, limits: ExtractionLimits) -> Extracted | ExtractionFailed:
    """A page's main text (see the module docstring).

    Returns:
        :class:`Extracted` (with the page's ``title``), or :class:`ExtractionFailed`:
        ``TOO_LONG`` or ``EMPTY``.

    ``MemoryError`` is not caught here: the worker reports it as ``MEMORY``.
    """
    logging.getLogger("trafilatura").setLevel(logging.CRITICAL)
    html = html_decode(data)
    title, fallback = body_text(html)
    main = trafilatura.extract(
        html, include_comments=False, include_tables=True, include_links=False, deduplicate=False
    )
    sink = TextSink(limits.max_chars)
    try:
        sink.add(main if main and main.strip() else fallback)
    except TooLong as exc:
        return ExtractionFailed(Refusal.TOO_LONG, _HTML, limit=limits.max_chars, found=exc.read)
    if not sink.text:
        return ExtractionFailed(Refusal.EMPTY, _HTML)
    return Extracted(_HTML, sink.text, title=title[:200])
