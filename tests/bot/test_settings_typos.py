"""The ``.env`` typo check reads ``.env`` as the settings read it (python-dotenv's parser):
a name is what the settings would take for one, nothing else."""

from __future__ import annotations

from pathlib import Path

from bot.settings import Settings, misspelt_settings


def test_a_line_inside_a_quoted_value_is_no_name(tmp_path: Path) -> None:
    """``WEBHOOKURL=`` inside a multi-line quoted value is part of the value, not a
    name (a line-by-line pattern took it for one); the settings read the same value."""
    env_file = tmp_path / ".env"
    env_file.write_text(
        "BOT_TOKEN=1:x\nGROQ_API_KEY=k\nPRICE_OVERRIDES='{\nWEBHOOKURL=x\n}'\n",
        encoding="utf-8",
    )
    assert misspelt_settings({}, env_file) == []
    settings = Settings(_env_file=env_file)
    assert settings.price_overrides == "{\nWEBHOOKURL=x\n}"


def test_quoted_exported_and_spaced_names_are_found(tmp_path: Path) -> None:
    """``export NAME=``, ``NAME = value`` and an empty value are assignments the settings
    would take; a bare ``NAME`` line assigns nothing and is no typo of a setting."""
    env_file = tmp_path / ".env"
    env_file.write_text(
        "export WEBHOOKURL=https://bot.example.org/t\n"
        "BUDGET_GLOBAL_DAILY = 1\n"
        "USER_DAILY_MESSAGE=\n"
        "CHAT_MAX_OUTPUT_TOKEN\n"
        "# CHAT_MAX_INPUT_TOKEN=1\n",
        encoding="utf-8",
    )
    assert misspelt_settings({}, env_file) == [
        ("BUDGET_GLOBAL_DAILY", "BUDGET_GLOBAL_DAILY_USD"),
        ("USER_DAILY_MESSAGE", "USER_DAILY_MESSAGES"),
        ("WEBHOOKURL", "WEBHOOK_URL"),
    ]


def test_an_env_file_that_cannot_be_read_counts_as_empty(tmp_path: Path) -> None:
    """Not UTF-8, a folder, or absent: no names from it, and no exception."""
    bad = tmp_path / "latin1.env"
    bad.write_bytes(b"WEBHOOKURL=caf\xe9\n")
    assert misspelt_settings({}, bad) == []
    assert misspelt_settings({}, tmp_path) == []
    assert misspelt_settings({"WEBHOOKURL": "x"}, tmp_path / "absent") == [
        ("WEBHOOKURL", "WEBHOOK_URL")
    ]
