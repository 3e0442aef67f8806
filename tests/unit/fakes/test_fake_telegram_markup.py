"""Telegram's text rules as the fake Bot API applies them (no server involved).

Expected errors and results for HTML and MarkdownV2 are tdlib's own test vectors
(tdlib/td ``test/message_entities.cpp``), so the fake answers like Telegram.
"""

from __future__ import annotations

import pytest

from tests.fakes.telegram import (
    Entity,
    EntityParseError,
    parse_entities_list,
    parse_html,
    parse_markdown,
    parse_markdown_v2,
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


def test_entity_offsets_after_surrogate_pairs() -> None:
    """Offsets and lengths are in UTF-16 units after the emoji before them."""
    parsed = parse_html("🏟 🏟<i>🏟 &lt;🏟</i>")
    assert parsed.text == "🏟 🏟🏟 <🏟"
    assert spans(parsed.entities) == [("italic", 5, 6)]


def test_html_entities_and_unknown_named_entities() -> None:
    """The 4 named entities and numeric ones decode; other named ones stay as written."""
    parsed = parse_html("&lt;&gt;&amp;&quot;&#128512;&#x41;&laquo;&nbsp;")
    assert parsed.text == '<>&"😀A&laquo;&nbsp;'


@pytest.mark.parametrize(
    ("html", "message"),
    [
        ("🏟 🏟&lt;<abacaba", "Unclosed start tag at byte offset 13"),
        ("🏟 🏟&lt;<abac aba>", 'Unsupported start tag "abac" at byte offset 13'),
        ("🏟 🏟&lt;<i   =aba>", 'Empty attribute name in the tag "i" at byte offset 13'),
        (
            "🏟 🏟&lt;<i    aba>",
            'Expected equal sign in declaration of an attribute of the tag "i" at byte offset 13',
        ),
        ("🏟 🏟&lt;<i    aba  =  ", 'Unclosed start tag "i" at byte offset 13'),
        ("🏟 🏟&lt;<i    aba  =  190azAz-.,", "Unexpected end of name token at byte offset 27"),
        ('🏟 🏟&lt;<i    aba  =  "&lt;&gt;&quot;>', "Unclosed start tag at byte offset 13"),
        ("🏟 🏟&lt;</", "Unexpected end tag at byte offset 13"),
        ("🏟 🏟&lt;<b></b></", "Unexpected end tag at byte offset 20"),
        ("🏟 🏟&lt;<i>a</i   ", "Unclosed end tag at byte offset 17"),
        (
            "🏟 🏟&lt;<i>a</em   >",
            'Unmatched end tag at byte offset 17, expected "</i>", found "</em>"',
        ),
        ("&#57311;", "Text contains invalid Unicode characters after decoding HTML entities, "
         "check for unmatched surrogate code units"),
        ("<p>hello</p>", 'Unsupported start tag "p" at byte offset 0'),
        ("a < b", 'Unsupported start tag "" at byte offset 2'),
        ("<b>bold", 'Can\'t find end tag corresponding to start tag "b"'),
        ("<span>x</span>", 'Tag "span" must have class "tg-spoiler" at byte offset 0'),
        ("<br/>", 'Unsupported start tag "br/" at byte offset 0'),
    ],
)  # fmt: skip
def test_html_errors_use_telegrams_wording(html: str, message: str) -> None:
    """Malformed HTML is refused with tdlib's message and byte offset."""
    with pytest.raises(EntityParseError) as caught:
        parse_html(html)
    assert caught.value.message == message


def test_html_supported_tags() -> None:
    """Every documented tag maps to its entity; pre+code carries the language."""
    parsed = parse_html(
        "<b>b</b><strong>s</strong><i>i</i><em>e</em><u>u</u><ins>n</ins><s>s</s>"
        '<strike>k</strike><del>d</del><span class="tg-spoiler">p</span>'
        '<tg-spoiler>t</tg-spoiler><a href="https://example.org/x">l</a><code>c</code>'
        '<pre><code class="language-python">x = 1</code></pre>'
        "<blockquote>q</blockquote><blockquote expandable>w</blockquote>"
        '<tg-emoji emoji-id="5368324170671202286">👍</tg-emoji>'
    )
    kinds = [e.type for e in parsed.entities]
    assert kinds == [
        "bold", "bold", "italic", "italic", "underline", "underline", "strikethrough",
        "strikethrough", "strikethrough", "spoiler", "spoiler", "text_link", "code", "pre",
        "blockquote", "expandable_blockquote", "custom_emoji",
    ]  # fmt: skip
    pre = next(e for e in parsed.entities if e.type == "pre")
    assert pre.language == "python"
    link = next(e for e in parsed.entities if e.type == "text_link")
    assert link.url == "https://example.org/x"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("🏟 🏟_abacaba", "Can't find end of Italic entity at byte offset 9"),
        ("🏟 🏟_abac * asd ", "Can't find end of Bold entity at byte offset 15"),
        ("🏟 🏟`", "Can't find end of Code entity at byte offset 9"),
        ("🏟 🏟```", "Can't find end of Pre entity at byte offset 9"),
        ("🏟 🏟```a ", "Can't find end of PreCode entity at byte offset 9"),
        ("🏟 🏟__🏟 _🏟___", "Can't find end of Italic entity at byte offset 23"),
        ("🏟 🏟__", "Can't find end of Underline entity at byte offset 9"),
        ("[telegram\\.org](asd\\)", "Can't find end of a URL at byte offset 16"),
        ("Total: 3.5", "Character '.' is reserved and must be escaped with the preceding '\\'"),
        ("a-b", "Character '-' is reserved and must be escaped with the preceding '\\'"),
        ("(x)", "Character '(' is reserved and must be escaped with the preceding '\\'"),
    ],
)
def test_markdown_v2_errors_use_telegrams_wording(text: str, message: str) -> None:
    """Unescaped reserved characters and unclosed entities are refused like Telegram."""
    with pytest.raises(EntityParseError) as caught:
        parse_markdown_v2(text)
    assert caught.value.message == message


@pytest.mark.parametrize(
    ("text", "plain", "expected"),
    [
        ("🏟 \\.🏟_🏟\\. 🏟_", "🏟 .🏟🏟. 🏟", [("italic", 6, 6)]),
        ("\\\\\\a\\b\\1\\➡️\\", "\\ab1\\➡️\\", []),
        ("🏟 🏟_🏟 __🏟___", "🏟 🏟🏟 🏟", [("italic", 5, 5), ("underline", 8, 2)]),
        ("🏟 🏟```🏟\n🏟```", "🏟 🏟🏟", [("pre", 5, 2)]),
        ("||sp|| ~st~ *b* `c`", "sp st b c", [("spoiler", 0, 2), ("strikethrough", 3, 2),
                                               ("bold", 6, 1), ("code", 8, 1)]),
        ("`a.b-c (x)`", "a.b-c (x)", [("code", 0, 9)]),
        ("[t](https://telegram.dog?)", "t", [("text_link", 0, 1)]),
        (">quote\n>more\nafter", "quote\nmore\nafter", [("blockquote", 0, 10)]),
    ],
)  # fmt: skip
def test_markdown_v2_escapes_and_entities(
    text: str, plain: str, expected: list[tuple[str, int, int]]
) -> None:
    """Escapes give the literal character; entities land on UTF-16 offsets."""
    parsed = parse_markdown_v2(text)
    assert parsed.text == plain
    assert spans(parsed.entities) == expected


def test_markdown_v2_pre_language() -> None:
    """```lang\\n…``` is a pre entity with that language."""
    parsed = parse_markdown_v2("```python\nprint(1)\n```")
    assert parsed.text == "print(1)\n"
    assert parsed.entities == (Entity("pre", 0, 9, language="python"),)


def test_legacy_markdown() -> None:
    """Legacy Markdown parses its four markers and reports unclosed ones by byte offset."""
    parsed = parse_markdown("*b* _i_ `c` [l](http://x.org)")
    assert parsed.text == "b i c l"
    assert [e.type for e in parsed.entities] == ["bold", "italic", "code", "text_link"]
    with pytest.raises(EntityParseError) as caught:
        parse_markdown("🏟 *open")
    assert caught.value.message == "Can't find end of the entity starting at byte offset 5"


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
    """Leading/trailing whitespace is removed and entities are shifted."""
    parsed = parse_text("  <b> hi</b>\n\n", parse_mode="HTML")
    assert parsed.text == "hi"
    assert spans(parsed.entities) == [("bold", 0, 2)]
    assert parse_text(" \n ", parse_mode=None).text == ""


def test_unknown_parse_mode_is_refused() -> None:
    """A parse mode Telegram does not know raises ValueError."""
    with pytest.raises(ValueError, match="unsupported parse_mode"):
        parse_text("x", parse_mode="rst")
