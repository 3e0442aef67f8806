"""The gettext catalogues are whole: every text the code can say (each ``_()`` msgid of
``bot/`` and ``scheduler/``) is in ``messages.pot`` and translated in every locale of
:data:`bot.text.i18n.SUPPORTED_LANGUAGES`, with the same ``{placeholders}``; nothing
stale is left; and every language the bot offers has a catalogue."""

from __future__ import annotations

import pytest
from babel.messages.catalog import Catalog
from babel.messages.pofile import read_po

from bot.text.catalogues import POT_PATH, extract, placeholders
from bot.text.i18n import LOCALES_DIR, SUPPORTED_LANGUAGES

TRANSLATED = [lang for lang in SUPPORTED_LANGUAGES if lang != "en"]


def _read(path: object, locale: str | None = None) -> Catalog:
    with open(str(path), "rb") as fp:
        return read_po(fp, locale=locale)


@pytest.fixture(scope="module")
def code_ids() -> set[str]:
    """Every msgid the code uses."""
    return {str(m.id) for m in extract() if m.id}


def test_the_template_is_what_the_code_says(code_ids: set[str]) -> None:
    """``make locales`` was run after the last text change: the .pot has exactly the
    code's msgids."""
    pot = {str(m.id) for m in _read(POT_PATH) if m.id}
    assert sorted(code_ids - pot) == [], "run make locales"
    assert sorted(pot - code_ids) == [], "run make locales"


@pytest.mark.parametrize("language", TRANSLATED)
def test_every_msgid_is_translated_with_the_same_placeholders(
    language: str, code_ids: set[str]
) -> None:
    """Each msgid of the code has a non-empty, non-fuzzy translation whose ``{fields}``
    are the msgid's (a missing or renamed field would raise or show a raw brace)."""
    catalog = _read(LOCALES_DIR / language / "LC_MESSAGES/messages.po", language)
    missing, empty, fuzzy, wrong = [], [], [], []
    for msgid in sorted(code_ids):
        message = catalog.get(msgid)
        if message is None:
            missing.append(msgid)
        elif not message.string:
            empty.append(msgid)
        elif message.fuzzy:
            fuzzy.append(msgid)
        elif placeholders(str(message.string)) != placeholders(msgid):
            wrong.append((msgid, message.string))
    assert (missing, empty, fuzzy, wrong) == ([], [], [], [])
    stale = sorted(str(m.id) for m in catalog if m.id and str(m.id) not in code_ids)
    assert stale == []


def test_every_offered_language_has_a_catalogue() -> None:
    """/lang offers exactly the languages that have a catalogue (and English)."""
    found = sorted(p.parent.parent.name for p in LOCALES_DIR.glob("*/LC_MESSAGES/messages.po"))
    assert sorted(TRANSLATED) == found


def test_digests_know_the_same_languages() -> None:
    """Profiles (``scheduler.profiles.LANGUAGES``) and digest summaries take exactly the
    languages the bot translates."""
    from scheduler.profiles import LANGUAGES

    assert set(SUPPORTED_LANGUAGES) == LANGUAGES
