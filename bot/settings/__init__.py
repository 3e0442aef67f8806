"""Kopek's settings, read from the environment and ``.env`` (pydantic-settings).

Created once in ``bot.__main__`` and injected; nothing reads ``os.environ`` elsewhere.
Every variable is one flat name (``CHAT_MAX_OUTPUT_TOKENS``), documented in
``.env.example``; ``docs/decisions/060-settings-stay-flat.md`` says why they are not
nested sections.

* :mod:`bot.settings.env`: the settings classes: every field with its default and
  bounds, and the checks across fields.
* :mod:`bot.settings.checks`: the checks and parsers of single values (URLs, zones,
  ids, the webhook's secret and path, the database URL).
* :mod:`bot.settings.typos`: names close to a setting that the settings ignore.
"""

from bot.settings.checks import (
    HEALTH_PATHS,
    MAX_USER_ID,
    check_database_url,
    database_url_passwords,
)
from bot.settings.env import BotApiSettings, DatabaseSettings, ProviderSettings, Settings
from bot.settings.typos import misspelt_settings

__all__ = [
    "HEALTH_PATHS",
    "MAX_USER_ID",
    "BotApiSettings",
    "DatabaseSettings",
    "ProviderSettings",
    "Settings",
    "check_database_url",
    "database_url_passwords",
    "misspelt_settings",
]
