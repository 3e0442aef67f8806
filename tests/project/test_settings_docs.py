"""Every setting is documented in both places an operator reads:
``.env.example`` names exactly the settings' fields, and ``docs/configuration.md`` (the
README's Configuration section links to it) describes each by name, one row of its own
with the default the settings really have (``BREAKER_FAILURE_*``,
``DEGRADED_MIN_OUTPUT_TOKENS`` and ``USER_DAILY_MESSAGES`` were once named nowhere)."""

from __future__ import annotations

import re
from decimal import Decimal

import pytest
from pydantic.fields import FieldInfo

from bot.settings import Settings
from tests.support.docs import CONFIGURATION, README, ROOT, setting_rows

FIELDS = sorted(name.upper() for name in Settings.model_fields)


def _env_example_names() -> set[str]:
    text = (ROOT / ".env.example").read_text(encoding="utf-8")
    return set(re.findall(r"^#?([A-Z][A-Z0-9_]*)=", text, re.MULTILINE))


def _configuration_rows() -> list[str]:
    """Every row of the settings tables, as ``cell | cell | …`` text."""
    return [" | ".join(cells) for rows in setting_rows().values() for cells in rows]


def test_env_example_names_exactly_the_settings() -> None:
    assert sorted(_env_example_names()) == FIELDS


@pytest.mark.parametrize("name", FIELDS)
def test_configuration_doc_describes_every_setting(name: str) -> None:
    rows = [row for row in _configuration_rows() if f"`{name}`" in row]
    assert rows, f"{name} is not described in docs/configuration.md"
    for row in rows:
        meaning = row.split(" | ")[1] if row.count(" | ") >= 2 else ""
        assert len(meaning) > 10, row


def test_the_tables_name_nothing_but_settings() -> None:
    """Each settings row is one setting's own (no row for a name the settings lack)."""
    assert sorted(setting_rows()) == FIELDS


def _documented_default(info: FieldInfo) -> str:
    """How the default column writes the field's default."""
    if info.is_required():
        return "required"
    value = info.default
    if value is None:
        return "unset"
    if value in ("", frozenset()):
        return "empty"
    if isinstance(value, str):
        return f"`{value}`"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, tuple):  # a list setting, as written: ALERT_AT=0.5,0.8,1.0
        return "`" + ",".join(str(v) for v in value) + "`"
    assert isinstance(value, int | float | Decimal), value
    return str(value)


@pytest.mark.parametrize("name", FIELDS)
def test_each_setting_has_one_row_giving_its_unit_and_real_default(name: str) -> None:
    [row] = setting_rows()[name]
    _variable, meaning, unit, default, _range = row
    assert meaning and unit, row
    expected = _documented_default(Settings.model_fields[name.lower()])
    # ``unset`` may say what unset means: "unset (long polling)"
    assert default == expected or default.startswith(f"{expected} ("), (name, default, expected)


def test_log_level_values_are_listed_in_both() -> None:
    example = (ROOT / ".env.example").read_text(encoding="utf-8")
    table = "\n".join(_configuration_rows())
    for level in ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"):
        assert level in example
        assert f"`{level}`" in table


def test_the_readme_links_the_full_table() -> None:
    """The README gives the few settings that matter and sends the reader to the rest."""
    readme = README.read_text(encoding="utf-8")
    section = readme.split("\n## Configuration\n", 1)[1].split("\n## ", 1)[0]
    assert f"({CONFIGURATION.relative_to(ROOT)})" in section
