"""Keeping the gettext catalogues whole: the msgids are extracted from the code (Babel's
Python extractor, keyword ``_``, over ``bot/`` and ``scheduler/``), written to
``bot/text/locales/messages.pot``, merged into every ``messages.po`` (new msgids empty,
removed ones dropped; a language of :data:`~bot.text.i18n.SUPPORTED_LANGUAGES` without a
catalogue gets an empty one), and compiled to ``.mo`` (``make locales`` runs :func:`main`).

:func:`placeholders` is what the catalogue test compares between a msgid and each
translation: the ``{name}`` fields of :meth:`str.format`.
"""

from __future__ import annotations

import string
from datetime import UTC, datetime
from pathlib import Path

from babel.messages.catalog import Catalog
from babel.messages.extract import extract_from_dir
from babel.messages.pofile import read_po, write_po

from bot.text.i18n import LOCALES_DIR, SUPPORTED_LANGUAGES, compile_all

__all__ = ["POT_PATH", "SOURCE_DIRS", "extract", "main", "placeholders", "update_catalogues"]

#: The packages whose ``_()`` calls are the bot's texts.
SOURCE_DIRS = ("bot", "scheduler")
POT_PATH = LOCALES_DIR / "messages.pot"
_ROOT = LOCALES_DIR.parents[2]
_CREATED = datetime(2026, 11, 30, 8, 58, tzinfo=UTC)


def extract(root: Path = _ROOT) -> Catalog:
    """Every msgid of the code, as a template catalogue (sorted, with its locations)."""
    # a fixed creation date: running it twice changes nothing
    catalog = Catalog(project="kopek", fuzzy=False, creation_date=_CREATED)
    for folder in SOURCE_DIRS:
        found = extract_from_dir(
            str(root / folder), method_map=[("**.py", "python")], keywords={"_": None, "N_": None}
        )
        for filename, lineno, message, comments, _context in found:
            flags = ("python-brace-format",) if placeholders(str(message)) else ()
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
        with po_path.open("wb") as fp:
            write_po(fp, catalog, width=100, sort_output=True, no_location=True)
        updated.append(po_path)
    return updated


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
