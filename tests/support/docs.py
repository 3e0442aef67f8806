"""Readers of the repository's Markdown for the tests that keep the docs true.

The README is the ten-minute read; the reference lives in ``docs/`` (``docs/configuration.md``
has every setting, one table row each). These helpers read them as text: nothing is
rendered, and a table is a run of lines that start with ``|``.
"""

from __future__ import annotations

import re
from pathlib import Path

__all__ = [
    "CONFIGURATION",
    "DOCS",
    "README",
    "ROOT",
    "doc_files",
    "heading_anchors",
    "relative_links",
    "setting_rows",
    "text_of_docs",
]

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
CONFIGURATION = DOCS / "configuration.md"

#: The header of every settings table in ``docs/configuration.md``.
SETTINGS_HEADER = "| variable | meaning | unit | default | range |"

#: ``[text](target)`` and ``![alt](target)``; the target ends at the first space or ``)``.
_LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
_FENCE = re.compile(r"^(```|~~~)")


def doc_files() -> list[Path]:
    """README.md and every Markdown file under ``docs/`` (decisions included), sorted."""
    return [README, *sorted(DOCS.rglob("*.md"))]


def text_of_docs() -> str:
    """README and every doc joined, whitespace collapsed to single spaces (a phrase
    wrapped over two lines is still found)."""
    return " ".join(" ".join(path.read_text(encoding="utf-8").split()) for path in doc_files())


def _cells(line: str) -> list[str]:
    """A table row's cells, stripped (``| a | b |`` → ``["a", "b"]``)."""
    return [cell.strip() for cell in line.strip().strip("|").split(" | ")]


def setting_rows() -> dict[str, list[list[str]]]:
    """Rows of the settings tables of ``docs/configuration.md`` by the setting their
    first cell names (``BOT_TOKEN`` → ``[[variable, meaning, unit, default, range]]``).
    A row whose first cell is not one backticked name is kept under that cell's text.
    """
    rows: dict[str, list[list[str]]] = {}
    in_table = False
    for line in CONFIGURATION.read_text(encoding="utf-8").splitlines():
        if line.strip() == SETTINGS_HEADER:
            in_table = True
            continue
        if not line.startswith("|"):
            in_table = False
            continue
        if not in_table or set(line) <= set("|-: "):
            continue
        cells = _cells(line)
        name = cells[0][1:-1] if re.fullmatch(r"`[A-Z0-9_]+`", cells[0]) else cells[0]
        rows.setdefault(name, []).append(cells)
    return rows


def _outside_code(text: str, *, spans: str = "drop") -> list[str]:
    """The lines of ``text`` outside fenced code blocks; inline code spans dropped
    (``spans="drop"``) or kept without their backticks (``spans="unquote"``)."""
    kept: list[str] = []
    fenced = False
    for line in text.splitlines():
        if _FENCE.match(line.strip()):
            fenced = not fenced
            continue
        if not fenced:
            kept.append(re.sub(r"`([^`]*)`", "" if spans == "drop" else r"\1", line))
    return kept


def relative_links(path: Path) -> list[str]:
    """The link targets in ``path`` that are not absolute URLs (``http:``, ``mailto:``…),
    outside code; ``#anchor`` targets within the same file included."""
    targets: list[str] = []
    for line in _outside_code(path.read_text(encoding="utf-8")):
        for target in _LINK.findall(line):
            if not re.match(r"[a-z][a-z0-9+.-]*:", target):
                targets.append(target)
    return targets


def heading_anchors(path: Path) -> set[str]:
    """The anchors GitHub gives the headings of ``path``: lower case, punctuation other
    than ``-`` and ``_`` dropped, spaces as ``-`` (a repeated heading gets ``-1``, ``-2``…)."""
    anchors: set[str] = set()
    for line in _outside_code(path.read_text(encoding="utf-8"), spans="unquote"):
        match = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not match:
            continue
        slug = re.sub(r"[^\w\- ]", "", match.group(1).lower()).replace(" ", "-")
        anchor, n = slug, 0
        while anchor in anchors:
            n += 1
            anchor = f"{slug}-{n}"
        anchors.add(anchor)
    return anchors
