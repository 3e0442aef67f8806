"""The document readers on real samples and on generated hostile files, in this process
(the worker that runs them under limits is tested in ``test_media_worker.py``)."""

from __future__ import annotations

import io
import struct
import zipfile

import docx as python_docx
import pytest
from pypdf import PdfWriter

from bot.media.child import extract
from bot.media.html_text import extract_html, html_decode
from bot.media.kinds import DOCX_MIME, document_kind
from bot.media.pdf_text import extract_pdf
from bot.media.plain_text import clean, decode, extract_text
from bot.media.types import (
    DocumentKind,
    Extracted,
    ExtractionFailed,
    ExtractionLimits,
    Refusal,
    result_from_json,
)
from bot.media.word_text import extract_docx
from tests.support.documents import (
    FIXTURES,
    docx,
    docx_zip_bomb,
    image_pdf,
    page_count_bomb_pdf,
    pdf,
    shared_media,
    text_pdf,
)

DOCS = FIXTURES / "documents"
LIMITS = ExtractionLimits(max_pages=50, max_chars=50_000, max_unpacked_bytes=5_000_000)


def _ok(result: Extracted | ExtractionFailed) -> Extracted:
    assert isinstance(result, Extracted), result
    return result


def _failed(result: Extracted | ExtractionFailed, reason: Refusal) -> ExtractionFailed:
    assert isinstance(result, ExtractionFailed), result
    assert result.reason == reason, result
    return result


def test_a_one_page_pdf_reads_as_pypdfs_own_expected_text() -> None:
    """pypdf's sample and the text its test suite expects from it, whitespace aside."""
    got = _ok(extract_pdf((DOCS / "crazyones_1page.pypdf.pdf").read_bytes(), LIMITS))
    expected = (DOCS / "crazyones.pypdf.expected.txt").read_text(encoding="utf-8")
    assert got.kind == DocumentKind.PDF and got.pages == 1
    assert got.text.split() == expected.split()


def test_a_born_digital_pdf_keeps_its_pages_in_order() -> None:
    got = _ok(extract_pdf((DOCS / "pdflatex-outline_4pages.pypdf.pdf").read_bytes(), LIMITS))
    assert got.pages == 4
    assert got.text.startswith("Contents")
    assert got.text.index("Foo") < got.text.index("Bar")


def test_a_scan_with_an_ocr_layer_gives_that_layer() -> None:
    got = _ok(
        extract_pdf(
            (DOCS / "Seige_of_Vicksburg_Sample_OCR_6pages_scanned.pypdf.pdf").read_bytes(), LIMITS
        )
    )
    assert got.pages == 6
    assert "SIEGE" in got.text and "VICKSBURG" in got.text


def test_a_pdf_with_a_wrong_startxref_is_repaired_and_its_javascript_ignored() -> None:
    """pypdf's issue-297 sample: the cross-reference offset is wrong (non-strict pypdf
    rebuilds it) and an OpenAction runs JavaScript (never run: only text is read)."""
    data = (DOCS / "malformed_bad_startxref_js_openaction.pypdf-issue-297.pdf").read_bytes()
    assert _ok(extract_pdf(data, LIMITS)).text == "test example"


def test_a_scan_without_a_text_layer_is_reported_as_such() -> None:
    """Pages that only draw a (real) photograph: no text layer, said so."""
    jpeg = (FIXTURES / "images" / "photo_coast_exif.borodin.jpg").read_bytes()
    failed = _failed(extract_pdf(image_pdf(jpeg, 640, 480, pages=3), LIMITS), Refusal.NO_TEXT_LAYER)
    assert failed.found == 3


def test_pages_that_draw_nothing_are_empty_not_scanned() -> None:
    _failed(extract_pdf(page_count_bomb_pdf(3), LIMITS), Refusal.EMPTY)


def test_more_pages_than_the_cap_are_refused_before_any_text_is_read() -> None:
    failed = _failed(extract_pdf(page_count_bomb_pdf(51), LIMITS), Refusal.TOO_MANY_PAGES)
    assert (failed.limit, failed.found) == (50, 51)


def test_text_past_the_character_cap_is_refused_naming_the_cap() -> None:
    limits = ExtractionLimits(max_chars=10_000)
    failed = _failed(extract_pdf(text_pdf(5), limits), Refusal.TOO_LONG)
    assert failed.limit == 10_000 and failed.found is not None and failed.found > 10_000
    assert _ok(extract_pdf(text_pdf(1), limits)).pages == 1


def test_a_password_protected_pdf_is_encrypted_and_an_empty_password_is_tried() -> None:
    def encrypted(password: str) -> bytes:
        writer = PdfWriter(clone_from=io.BytesIO(text_pdf(1)))
        writer.encrypt(user_password=password, owner_password="owner", algorithm="RC4-128")
        out = io.BytesIO()
        writer.write(out)
        return out.getvalue()

    _failed(extract_pdf(encrypted("secret"), LIMITS), Refusal.ENCRYPTED)
    assert "Kopek holds" in _ok(extract_pdf(encrypted(""), LIMITS)).text


@pytest.mark.parametrize(
    "data",
    [b"%PDF-1.7\n" + b"\x00" * 100, b"%PDF-1.4\n1 0 obj << /Type /Catalog", b"not a pdf at all"],
)
def test_garbage_that_claims_to_be_a_pdf_is_unreadable(data: bytes) -> None:
    _failed(extract_pdf(data, LIMITS), Refusal.UNREADABLE)


def test_form_xobjects_that_draw_each_other_end_as_unreadable_not_a_hang() -> None:
    """A page drawing X1, which draws X0, which draws X1…: the reader ends."""
    cycle = [
        b"<< /Type /XObject /Subtype /Form /BBox [0 0 10 10] "
        b"/Resources << /XObject << /X0 6 0 R >> >> /Length 8 >>\nstream\n/X0 Do Q\nendstream",
        b"<< /Type /XObject /Subtype /Form /BBox [0 0 10 10] "
        b"/Resources << /XObject << /X1 5 0 R >> >> /Length 8 >>\nstream\n/X1 Do Q\nendstream",
    ]
    data = pdf([b"q /X1 Do Q"], resources=b"<< /XObject << /X1 5 0 R >> >>", extra=cycle)
    result = extract(DocumentKind.PDF, data, LIMITS)
    assert isinstance(result, ExtractionFailed)
    assert result.reason in (Refusal.UNREADABLE, Refusal.EMPTY)


def test_pdfminers_evil_xobject_sample_when_the_corpus_is_present() -> None:
    """pdfminer.six's issue-1113 sample (not copied: its licence is unstated): no
    cross-reference table and two form XObjects drawing each other."""
    corpus = shared_media()
    if corpus is None:
        pytest.skip("../shared corpus not present")
    data = corpus / "documents" / "hostile_circular_xobjects_no_xref.pdfminer-issue-1113.pdf"
    result = extract(DocumentKind.PDF, data.read_bytes(), LIMITS)
    assert isinstance(result, ExtractionFailed) and result.reason == Refusal.UNREADABLE


def test_real_docx_paragraphs_come_out_in_order() -> None:
    got = _ok(extract_docx((DOCS / "par-hyperlinks.python-docx.docx").read_bytes(), LIMITS))
    assert got.text.split("\n\n") == [
        "No hyperlinks",
        "One awesome hyperlink.",
        "Three hyperlinks: the first one here, the second one, and the third.",
    ]


def test_real_docx_tables_between_paragraphs_keep_the_block_order() -> None:
    """python-docx's block-order sample: paragraphs around tables of empty cells."""
    got = _ok(extract_docx((DOCS / "blk-paras-and-tables.python-docx.docx").read_bytes(), LIMITS))
    assert got.text.index("Lorem ipsum") < got.text.index("Donec semper")


def test_docx_tables_are_rows_of_cells_and_merged_cells_appear_once() -> None:
    document = python_docx.Document()
    document.add_paragraph("Prices")
    table = document.add_table(rows=2, cols=3)
    table.cell(0, 0).text, table.cell(0, 1).text, table.cell(0, 2).text = "model", "in", "out"
    table.cell(1, 0).merge(table.cell(1, 1)).text = "groq"
    table.cell(1, 2).text = "0.11"
    document.core_properties.title = "Price card"
    out = io.BytesIO()
    document.save(out)
    got = _ok(extract_docx(out.getvalue(), LIMITS))
    assert got.text == "Prices\n\nmodel | in | out\ngroq | 0.11"
    assert got.title == "Price card"


def test_a_docx_without_core_properties_has_no_made_up_title() -> None:
    got = _ok(extract_docx(docx(["hello", "world"]), LIMITS))
    assert (got.text, got.title) == ("hello\n\nworld", "")


def test_a_docx_zip_bomb_is_refused_from_its_declared_sizes_before_inflating() -> None:
    bomb = docx_zip_bomb(60_000_000)
    assert len(bomb) < 1_000_000
    failed = _failed(extract_docx(bomb, LIMITS), Refusal.TOO_LARGE_UNPACKED)
    assert failed.limit == 5_000_000 and failed.found is not None and failed.found > 60_000_000


def test_a_zip_that_understates_a_size_yields_no_more_than_it_declared() -> None:
    """The central directory says 100 bytes for a 3 MB ``document.xml``: zipfile stops
    at 100 bytes and the CRC check fails, so the bomb stays unread."""
    data = bytearray(docx(["x" * 3_000_000]))
    directory = data.rfind(b"PK\x01\x02", 0)
    while directory != -1:
        name_length = struct.unpack_from("<H", data, directory + 28)[0]
        name = bytes(data[directory + 46 : directory + 46 + name_length])
        if name == b"word/document.xml":
            struct.pack_into("<I", data, directory + 24, 100)  # uncompressed size
            break
        directory = data.rfind(b"PK\x01\x02", 0, directory)
    with zipfile.ZipFile(io.BytesIO(bytes(data))) as archive:
        assert archive.getinfo("word/document.xml").file_size == 100
    _failed(extract_docx(bytes(data), LIMITS), Refusal.UNREADABLE)


def test_not_a_zip_and_an_empty_docx() -> None:
    _failed(extract_docx(b"PK\x03\x04 truncated", LIMITS), Refusal.UNREADABLE)
    _failed(extract_docx(docx([]), LIMITS), Refusal.EMPTY)


def test_a_real_telegram_preview_page_gives_its_posts_and_title() -> None:
    """A saved t.me page (Russian): text kept, scripts and furniture dropped."""
    html = (FIXTURES.parent / "telegram_html" / "any2feed_full.html").read_bytes()
    got = _ok(extract_html(html, LIMITS))
    assert "Пулково" in got.text
    assert "function(" not in got.text and "<div" not in got.text
    assert got.title


def test_a_page_keeps_its_article_and_drops_navigation() -> None:
    paragraph = "The ledger holds the worst case of every call before anything is spent. "
    html = (
        "<html><head><title>Holds</title><style>p{color:red}</style></head><body>"
        "<nav><a href='/'>Home</a> <a href='/about'>About us</a></nav>"
        f"<article><h1>Why holds</h1><p>{paragraph * 6}</p><p>{paragraph * 5}</p></article>"
        "<footer>Copyright footer text</footer><script>var x = 1;</script></body></html>"
    ).encode()
    got = _ok(extract_html(html, LIMITS))
    assert paragraph.strip() in got.text and got.title == "Holds"
    assert "About us" not in got.text and "var x" not in got.text and "footer" not in got.text


def test_a_short_page_trafilatura_finds_nothing_in_still_gives_its_text() -> None:
    got = _ok(extract_html(b"<html><body><div>Hi there</div></body></html>", LIMITS))
    assert got.text == "Hi there"
    _failed(extract_html(b"<html><body><script>1</script></body></html>", LIMITS), Refusal.EMPTY)


def test_a_page_declaring_windows_1251_is_decoded_by_its_meta_charset() -> None:
    html = '<html><head><meta charset="windows-1251"></head><body><p>Привет, мир</p></body></html>'
    assert "Привет, мир" in html_decode(html.encode("cp1251"))


@pytest.mark.parametrize(
    ("data", "text"),
    [
        ("plain UTF-8: héllo".encode(), "plain UTF-8: héllo"),
        ("\ufeffwith a BOM".encode(), "with a BOM"),
        ("UTF-16 текст".encode("utf-16"), "UTF-16 текст"),
        (
            "Кириллица в старой кодировке, как её сохраняет Блокнот Windows.".encode("cp1251"),
            "Кириллица в старой кодировке, как её сохраняет Блокнот Windows.",
        ),
        (b"model,input,output\r\ngroq,0.11,0.34\r\n", "model,input,output\ngroq,0.11,0.34"),
    ],
)
def test_text_files_are_decoded_and_cleaned(data: bytes, text: str) -> None:
    assert _ok(extract_text(data, LIMITS)).text == text


def test_cleaning_drops_control_characters_and_collapses_blank_runs() -> None:
    assert clean("a\x00b\r\n\r\n\r\n\n c \t\nd\u200b\x0c") == "ab\n\n c\nd"
    assert decode(b"\xff\xfeA\x00") == "A"


def test_text_over_the_cap_and_blank_text_are_refused() -> None:
    _failed(extract_text(b"x" * 50_001, LIMITS), Refusal.TOO_LONG)
    _failed(extract_text(b" \n\t\n", LIMITS), Refusal.EMPTY)


@pytest.mark.parametrize(
    ("name", "mime", "head", "kind"),
    [
        ("report.pdf", "application/pdf", b"%PDF-1.7\n", DocumentKind.PDF),
        ("scan.bin", "application/octet-stream", b"junk\n%PDF-1.4\n", DocumentKind.PDF),
        ("report.pdf", "application/pdf", b"PK\x03\x04zip", None),  # a zip named .pdf
        ("letter.docx", DOCX_MIME, b"PK\x03\x04", DocumentKind.DOCX),
        ("letter", DOCX_MIME, b"PK\x03\x04", DocumentKind.DOCX),
        ("sheet.xlsx", "application/vnd.ms-excel", b"PK\x03\x04", None),
        ("page.html", "text/html", b"<p>hi", DocumentKind.HTML),
        ("saved", "", b"\n  <!DOCTYPE html><html>", DocumentKind.HTML),
        ("notes.md", "", b"# Title\n", DocumentKind.TEXT),
        ("main.py", "text/x-python", b"import os\n", DocumentKind.TEXT),
        ("Makefile", "", b"all:\n", DocumentKind.TEXT),
        ("usage.csv", "text/csv", b"a,b\n", DocumentKind.TEXT),
        ("utf16.txt", "text/plain", b"\xff\xfeh\x00i\x00", DocumentKind.TEXT),
        ("binary.txt", "text/plain", b"\x00\x01\x02", None),
        ("photo.jpg", "image/jpeg", b"\xff\xd8\xff\xe0", None),
    ],
)
def test_the_bytes_decide_the_kind_before_the_name(
    name: str, mime: str, head: bytes, kind: DocumentKind | None
) -> None:
    assert document_kind(name, mime, head) == kind


def test_results_survive_their_json_line() -> None:
    for result in (
        Extracted(DocumentKind.PDF, "text", pages=2, title="t", peak_memory_kb=5, seconds=0.5),
        ExtractionFailed(Refusal.TOO_MANY_PAGES, DocumentKind.PDF, limit=50, found=51),
        ExtractionFailed(Refusal.UNSUPPORTED),
    ):
        assert result_from_json(result.to_json()) == result
    with pytest.raises(ValueError, match="not an extraction result"):
        result_from_json({"ok": True})


def test_limits_must_be_positive() -> None:
    with pytest.raises(ValueError, match="positive"):
        ExtractionLimits(max_pages=0)
    with pytest.raises(ValueError, match="timeout_s"):
        ExtractionLimits(timeout_s=0)
