"""The README stays a ten-minute read and the documents point only at what exists
(``docs/decisions/008-a-short-readme-and-docs.md``): at most 150 lines of README, and
every relative link of the README and of ``docs/`` names a file of the repository (and,
with ``#anchor``, one of that file's headings)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.support.docs import DOCS, README, ROOT, doc_files, heading_anchors, relative_links

MAX_README_LINES = 150


def test_the_readme_is_at_most_150_lines() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= MAX_README_LINES, f"README.md has {len(lines)} lines: move detail to docs/"


def test_the_readme_gives_the_two_commands() -> None:
    """``make run`` starts the bot, ``make test`` checks everything (CI runs the same)."""
    readme = README.read_text(encoding="utf-8")
    assert "make run" in readme and "make test" in readme


def test_the_documents_are_found() -> None:
    """The walk covers the README, the docs and the decisions (so the link test below
    cannot pass by reading nothing)."""
    names = {path.relative_to(ROOT).as_posix() for path in doc_files()}
    for name in ("README.md", "docs/configuration.md", "docs/architecture.md"):
        assert name in names
    assert any(path.parent == DOCS / "decisions" for path in doc_files())


def _resolve(source: Path, target: str) -> tuple[Path, str]:
    path, _, anchor = target.partition("#")
    return ((source.parent / path).resolve() if path else source), anchor


@pytest.mark.parametrize("source", doc_files(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_points_to_a_file_that_exists(source: Path) -> None:
    broken = []
    for target in relative_links(source):
        path, anchor = _resolve(source, target)
        if (
            not path.exists()
            or not path.is_relative_to(ROOT)
            or (anchor and path.suffix == ".md" and anchor not in heading_anchors(path))
        ):
            broken.append(target)
    assert not broken, f"{source.relative_to(ROOT)}: links to nothing: {broken}"


def test_the_link_reader_sees_links_and_skips_code(tmp_path: Path) -> None:
    """A link in prose is read, with its anchor; one inside code is not; an absolute URL
    is not relative; a heading's anchor is GitHub's."""
    page = tmp_path / "page.md"
    page.write_text(
        "# The `bench/bot.py` run, 300 users\n\n"
        "See [money](money.md#the-guarantee) and [web](https://example.org).\n"
        "`[not](code.md)`\n\n```\n[nor](fenced.md)\n```\n",
        encoding="utf-8",
    )
    assert relative_links(page) == ["money.md#the-guarantee"]
    assert heading_anchors(page) == {"the-benchbotpy-run-300-users"}


def test_every_decision_is_in_the_index_and_cited_decisions_exist() -> None:
    """``docs/decisions/README.md`` lists every decision file once, and every
    ``docs/decisions/NNN-…`` a product module cites is a file."""
    folder = DOCS / "decisions"
    index = (folder / "README.md").read_text(encoding="utf-8")
    files = sorted(p.name for p in folder.glob("[0-9][0-9][0-9]-*.md"))
    missing = [name for name in files if f"]({name})" not in index]
    assert missing == [], f"add them to docs/decisions/README.md: {missing}"
    cited: set[str] = set()
    for package in ("bot", "budget", "llm", "scheduler"):
        for path in (ROOT / package).rglob("*.py"):
            cited.update(re.findall(r"docs/decisions/([0-9]{3}-[a-z0-9-]+\.md)", path.read_text()))
    assert sorted(cited - set(files)) == []
