"""The one "safe to show" policy (``budget/kernel/shown.py``,
``docs/decisions/294-one-policy-for-text-shown-back.md``): one notation, ``<U+XXXX>``,
and two strictnesses — prose keeps its tabs, line breaks and format characters, a
quoted value keeps none."""

from __future__ import annotations

import pytest

from budget.kernel.shown import (
    ECHO_LIMIT,
    echoed,
    escape,
    scrubbed,
    shown_safely,
    unsafe_in_prose,
    unsafe_in_value,
)


@pytest.mark.parametrize(
    ("char", "written"),
    [("\x00", "<U+0000>"), ("\u202e", "<U+202E>"), ("\U000e0001", "<U+E0001>")],
)
def test_one_notation_below_and_above_u0100_and_beyond_the_bmp(char: str, written: str) -> None:
    """Upper-case hex, four digits or more, the same shape at every code point."""
    assert escape(char) == written


def test_prose_keeps_what_text_needs_and_escapes_what_reorders_or_cannot_be_sent() -> None:
    """Tab, line breaks, LRM, the emoji joiner and the soft hyphen stay; BEL, the bidi
    override and isolate, and a lone surrogate are written ``<U+XXXX>``."""
    family = "\U0001f468\u200d\U0001f469"
    text = f"a\u202eb\x07c\td\r\ne\u2067f\u200eg{family}\u00adh\ud800"
    assert shown_safely(text) == (
        f"a<U+202E>b<U+0007>c\td\r\ne<U+2067>f\u200eg{family}\u00adh<U+D800>"
    )
    assert [c for c in text if unsafe_in_prose(c)] == ["\u202e", "\x07", "\u2067", "\ud800"]


def test_a_quoted_value_shows_every_character_that_draws_nothing_or_moves_text() -> None:
    """In a value every control (tab and line breaks too), format character (LRM,
    zero-width, soft hyphen), line or paragraph separator, private-use character and
    surrogate is written out; letters, emoji and CJK are not."""
    unsafe = "\t\n\x00\u200e\u200b\u200d\u00ad\u2028\u2029\ue000\ud800"
    assert all(unsafe_in_value(c) for c in unsafe)
    assert not any(unsafe_in_value(c) for c in "aé😀日本 -_.")
    assert echoed("plan\u200b") == "plan<U+200B>"
    assert echoed("two\nlines") == "two<U+000A>lines"


def test_an_echoed_value_is_cut_after_escaping_and_says_so() -> None:
    """The cut counts the written escapes; ``…`` ends a cut value; a short one is whole."""
    long = "\u202e" + "x" * 100
    shown = echoed(long)
    assert len(shown) == ECHO_LIMIT and shown.startswith("<U+202E>x") and shown.endswith("…")
    assert echoed("x" * ECHO_LIMIT) == "x" * ECHO_LIMIT
    assert echoed("abcdef", limit=4) == "abc…"


def test_a_scrubbed_reply_keeps_its_line_breaks_only() -> None:
    """Every line's unsafe characters are written out, its line breaks kept; ``limit``
    cuts the whole with ``…``, and ``None`` leaves it whole."""
    report = "model m\u202ex: 3 rows\nline 2\trepeats"
    assert scrubbed(report) == "model m<U+202E>x: 3 rows\nline 2<U+0009>repeats"
    assert scrubbed(report, limit=16) == "model m<U+202E>…"
