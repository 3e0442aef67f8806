"""Which kind a document is: from its first bytes first, then its name and MIME type.

The bytes decide where they can (a file named ``report.pdf`` that is a zip is not read
as a PDF; a PDF sent as ``application/octet-stream`` is): ``%PDF-`` within the first
1,024 bytes (ISO 32000-1 §7.5.2 allows a prefix; readers look there), a zip's local
header ``PK\\x03\\x04`` (a DOCX is a zip; other zips — XLSX, ODT, JAR — are not read),
an HTML doctype or ``<html`` tag. Text is recognised by name or MIME type and by
having no NUL byte in its head (UTF-16 text, which has NULs, is recognised by its
byte-order mark).
"""

from __future__ import annotations

from pathlib import PurePosixPath

from bot.media.types import DocumentKind

__all__ = ["DOCX_MIME", "HEAD_BYTES", "TEXT_EXTENSIONS", "claimed_kind", "document_kind"]

#: How many leading bytes :func:`document_kind` looks at.
HEAD_BYTES = 4096

#: The MIME type Office and Telegram clients give a DOCX.
DOCX_MIME = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"

#: File name endings read as plain text: prose, Markdown, CSV and source code.
TEXT_EXTENSIONS = frozenset(
    {
        "txt",
        "text",
        "md",
        "markdown",
        "rst",
        "org",
        "tex",
        "csv",
        "tsv",
        "log",
        "json",
        "jsonl",
        "yaml",
        "yml",
        "toml",
        "ini",
        "cfg",
        "conf",
        "env",
        "xml",
        "srt",
        "vtt",
        "py",
        "pyi",
        "js",
        "mjs",
        "ts",
        "tsx",
        "jsx",
        "go",
        "rs",
        "java",
        "kt",
        "kts",
        "scala",
        "c",
        "h",
        "cc",
        "cpp",
        "cxx",
        "hpp",
        "cs",
        "rb",
        "php",
        "pl",
        "pm",
        "lua",
        "r",
        "jl",
        "swift",
        "m",
        "mm",
        "sh",
        "bash",
        "zsh",
        "fish",
        "ps1",
        "bat",
        "sql",
        "graphql",
        "proto",
        "css",
        "scss",
        "less",
        "vue",
        "svelte",
        "dart",
        "ex",
        "exs",
        "erl",
        "hs",
        "ml",
        "fs",
        "clj",
        "el",
        "vim",
        "makefile",
        "dockerfile",
        "gradle",
        "cmake",
    }
)

_HTML_EXTENSIONS = frozenset({"html", "htm", "xhtml"})
_HTML_MIME = frozenset({"text/html", "application/xhtml+xml"})
_TEXT_MIME_EXTRA = frozenset(
    {"application/json", "application/xml", "application/x-yaml", "application/csv"}
)
_BOMS = (b"\xef\xbb\xbf", b"\xff\xfe", b"\xfe\xff")


def _extension(file_name: str) -> str:
    name = PurePosixPath(file_name.replace("\\", "/")).name.lower()
    if "." not in name:
        return name  # Makefile, Dockerfile
    return name.rsplit(".", 1)[1]


def _looks_html(head: bytes) -> bool:
    start = head.lstrip(b"\xef\xbb\xbf \t\r\n").lower()
    return start.startswith((b"<!doctype html", b"<html"))


def claimed_kind(file_name: str, mime_type: str) -> DocumentKind | None:
    """The binary kind a document's name or declared MIME type claims (``PDF`` for
    ``*.pdf`` or ``application/pdf``, ``DOCX`` for ``*.docx`` or :data:`DOCX_MIME`);
    ``None``: it claims neither. Used only to say truthfully why a file whose bytes
    are not that kind is refused (the bytes decide what is read)."""
    mime = mime_type.split(";", 1)[0].strip().lower()
    ext = _extension(file_name)
    if ext == "pdf" or mime == "application/pdf":
        return DocumentKind.PDF
    if ext == "docx" or mime == DOCX_MIME:
        return DocumentKind.DOCX
    return None


def document_kind(file_name: str, mime_type: str, head: bytes) -> DocumentKind | None:
    """The kind to read a document as, or ``None`` when Kopek does not read it.

    Args:
        file_name: the name the sender gave (``""`` if none).
        mime_type: the MIME type the sender's client declared (``""`` if none).
        head: the file's first bytes (:data:`HEAD_BYTES` are enough).
    """
    mime = mime_type.split(";", 1)[0].strip().lower()
    ext = _extension(file_name)
    if b"%PDF-" in head[:1024]:
        return DocumentKind.PDF
    if head.startswith(b"PK\x03\x04"):
        return DocumentKind.DOCX if (ext == "docx" or mime == DOCX_MIME) else None
    if mime in _HTML_MIME or ext in _HTML_EXTENSIONS or _looks_html(head):
        return DocumentKind.HTML
    texty = mime.startswith("text/") or mime in _TEXT_MIME_EXTRA or ext in TEXT_EXTENSIONS
    if texty and (head.startswith(_BOMS) or b"\0" not in head):
        return DocumentKind.TEXT
    return None
