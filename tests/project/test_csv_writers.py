"""Every CSV Kopek writes goes through :mod:`budget.books.csv_out` (the one writer that
keeps a text cell from being run as a spreadsheet formula): no other product module
calls ``csv.writer`` or ``csv.DictWriter``."""

from __future__ import annotations

import ast
from pathlib import Path

from budget.books.csv_out import csv_bytes, safe_cell

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("bot", "budget", "llm", "scheduler")
WRITERS = {"writer", "DictWriter"}
THE_WRITER = ROOT / "budget" / "books" / "csv_out.py"


def _csv_writer_calls(path: Path) -> list[int]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: list[int] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "csv":
            found += [node.lineno for alias in node.names if alias.name in WRITERS]
        if (
            isinstance(node, ast.Attribute)
            and node.attr in WRITERS
            and isinstance(node.value, ast.Name)
            and node.value.id == "csv"
        ):
            found.append(node.lineno)
    return found


def test_no_product_module_but_the_one_writer_makes_a_csv_writer() -> None:
    """``csv.writer`` / ``csv.DictWriter`` appear only in ``budget/books/csv_out.py``."""
    offenders = {
        str(path.relative_to(ROOT)): lines
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
        if path != THE_WRITER and (lines := _csv_writer_calls(path))
    }
    assert offenders == {}
    assert _csv_writer_calls(THE_WRITER), "the writer itself must use csv.writer"


def test_text_cells_that_start_a_formula_are_written_as_text() -> None:
    """``= + - @``, tab and CR at the start of a text cell get a ``'``; numbers (a negative
    µUSD difference) and other text are written as they are."""
    assert [safe_cell(c) for c in ("=1+1", "+1", "-A1", "@SUM(A1)", "\tx", "\rx")] == [
        "'=1+1",
        "'+1",
        "'-A1",
        "'@SUM(A1)",
        "'\tx",
        "'\rx",
    ]
    assert [safe_cell(c) for c in (-5, "a-b", "", None, "2026-01-14")] == [
        -5,
        "a-b",
        "",
        "",
        "2026-01-14",
    ]
    assert csv_bytes([["-A1", -5]]) == b"'-A1,-5\r\n"
