"""Telegram's text rules as the fake Bot API applies them (no server involved).

Expected errors and results for HTML and MarkdownV2 are tdlib's own test vectors
(tdlib/td ``test/message_entities.cpp``), so the fake answers like Telegram.
"""

from __future__ import annotations

import pytest

from tests.support.telegram import (
    Entity,
    EntityParseError,
    parse_entities_list,
    parse_text,
    utf16_len,
)


def spans(entities: tuple[Entity, ...]) -> list[tuple[str, int, int]]:
    """(type, offset, length) of each entity."""
    return [(e.type, e.offset, e.length) for e in entities]


def test_utf16_length_counts_astral_characters_twice() -> None:
    """An emoji outside the BMP is 2 UTF-16 units; Cyrillic and ASCII are 1."""
    assert utf16_len("🏟") == 2
    assert utf16_len("привет") == 6
    assert utf16_len("a🏟b") == 4


def test_entities_list_out_of_range_overlap_and_split_pair() -> None:
    """Strict mode refuses entities past the end, partial overlaps and split emoji."""
    text = "hello 🏟"
    assert spans(parse_entities_list(text, [{"type": "bold", "offset": 0, "length": 8}]).entities)
    with pytest.raises(EntityParseError, match="ends after the end of the text"):
        parse_entities_list(text, [{"type": "bold", "offset": 0, "length": 9}])
    with pytest.raises(EntityParseError, match="splits a surrogate pair"):
        parse_entities_list(text, [{"type": "bold", "offset": 0, "length": 7}])
    with pytest.raises(EntityParseError, match="overlap without nesting"):
        parse_entities_list(
            text,
            [
                {"type": "bold", "offset": 0, "length": 4},
                {"type": "code", "offset": 2, "length": 4},
            ],
        )
    nested = parse_entities_list(
        text,
        [{"type": "bold", "offset": 0, "length": 5}, {"type": "italic", "offset": 1, "length": 2}],
    )
    assert spans(nested.entities) == [("bold", 0, 5), ("italic", 1, 2)]


def test_entities_list_lenient_mode_clips_like_telegram() -> None:
    """With strict=False an overrunning entity is clipped to the text."""
    parsed = parse_entities_list("abc", [{"type": "bold", "offset": 1, "length": 10}], strict=False)
    assert spans(parsed.entities) == [("bold", 1, 2)]


def test_parse_text_trims_whitespace_and_clips_entities() -> None:
    """Leading/trailing whitespace is removed and entities are shifted and clipped."""
    parsed = parse_text(
        "  \U0001f3df hi\n\n", entities=[{"type": "bold", "offset": 1, "length": 6}]
    )
    assert parsed.text == "\U0001f3df hi"
    assert spans(parsed.entities) == [("bold", 0, 5)]
    assert parse_text(" \n ").text == ""


@pytest.mark.parametrize("mode", ["HTML", "MarkdownV2", "Markdown", "rst"])
def test_every_parse_mode_is_refused(mode: str) -> None:
    """The fake emulates no parse mode (Kopek sends entities): each raises ValueError."""
    with pytest.raises(ValueError, match="unsupported parse_mode"):
        parse_text("<b>x</b>", parse_mode=mode)
