"""Documents built in the test run, in the real formats: PDF (text pages, image-only
"scanned" pages, a Flate bomb, a page-count bomb) and DOCX (paragraphs, a zip bomb).

Large and hostile files are generated here rather than committed (as
``tests/fixtures/bombs/make_gzip_gzip.py`` documents its one committed bomb). The PDFs
follow ISO 32000-1 (a catalog, a page tree, one content stream per page, the standard
Helvetica font, a classic cross-reference table with exact byte offsets); the DOCX files
are the OPC zip layout python-docx and Word read ([Content_Types].xml, the package
relationship to ``word/document.xml``). Real samples of both formats are in
``tests/fixtures/media/``; these builders exist for sizes and shapes no sample has.
"""

from __future__ import annotations

import io
import zipfile
import zlib
from collections.abc import Callable, Iterable
from pathlib import Path

__all__ = [
    "FIXTURES",
    "docx",
    "docx_zip_bomb",
    "flate_bomb_pdf",
    "image_pdf",
    "page_count_bomb_pdf",
    "pdf",
    "shared_media",
    "text_pdf",
]

_ROOT = Path(__file__).resolve().parents[2]
#: The committed real samples (``tests/fixtures/README.md`` names each one's source).
FIXTURES = _ROOT / "tests" / "fixtures" / "media"


def shared_media() -> Path | None:
    """``../shared/corpus/media`` if present (the optional tests' samples whose
    licence keeps them out of the repository), else ``None``: ``shared`` beside the
    checkout (``/work/main`` → ``/work/shared``), or beside the worktrees' folder
    (``/work/wt/NAME`` → ``/work/shared``)."""
    for base in (_ROOT.parent, _ROOT.parent.parent):
        folder = base / "shared" / "corpus" / "media"
        if folder.is_dir():
            return folder
    return None


_LOREM = (
    "Kopek holds the worst case of every call before it spends a cent, then settles "
    "what the provider reports. The ledger keeps windows by hour and by day."
)


def _escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")


def pdf(
    page_streams: Iterable[bytes],
    *,
    resources: bytes = b"",
    extra: Iterable[bytes] = (),
    shared: bytes | None = None,
) -> bytes:
    """A PDF with one page per content stream (uncompressed unless already filtered).

    Args:
        page_streams: each page's content stream; a stream starting with ``<<`` is taken
            as ``dictionary + b"stream\\n" + data`` already (a filtered stream).
        resources: the pages' shared resource dictionary body (default: Helvetica as ``/F1``).
        extra: further indirect objects' bodies, numbered after the pages' objects.
        shared: one more content stream (same form as ``page_streams``' items) that every
            page draws after its own: one object, referenced by all the pages.

    Returns:
        The file's bytes, with a correct cross-reference table.
    """
    streams = list(page_streams)
    objects: list[bytes] = []
    n = len(streams)
    font = 3 + 2 * n
    kids = b" ".join(f"{3 + 2 * i} 0 R".encode() for i in range(n))
    res = resources or f"<< /Font << /F1 {font} 0 R >> >>".encode()
    extra = list(extra)
    shared_ref = f" {font + 1 + len(extra)} 0 R" if shared is not None else ""
    objects.append(b"<< /Type /Catalog /Pages 2 0 R >>")
    objects.append(b"<< /Type /Pages /Kids [" + kids + b"] /Count " + str(n).encode() + b" >>")
    for i, stream in enumerate(streams):
        content = 4 + 2 * i
        objects.append(
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources "
            + res
            + f" /Contents [{content} 0 R{shared_ref}] >>".encode()
        )
        if stream.startswith(b"<<"):
            objects.append(stream + b"\nendstream")
        else:
            objects.append(
                f"<< /Length {len(stream)} >>\nstream\n".encode() + stream + b"\nendstream"
            )
    objects.append(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    objects.extend(extra)
    if shared is not None:
        objects.append(shared + b"\nendstream")
    out = io.BytesIO()
    out.write(b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(out.tell())
        out.write(f"{number} 0 obj\n".encode() + body + b"\nendobj\n")
    xref = out.tell()
    out.write(f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode())
    for offset in offsets:
        out.write(f"{offset:010d} 00000 n \n".encode())
    out.write(
        f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n".encode()
    )
    return out.getvalue()


def _text_page(lines: list[str]) -> bytes:
    ops = ["BT", "/F1 10 Tf", "12 TL", "50 760 Td"]
    for line in lines:
        ops.append(f"({_escape(line)}) Tj T*")
    ops.append("ET")
    return "\n".join(ops).encode("latin-1")


def text_pdf(
    pages: int, *, lines_per_page: int = 50, line: Callable[[int, int], str] | None = None
) -> bytes:
    """A born-digital text PDF: ``pages`` pages of ``lines_per_page`` lines each
    (about 100 characters a line by default; ``line(page, n)`` chooses the text)."""
    make = line or (lambda p, n: f"p{p + 1} l{n + 1}: {_LOREM[: 80 + (n % 20)]}")
    return pdf(_text_page([make(p, n) for n in range(lines_per_page)]) for p in range(pages))


def image_pdf(jpeg: bytes, width: int, height: int, *, pages: int = 1) -> bytes:
    """A "scanned" PDF: each page only draws a JPEG image (DCTDecode), no text layer."""
    image_number = 3 + 2 * pages + 1  # after the pages and the font
    resources = f"<< /XObject << /Im1 {image_number} 0 R >> >>".encode()
    draw = b"q 612 0 0 792 0 0 cm /Im1 Do Q"
    image = (
        f"<< /Type /XObject /Subtype /Image /Width {width} /Height {height} "
        f"/ColorSpace /DeviceRGB /BitsPerComponent 8 /Filter /DCTDecode "
        f"/Length {len(jpeg)} >>\nstream\n".encode()
        + jpeg
        + b"\nendstream"
    )
    return pdf([draw] * pages, resources=resources, extra=[image])


def _deflate(chunk: bytes, total: int) -> bytes:
    z = zlib.compressobj(9)
    parts = [z.compress(chunk) for _ in range(total // len(chunk))]
    parts.append(z.flush())
    return b"".join(parts)


def flate_bomb_pdf(inflated_bytes: int, *, pages: int = 1) -> bytes:
    """A small PDF whose pages share one Flate-compressed content stream that inflates to
    ``inflated_bytes`` bytes of text-drawing operators (``(AAAA…) Tj``), so extracting
    it costs memory and time out of all proportion to the file."""
    unit = b"BT /F1 1 Tf (" + b"A" * 4000 + b") Tj ET\n"
    data = _deflate(unit, inflated_bytes)
    stream = f"<< /Length {len(data)} /Filter /FlateDecode >>\nstream\n".encode() + data
    return pdf([b""] * pages, shared=stream)


def page_count_bomb_pdf(pages: int) -> bytes:
    """A PDF of ``pages`` empty pages (a few dozen bytes each): cheap to send, expensive
    to walk page by page."""
    return pdf([b""] * pages)


_CONTENT_TYPES = (
    '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\n'
    '<Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types">'
    '<Default Extension="rels" ContentType="application/'
    'vnd.openxmlformats-package.relationships+xml"/>'
    '<Default Extension="xml" ContentType="application/xml"/>'
    '<Override PartName="/word/document.xml" ContentType="application/'
    'vnd.openxmlformats-officedocument.wordprocessingml.document.main+xml"/>'
    "</Types>"
)
_RELS = (
    '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\n'
    '<Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships">'
    '<Relationship Id="rId1" Type="http://schemas.openxmlformats.org/officeDocument/2006/'
    'relationships/officeDocument" Target="word/document.xml"/>'
    "</Relationships>"
)
_DOC_HEAD = (
    '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\n'
    '<w:document xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"><w:body>'
)
_DOC_TAIL = "</w:body></w:document>"


def _xml_escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def docx(paragraphs: Iterable[str]) -> bytes:
    """A DOCX whose body is these paragraphs, one run each."""
    body = "".join(f"<w:p><w:r><w:t>{_xml_escape(p)}</w:t></w:r></w:p>" for p in paragraphs)
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("[Content_Types].xml", _CONTENT_TYPES)
        zf.writestr("_rels/.rels", _RELS)
        zf.writestr("word/document.xml", _DOC_HEAD + body + _DOC_TAIL)
    return out.getvalue()


def docx_zip_bomb(inflated_bytes: int) -> bytes:
    """A DOCX whose ``word/document.xml`` deflates ``inflated_bytes`` of one repeated
    paragraph into a few hundred kilobytes (the zip declares the true size)."""
    paragraph = b"<w:p><w:r><w:t>" + b"bomb " * 200 + b"</w:t></w:r></w:p>"
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("[Content_Types].xml", _CONTENT_TYPES)
        zf.writestr("_rels/.rels", _RELS)
        with zf.open("word/document.xml", "w", force_zip64=True) as member:
            member.write(_DOC_HEAD.encode())
            for _ in range(inflated_bytes // len(paragraph)):
                member.write(paragraph)
            member.write(_DOC_TAIL.encode())
    return out.getvalue()
