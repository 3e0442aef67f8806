"""Every setting is documented in both places an operator reads (trial 15, finding 11):
``.env.example`` names exactly the settings' fields, and README's Configuration table
describes each by name (``BREAKER_FAILURE_*``, ``DEGRADED_MIN_OUTPUT_TOKENS`` and
``USER_DAILY_MESSAGES`` were named nowhere in README)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bot.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
FIELDS = sorted(name.upper() for name in Settings.model_fields)


def _env_example_names() -> set[str]:
    text = (ROOT / ".env.example").read_text(encoding="utf-8")
    return set(re.findall(r"^#?([A-Z][A-Z0-9_]*)=", text, re.MULTILINE))


def _configuration_rows() -> str:
    """README's Configuration table, then the settings tables of the pages in docs/
    (a topic's own settings, e.g. docs/webhook.md's limits)."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("\n## Configuration\n", 1)[1].split("\n### ", 1)[0]
    [table] = [
        block for block in section.split("\n\n") if block.startswith("| variable | meaning |")
    ]
    for page in sorted((ROOT / "docs").glob("**/*.md")):
        blocks = page.read_text(encoding="utf-8").split("\n\n")
        table += "".join("\n" + b.strip() for b in blocks if b.startswith("| variable | meaning |"))
    return table


def test_env_example_names_exactly_the_settings() -> None:
    assert sorted(_env_example_names()) == FIELDS


@pytest.mark.parametrize("name", FIELDS)
def test_readme_configuration_table_describes_every_setting(name: str) -> None:
    rows = [row for row in _configuration_rows().splitlines() if f"`{name}`" in row]
    assert rows, f"{name} is not described in README's Configuration table"
    for row in rows:
        meaning = row.split(" | ")[1] if row.count(" | ") >= 2 else ""
        assert len(meaning) > 10, row


def test_log_level_values_are_listed_in_both() -> None:
    example = (ROOT / ".env.example").read_text(encoding="utf-8")
    table = _configuration_rows()
    for level in ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"):
        assert level in example
        assert f"`{level}`" in table
