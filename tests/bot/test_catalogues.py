"""The gettext catalogues are whole: every text the code can say (each ``_()`` msgid of
``bot/`` and ``scheduler/``, and each ``ngettext`` msgid with its plural) is in
``messages.pot`` and translated in every locale of
:data:`bot.text.i18n.SUPPORTED_LANGUAGES`, with the same ``{placeholders}`` (every plural
form of a language filled); nothing stale is left; and every language the bot offers has
a catalogue."""

from __future__ import annotations

import re

import pytest
from aiogram.utils.i18n import I18n
from babel.messages.catalog import Catalog
from babel.messages.pofile import read_po

from bot.text.catalogues import PLURAL_FORMS, POT_PATH, extract, placeholders
from bot.text.i18n import LOCALES_DIR, SUPPORTED_LANGUAGES, create_i18n

TRANSLATED = [lang for lang in SUPPORTED_LANGUAGES if lang != "en"]


def _read(path: object, locale: str | None = None) -> Catalog:
    with open(str(path), "rb") as fp:
        return read_po(fp, locale=locale)


@pytest.fixture(scope="module")
def code_ids() -> set[str]:
    """Every msgid the code uses (a plural message's by its singular)."""
    return {_singular(m.id) for m in extract() if m.id}


@pytest.fixture(scope="module")
def plural_ids() -> dict[str, str]:
    """Every ``ngettext`` msgid of the code: singular → plural."""
    return {m.id[0]: m.id[1] for m in extract() if isinstance(m.id, tuple)}


def _forms(strings: object) -> tuple[str, ...]:
    """A plural message's ``msgstr[n]`` (Babel reads them as a tuple)."""
    assert isinstance(strings, tuple)
    return tuple(str(form) for form in strings)


def _singular(msgid: object) -> str:
    return str(msgid[0]) if isinstance(msgid, tuple | list) else str(msgid)


def test_the_template_is_what_the_code_says(code_ids: set[str]) -> None:
    """``make locales`` was run after the last text change: the .pot has exactly the
    code's msgids."""
    pot = {_singular(m.id) for m in _read(POT_PATH) if m.id}
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
        elif message.pluralizable:
            continue  # each form: the test below
        elif placeholders(str(message.string)) != placeholders(msgid):
            wrong.append((msgid, message.string))
    assert (missing, empty, fuzzy, wrong) == ([], [], [], [])
    stale = sorted(_singular(m.id) for m in catalog if m.id and _singular(m.id) not in code_ids)
    assert stale == []


@pytest.mark.parametrize("language", TRANSLATED)
def test_every_plural_msgid_has_each_form_of_the_language_filled(
    language: str, plural_ids: dict[str, str]
) -> None:
    """The header's ``Plural-Forms`` is the language's (ru/uk 3 forms, de/es/pt 2, zh 1),
    and each ``ngettext`` msgid has exactly that many ``msgstr[n]``, none empty, each with
    the msgid's ``{fields}`` (which its singular and plural share)."""
    catalog = _read(LOCALES_DIR / language / "LC_MESSAGES/messages.po", language)
    count, expr = PLURAL_FORMS[language]
    assert (catalog.num_plurals, catalog.plural_expr) == (count, expr)
    assert {"ru": 3, "uk": 3, "de": 2, "es": 2, "pt": 2, "zh": 1}[language] == count
    assert len(plural_ids) >= 20
    bad = []
    for singular, plural in sorted(plural_ids.items()):
        assert placeholders(singular) == placeholders(plural), singular
        message = catalog.get(singular)
        assert message is not None and message.pluralizable, singular
        forms = _forms(message.string)
        same = all(placeholders(form) == placeholders(singular) for form in forms)
        if len(forms) != count or not all(forms) or message.fuzzy or not same:
            bad.append((singular, forms))
    assert bad == []


#: The form ``n`` takes in each language: ru/uk one (1, 21), few (2-4, 22), many (5-20, 0,
#: 11-14); de/es one only for 1; pt (Brazil) one for 0 and 1; zh a single form.
FORM_OF = {
    "ru": {1: 0, 2: 1, 4: 1, 5: 2, 11: 2, 12: 2, 14: 2, 21: 0, 22: 1, 25: 2, 0: 2, 111: 2},
    "uk": {1: 0, 3: 1, 5: 2, 11: 2, 21: 0, 24: 1, 0: 2},
    "de": {0: 1, 1: 0, 2: 1, 21: 1},
    "es": {0: 1, 1: 0, 2: 1},
    "pt": {0: 0, 1: 0, 2: 1},
    "zh": {0: 0, 1: 0, 5: 0},
}


@pytest.mark.parametrize("language", TRANSLATED)
def test_the_compiled_catalogue_picks_the_right_form(
    language: str, plural_ids: dict[str, str]
) -> None:
    """Through aiogram's I18n (the ``.mo`` the bot loads), ``ngettext`` gives the form the
    language's rule picks for each count: a header typo would pass the .po test."""
    i18n: I18n = create_i18n()
    catalog = _read(LOCALES_DIR / language / "LC_MESSAGES/messages.po", language)
    singular = "This photo is up to {tokens} token"
    forms = _forms(catalog[singular].string)
    for n, form in FORM_OF[language].items():
        said = i18n.gettext(singular, plural_ids[singular], n=n, locale=language)
        assert said == forms[form], (language, n)


#: A count followed by the noun it counts, in a msgid that is not an ``ngettext`` one.
COUNTED = re.compile(
    r"\{\w+\} (?:(?!per )\w+ )?(?:tokens?|characters?|days?|hours?|minutes?|seconds?|calls?|pages?|"
    r"posts?|turns?|subscriptions?|messages?|requests?|channels?|uses?|stars?|bytes?)\b"
)


def test_no_plain_msgid_counts_a_noun(plural_ids: dict[str, str]) -> None:
    """A count beside the noun it counts goes through ``ngettext`` (Russian says "1 токен",
    "2 токена", "5 токенов"): no ``_()`` msgid has one."""
    plain = [m.id for m in extract() if m.id and not isinstance(m.id, tuple)]
    assert [msgid for msgid in plain if COUNTED.search(str(msgid))] == []
    # and the pattern knows each counted noun (a star's verb agrees with its count too)
    assert all(COUNTED.search(plural) or "⭐ were" in plural for plural in plural_ids.values())


def test_every_offered_language_has_a_catalogue() -> None:
    """/lang offers exactly the languages that have a catalogue (and English)."""
    found = sorted(p.parent.parent.name for p in LOCALES_DIR.glob("*/LC_MESSAGES/messages.po"))
    assert sorted(TRANSLATED) == found


def test_digests_know_the_same_languages() -> None:
    """Profiles (``scheduler.profiles.LANGUAGES``) and digest summaries take exactly the
    languages the bot translates."""
    from scheduler.profiles import LANGUAGES

    assert set(SUPPORTED_LANGUAGES) == LANGUAGES
