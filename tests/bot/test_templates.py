"""Refusal templates: every reason, both languages, the words the issue asks for."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from aiogram.utils.i18n import I18n

from bot.handlers.me import render_me
from bot.media.refusals import MediaProblem, MediaRefusal
from bot.media.types import Refusal as ExtractionRefusal
from bot.text import media as media_texts
from bot.text import templates
from bot.text.i18n import LOCALES_DIR, compile_catalogue, create_i18n, pick_language
from budget.status import BucketStatus, UserStatus
from budget.types import Level, Refusal, RefusalReason, Window

RESET = datetime(2026, 3, 1, 21, 0, tzinfo=UTC)


@pytest.fixture
def i18n() -> Iterator[I18n]:
    """aiogram I18n over the committed catalogues, as the bot uses it."""
    i18n = create_i18n()
    with i18n.context():
        yield i18n


@pytest.mark.parametrize(
    ("level", "word"),
    [(Level.USER, "daily user limit"), (Level.TEAM, "team"), (Level.GLOBAL, "global")],
)
def test_limit_refusal_names_level_window_and_reset_in_user_tz(
    i18n: I18n, level: Level, word: str
) -> None:
    """A limit refusal says which level, which window, and HH:MM Zone of the reset."""
    refusal = Refusal(RefusalReason.LIMIT, level, Window.DAY, RESET, scope="core")
    with i18n.use_locale("en"):
        text = templates.refusal_text(refusal, tz="Europe/Moscow")
    assert word in text
    assert "daily" in text
    assert "resets at 00:00 Europe/Moscow" in text


def test_user_limit_tells_what_to_do_and_running_request_is_mentioned(i18n: I18n) -> None:
    """User level: wait for the reset or ask an admin (the user may be in no team); a
    running request will finish."""
    refusal = Refusal(RefusalReason.LIMIT, Level.USER, Window.HOUR, RESET)
    with i18n.use_locale("en"):
        text = templates.refusal_text(refusal, tz="UTC", running=True)
    assert "hourly" in text and "ask an admin to raise it" in text
    assert "still be answered" in text


def test_kill_and_busy_are_distinct_from_exhausted(i18n: I18n) -> None:
    """Kill says paused; busy says retry in a minute and not 'Limit reached'."""
    with i18n.use_locale("en"):
        kill = templates.refusal_text(Refusal(RefusalReason.KILL), tz="UTC")
        busy = templates.refusal_text(
            Refusal(RefusalReason.BUSY, Level.GLOBAL, Window.HOUR, RESET, busy=True), tz="UTC"
        )
    assert "paused" in kill
    assert "retry in a minute" in busy and "Limit reached" not in busy


@pytest.mark.parametrize("reason", list(RefusalReason))
@pytest.mark.parametrize("language", ["en", "ru"])
def test_every_reason_has_a_distinct_translated_template(
    i18n: I18n, reason: RefusalReason, language: str
) -> None:
    """Each refusal reason renders in both languages; Russian is really Russian."""
    refusal = Refusal(reason, Level.GLOBAL, Window.DAY, RESET)
    with i18n.use_locale(language):
        text = templates.refusal_text(refusal, tz="UTC")
    assert text.strip()
    if language == "ru":
        assert any("а" <= ch <= "я" for ch in text.lower()), text


def test_templates_differ_per_reason(i18n: I18n) -> None:
    """No two reasons share a text (a user can tell what stopped them)."""
    with i18n.use_locale("en"):
        texts = {
            templates.refusal_text(Refusal(r, Level.GLOBAL, Window.DAY, RESET), tz="UTC")
            for r in RefusalReason
        }
    assert len(texts) == len(RefusalReason)


def test_committed_mo_catalogues_match_their_po() -> None:
    """``make locales`` was run after the last .po edit (the bot loads the .mo)."""
    for po in LOCALES_DIR.glob("*/LC_MESSAGES/messages.po"):
        assert po.with_suffix(".mo").read_bytes() == compile_catalogue(po), po


def test_every_msgid_is_translated_to_russian() -> None:
    """The Russian catalogue has no empty translation."""
    from babel.messages.pofile import read_po

    with (LOCALES_DIR / "ru/LC_MESSAGES/messages.po").open("rb") as fp:
        catalog = read_po(fp)
    empty = [m.id for m in catalog if m.id and not m.string]
    assert empty == []


@pytest.mark.parametrize(
    ("stored", "code", "expected"),
    [
        (None, "ru", "ru"),
        (None, "ru-RU", "ru"),
        (None, "de", "de"),
        (None, "pt-br", "pt"),
        (None, "zh-hans", "zh"),
        (None, "fr", "en"),
        ("en", "ru", "en"),
        (None, None, "en"),
    ],
)
def test_pick_language(stored: str | None, code: str | None, expected: str) -> None:
    """/lang wins; else Telegram's language_code when supported (pt-br → pt); else English."""
    assert pick_language(stored, code) == expected


def test_me_names_the_user_level_as_admins_do(i18n: I18n) -> None:
    """/me calls the per-user level "user" (as /limit user and /budget user do), never
    "personal"; in Russian "пользовательский"."""
    bucket = BucketStatus(Level.USER, "7", Window.HOUR, "k", None, 0, 0, 0, None, RESET)
    status = UserStatus(7, None, [bucket], 0, 0, 0, None, None, 0)
    with i18n.use_locale("en"):
        en = render_me(status, "UTC")
    with i18n.use_locale("ru"):
        ru = render_me(status, "UTC")
    assert "• user, this hour: spent $0.000000 (no limit)" in en
    assert "• пользовательский, за этот час:" in ru
    assert "personal" not in en and "личный" not in ru


def test_a_limit_with_money_left_says_the_worst_case_does_not_fit(i18n: I18n) -> None:
    """$0.000020 left of a user's day and an answer that may cost $0.000460: not
    "limit reached" but both amounts; with nothing left, "Limit reached"."""

    def refusal(left: int) -> Refusal:
        return Refusal(
            RefusalReason.LIMIT,
            Level.USER,
            Window.DAY,
            datetime(2026, 3, 2, tzinfo=UTC),
            ceiling_musd=460,
            remaining_musd=left,
        )

    with i18n.use_locale("en"):
        short = templates.refusal_text(refusal(20), tz="UTC")
        spent = templates.refusal_text(refusal(0), tz="UTC")
    assert short.startswith("🚫 Not enough is left of your daily user limit. An answer may")
    assert "up to $0.000460" in short and "$0.000020 is left" in short and "00:00 UTC" in short
    assert spent.startswith("🚫 Your daily user limit is reached. It resets at 00:00 UTC.")


@pytest.mark.parametrize(
    ("step", "english", "russian"),
    [
        ("answer", "An answer may cost up to $0.000460", "Ответ может стоить до $0.000460"),
        (
            "transcription",
            "Transcribing this recording may cost up to $0.000460",
            "Расшифровка этой записи может стоить до $0.000460",
        ),
        (
            "photo",
            "An answer about this image may cost up to $0.000460",
            "Ответ об этом изображении может стоить до $0.000460",
        ),
        (
            "document",
            "An answer about this document may cost up to $0.000460",
            "Ответ об этом документе может стоить до $0.000460",
        ),
        (
            "link",
            "An answer about this page may cost up to $0.000460",
            "Ответ об этой странице может стоить до $0.000460",
        ),
    ],
)
def test_a_limits_worst_case_names_the_step_it_was_for(
    i18n: I18n, step: str, english: str, russian: str
) -> None:
    """A media step's refusal says what its worst case is for: a transcription's is not
    an answer's."""
    refusal = Refusal(
        RefusalReason.LIMIT, Level.USER, Window.DAY, RESET, ceiling_musd=460, remaining_musd=20
    )
    with i18n.use_locale("en"):
        text = templates.refusal_text(refusal, tz="UTC", step=step)
    assert f"daily user limit. {english}, and $0.000020 is left." in text
    with i18n.use_locale("ru"):
        text = templates.refusal_text(refusal, tz="UTC", step=step)
    assert f"лимита. {russian}, а осталось $0.000020." in text


def _every_media_refusal() -> list[MediaRefusal]:
    """One refusal of each problem, each extraction reason, and a cooling provider."""
    reset = {MediaProblem.NO_SPEECH: RESET, MediaProblem.NO_VISION: RESET}
    refusals = [
        MediaRefusal(p, 10, 20, named="PDF", resets_at=reset.get(p))
        for p in MediaProblem
        if p is not MediaProblem.EXTRACTION
    ]
    refusals += [MediaRefusal(p) for p in (MediaProblem.NO_SPEECH, MediaProblem.NO_VISION)]
    return refusals + [
        MediaRefusal(MediaProblem.EXTRACTION, 10, 20, extraction=r) for r in ExtractionRefusal
    ]


@pytest.mark.parametrize("language", ["en", "ru", "de", "es", "pt", "uk", "zh"])
def test_every_media_refusal_says_nothing_was_charged_but_nothing_heard(
    i18n: I18n, language: str
) -> None:
    """Every media refusal costs nothing and ends saying so, in every language; "nothing
    heard" follows a paid transcription and says nothing about money."""
    with i18n.use_locale(language):
        nothing = i18n.gettext("Nothing was charged.")
        assert nothing in media_texts.cancelled_text()  # the same words as elsewhere
        for refusal in _every_media_refusal():
            text = media_texts.media_refusal_text(refusal, tz="UTC")
            if refusal.problem is MediaProblem.NOTHING_HEARD:
                assert nothing not in text
            else:
                assert text.endswith(nothing), (refusal, text)


@pytest.mark.parametrize(
    ("level", "window", "words"),
    [
        ("user", "day", "your limit today"),
        ("user", "month", "your limit this month"),
        ("plan", "month", "your plan's limit this month"),
        ("plan", "hour", "your plan's limit this hour"),
        ("team", "day", "your team's limit today"),
        ("global", "month", "the bot's limit this month"),
    ],
)
def test_a_price_question_names_the_window_that_is_tightest(
    i18n: I18n, level: str, window: str, words: str
) -> None:
    """The price question names the level and window it compares with, the monthly and
    plan windows included (not a bare "your limit")."""
    with i18n.use_locale("en"):
        assert media_texts.window_words(level, window) == words
        text = media_texts.confirm_text("This PDF is about 900 tokens", 2_000, 1_000, words)
    assert f", more than the $0.0010 left of {words}. Go ahead?" in text, text
