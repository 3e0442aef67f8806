"""Amounts, ids, dates and times are read from ASCII digits only.

Python's ``\\d`` and ``int()`` accept every Unicode decimal digit (``１``, ``١``, ``٠``), so
``/limit ١`` once set a limit while ``/team`` and ``ADMIN_IDS`` refused the same text. A
regular expression in product code spells its digits ``[0-9]`` (or compiles with
``re.ASCII``); this check reads every string literal of the four packages.
"""

from __future__ import annotations

import io
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("bot", "budget", "llm", "scheduler")


def _string_tokens(path: Path) -> list[tuple[int, str]]:
    source = path.read_text(encoding="utf-8")
    tokens = tokenize.generate_tokens(io.StringIO(source).readline)
    return [(tok.start[0], tok.string) for tok in tokens if tok.type == tokenize.STRING]


def _unicode_digit_classes(root: Path) -> list[str]:
    found = []
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            for line, text in _string_tokens(path):
                prefix = text[: len(text) - len(text.lstrip("rRbBuUfF"))].lower()
                if "r" in prefix and "\\d" in text and "re.ASCII" not in text:
                    found.append(f"{path.relative_to(root)}:{line}: {text[:60]}")
    return found


def test_product_regexes_match_ascii_digits_only() -> None:
    assert _unicode_digit_classes(ROOT) == []


def test_the_check_sees_a_unicode_digit_class(tmp_path: Path) -> None:
    (tmp_path / "budget").mkdir()
    sample = tmp_path / "budget" / "sample.py"
    sample.write_text('import re\nAMOUNT = re.compile(r"\\d+")\nOK = r"[0-9]"\n', encoding="utf-8")
    assert _unicode_digit_classes(tmp_path) == ['budget/sample.py:2: r"\\d+"']
