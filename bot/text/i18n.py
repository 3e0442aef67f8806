"""Translations: gettext catalogues (``bot/text/locales/<lang>/LC_MESSAGES/messages.po``).

English is the source language (the msgids); Russian, Simplified Chinese (``zh``),
Brazilian Portuguese (``pt``), Spanish, German and Ukrainian are Babel ``.po``
catalogues, kept whole by ``make locales`` (:mod:`bot.text.catalogues`) and a test.
aiogram's :class:`~aiogram.utils.i18n.I18n` loads compiled ``.mo`` files, which are
committed next to their ``.po`` (``make locales`` recompiles them; a test fails when a
``.mo`` is older than its ``.po``), so a fresh clone runs without a build step.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from io import BytesIO
from pathlib import Path

from aiogram.utils.i18n import I18n
from babel.messages.mofile import write_mo
from babel.messages.pofile import read_po

__all__ = [
    "LANGUAGE_NAMES",
    "LOCALES_DIR",
    "N_",
    "SUPPORTED_LANGUAGES",
    "compile_all",
    "compile_catalogue",
    "create_i18n",
    "in_locale",
    "pick_language",
]

LOCALES_DIR = Path(__file__).parent / "locales"
#: Each language by its own name, in the order /lang lists them. ``zh`` is Simplified
#: Chinese (every ``zh-*`` code of Telegram's gets it), ``pt`` Brazilian Portuguese.
LANGUAGE_NAMES = {
    "en": "English",
    "ru": "Русский",
    "zh": "简体中文",
    "pt": "Português (Brasil)",
    "es": "Español",
    "de": "Deutsch",
    "uk": "Українська",
}
SUPPORTED_LANGUAGES = tuple(LANGUAGE_NAMES)


def N_(text: str) -> str:
    """Mark ``text`` as a msgid where it is defined (a constant) and translate it where it is
    used (``gettext(text)``); ``make locales`` extracts ``N_`` like ``_``."""
    return text


def pick_language(stored: str | None, telegram_code: str | None) -> str:
    """The user's language: their /lang choice, else Telegram's ``language_code`` when
    its first part is a supported language (``pt-br`` → ``pt``), else English."""
    if stored in SUPPORTED_LANGUAGES:
        return stored
    if telegram_code:
        code = telegram_code.split("-")[0].lower()
        if code in SUPPORTED_LANGUAGES:
            return code
    return "en"


@contextmanager
def in_locale(i18n: I18n, language: str) -> Iterator[None]:
    """Translate in ``language`` outside a handler (jobs, start-up, admin notices):
    sets aiogram's current I18n *and* its locale, as the middleware does for updates."""
    with i18n.context(), i18n.use_locale(language):
        yield


def create_i18n() -> I18n:
    """aiogram's I18n over the compiled catalogues in :data:`LOCALES_DIR`."""
    return I18n(path=LOCALES_DIR, default_locale="en", domain="messages")


def compile_catalogue(po_path: Path) -> bytes:
    """The ``.mo`` bytes Babel compiles from ``po_path`` (used by ``make locales`` and by
    the test that checks the committed ``.mo`` files are up to date)."""
    locale = po_path.parent.parent.name
    with po_path.open("rb") as fp:
        catalog = read_po(fp, locale=locale)
    buf = BytesIO()
    write_mo(buf, catalog)
    return buf.getvalue()


def compile_all() -> list[Path]:
    """Compile every ``.po`` under :data:`LOCALES_DIR` next to itself; returns the ``.mo`` paths."""
    written = []
    for po_path in sorted(LOCALES_DIR.glob("*/LC_MESSAGES/messages.po")):
        mo_path = po_path.with_suffix(".mo")
        mo_path.write_bytes(compile_catalogue(po_path))
        written.append(mo_path)
    return written


if __name__ == "__main__":
    for path in compile_all():
        print(path)
