"""Kopek's settings, read from the environment and ``.env`` (:mod:`bot.settings.env`)."""

from bot.settings.env import (
    HEALTH_PATHS,
    MAX_USER_ID,
    BotApiSettings,
    DatabaseSettings,
    ProviderSettings,
    Settings,
    check_database_url,
    database_url_passwords,
    misspelt_settings,
    usd_to_musd,
)

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
    "usd_to_musd",
]
