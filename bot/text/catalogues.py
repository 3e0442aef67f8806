"""Keeping the gettext catalogues whole: the msgids are extracted from the code (Babel's
Python extractor, keywords ``_``, ``N_`` and ``ngettext``, over ``bot/`` and ``scheduler/``),
written to
``bot/text/locales/messages.pot``, merged into every ``messages.po`` (new msgids empty,
removed ones dropped; a language of :data:`~bot.text.i18n.SUPPORTED_LANGUAGES` without a
catalogue gets an empty one), and compiled to ``.mo`` (``make locales`` runs :func:`main`).
Every catalogue's ``Plural-Forms`` header is :data:`PLURAL_FORMS`' (gettext's own rules;
Babel's CLDR defaults give Spanish and Portuguese a third form for millions, which these
texts never need): ``docs/decisions/250-plural-forms-and-whole-limit-sentences.md``.

:func:`placeholders` is what the catalogue test compares between a msgid and each
translation (each plural form of one): the ``{name}`` fields of :meth:`str.format`.
"""

from __future__ import annotations

import string
from datetime import UTC, datetime
from pathlib import Path

from babel.messages.catalog import Catalog
from babel.messages.extract import extract_from_dir
from babel.messages.pofile import read_po, write_po

from bot.text.i18n import LOCALES_DIR, SUPPORTED_LANGUAGES, compile_all

__all__ = [
    "PLURAL_FORMS",
    "POT_PATH",
    "SOURCE_DIRS",
    "extract",
    "main",
    "placeholders",
    "update_catalogues",
]

#: The packages whose ``_()`` calls are the bot's texts.
SOURCE_DIRS = ("bot", "scheduler")
POT_PATH = LOCALES_DIR / "messages.pot"
_ROOT = LOCALES_DIR.parents[2]
_CREATED = datetime(2026, 11, 30, 8, 58, tzinfo=UTC)
#: ``ngettext(singular, plural, n)``: the first two arguments are the msgid and its plural.
_KEYWORDS = {"_": None, "N_": None, "ngettext": (1, 2)}
#: Each language's number of plural forms and the C expression that picks one for ``n``.
PLURAL_FORMS: dict[str, tuple[int, str]] = {
    "ru": (
        3,
        "(n%10==1 && n%100!=11 ? 0 : n%10>=2 && n%10<=4 && (n%100<10 || n%100>=20) ? 1 : 2)",
    ),
    "uk": (
        3,
        "(n%10==1 && n%100!=11 ? 0 : n%10>=2 && n%10<=4 && (n%100<10 || n%100>=20) ? 1 : 2)",
    ),
    "de": (2, "(n != 1)"),
    "es": (2, "(n != 1)"),
    "pt": (2, "(n > 1)"),  # Brazilian Portuguese: 0 and 1 are singular
    "zh": (1, "0"),
}


def extract(root: Path = _ROOT) -> Catalog:
    """Every msgid of the code, as a template catalogue (sorted, with its locations)."""
    # a fixed creation date: running it twice changes nothing
    catalog = Catalog(project="kopek", fuzzy=False, creation_date=_CREATED)
    for folder in SOURCE_DIRS:
        found = extract_from_dir(
            str(root / folder), method_map=[("**.py", "python")], keywords=_KEYWORDS
        )
        for filename, lineno, message, comments, _context in found:
            forms = message if isinstance(message, tuple) else (message,)
            flags = ("python-brace-format",) if any(placeholders(str(f)) for f in forms) else ()
            catalog.add(
                message,
                locations=[(f"{folder}/{filename}", lineno)],
                auto_comments=comments,
                flags=flags,
            )
    return catalog


def update_catalogues(root: Path = _ROOT) -> list[Path]:
    """Write the template and merge it into every ``.po``; returns the ``.po`` paths."""
    template = extract(root)
    with POT_PATH.open("wb") as fp:
        write_po(fp, template, width=100, sort_output=True, no_location=True)
    updated = []
    for language in SUPPORTED_LANGUAGES[1:]:  # a new language starts as an empty catalogue
        po_path = LOCALES_DIR / language / "LC_MESSAGES" / "messages.po"
        if not po_path.exists():
            po_path.parent.mkdir(parents=True)
            with po_path.open("wb") as fp:
                write_po(fp, Catalog(locale=language, project="kopek", creation_date=_CREATED))
    for po_path in sorted(LOCALES_DIR.glob("*/LC_MESSAGES/messages.po")):
        with po_path.open("rb") as fp:
            catalog = read_po(fp, locale=po_path.parent.parent.name)
        catalog.update(template, no_fuzzy_matching=True)
        catalog.obsolete.clear()
        _set_plural_forms(catalog, po_path.parent.parent.name)
        with po_path.open("wb") as fp:
            write_po(fp, catalog, width=100, sort_output=True, no_location=True)
        updated.append(po_path)
    return updated


def _set_plural_forms(catalog: Catalog, language: str) -> None:
    """The language's :data:`PLURAL_FORMS` in ``catalog``'s header, and every plural
    message with exactly that many ``msgstr[n]`` (new forms empty, for a translator)."""
    count, expr = PLURAL_FORMS[language]
    catalog.mime_headers = [("Plural-Forms", f"nplurals={count}; plural={expr};")]
    for message in catalog:
        if message.id and message.pluralizable:
            found = message.string if isinstance(message.string, tuple) else (message.string,)
            strings = [str(form or "") for form in found[:count]]
            message.string = (*strings, *[""] * (count - len(strings)))


def placeholders(text: str) -> frozenset[str]:
    """The ``str.format`` field names in ``text`` (``{tz}`` → ``tz``)."""
    return frozenset(
        name for _lit, name, _spec, _conv in string.Formatter().parse(text) if name is not None
    )


def main() -> None:
    """``make locales``: extract, merge, compile."""
    for path in update_catalogues():
        print(path)
    for path in compile_all():
        print(path)


if __name__ == "__main__":
    main()
