"""Translations: gettext catalogues (``bot/locales/<lang>/LC_MESSAGES/messages.po``).

English is the source language (the msgids); Russian is a Babel ``.po`` catalogue.
aiogram's :class:`~aiogram.utils.i18n.I18n` expects compiled ``.mo`` files; to keep
a fresh clone runnable without a build step, :class:`CatalogueI18n` compiles each
``.po`` in memory with Babel when the bot starts.
"""

from __future__ import annotations

import gettext
from io import BytesIO
from pathlib import Path

from aiogram.utils.i18n import I18n
from babel.messages.mofile import write_mo
from babel.messages.pofile import read_po

__all__ = ["LOCALES_DIR", "SUPPORTED_LANGUAGES", "CatalogueI18n", "pick_language"]

LOCALES_DIR = Path(__file__).parent / "locales"
SUPPORTED_LANGUAGES = ("en", "ru")


def pick_language(stored: str | None, telegram_code: str | None) -> str:
    """The user's language: their /lang choice, else Telegram's ``language_code`` (ru → ru)."""
    if stored in SUPPORTED_LANGUAGES:
        return stored
    if telegram_code and telegram_code.split("-")[0].lower() == "ru":
        return "ru"
    return "en"


class CatalogueI18n(I18n):
    """aiogram I18n that reads ``.po`` catalogues directly (compiled in memory by Babel)."""

    def find_locales(self) -> dict[str, gettext.GNUTranslations]:
        translations: dict[str, gettext.GNUTranslations] = {}
        for po_path in sorted(self.path.glob(f"*/LC_MESSAGES/{self.domain}.po")):
            locale = po_path.parent.parent.name
            with po_path.open("rb") as fp:
                catalog = read_po(fp, locale=locale)
            buf = BytesIO()
            write_mo(buf, catalog)
            buf.seek(0)
            translations[locale] = gettext.GNUTranslations(buf)
        return translations
