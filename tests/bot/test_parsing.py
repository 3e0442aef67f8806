"""Pure parts of the bot: Markdown delivery, admin argument parsing, small helpers."""

from __future__ import annotations

import pytest

from bot.chat.delivery import TELEGRAM_TEXT_LIMIT, protect_angle_brackets, split_markdown
from bot.handlers.admin.base import TEAM_NAME_RULE, parse_user_id, valid_team_name
from bot.handlers.admin.digest_now import describe_status, describe_step
from bot.handlers.admin.limits import AMOUNT_RULE, LimitChange, parse_limit
from bot.handlers.common import canonical_zone
from budget.types import Level, RefusalReason, Window
from llm.sanitize import has_visible
from scheduler.tables import RunStatus
from scheduler.types import ProgressStep, Step


def _utf16(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


def test_text_that_looks_like_html_is_kept() -> None:
    """``Vec<String>``, ``<div>`` and ``a<b and b>c`` survive; code keeps its ``<``."""
    [(text, _)] = split_markdown("Use Vec<String> and the <div> tag; if a<b and b>c, `x<y>`")
    assert text == "Use Vec<String> and the <div> tag; if a<b and b>c, x<y>"


def test_angle_brackets_in_fenced_code_are_untouched() -> None:
    """Escaping stops at code fences and inline code spans."""
    md = "```\nif a<b:\n```\nand `<b>` but <b>"
    assert protect_angle_brackets(md) == "```\nif a<b:\n```\nand `<b>` but \\<b>"


def test_only_http_links_stay_clickable() -> None:
    """javascript:, file: and tg: links keep their text and lose the link."""
    md = "[a](javascript:alert(1)) [b](file:///etc/passwd) [c](tg://resolve?domain=x) [d](https://ok.example)"
    [(text, entities)] = split_markdown(md)
    assert text == "a b c d"
    assert [(e.type, e.url) for e in entities] == [("text_link", "https://ok.example")]


def test_long_answer_parts_fit_and_surrogates_are_not_split() -> None:
    """A 12,000-unit answer of emoji and code splits into parts within the limit."""
    md = ("😀 " * 1500 + "\n\n") * 2 + "```\n" + "x = 1\n" * 800 + "```\n"
    parts = split_markdown(md)
    assert len(parts) >= 3
    for text, entities in parts:
        assert _utf16(text) <= TELEGRAM_TEXT_LIMIT
        text.encode("utf-8")  # a lone surrogate would raise here
        for e in entities:
            assert e.offset + e.length <= _utf16(text)


def test_a_long_paragraph_is_split_between_words_and_keeps_its_bold() -> None:
    """Text without newlines past the limit is cut at the last space of each part, not
    mid-word; a bold run across the cut is in both parts; no word or letter is lost."""
    words = [f"w{i}ord" for i in range(2400)] + ["слово😀"] * 300
    md = "**" + " ".join(words[:600]) + "** " + " ".join(words[600:])
    parts = split_markdown(md)
    assert len(parts) >= 4
    for text, entities in parts[:-1]:
        assert _utf16(text) <= TELEGRAM_TEXT_LIMIT and text.endswith("\n")
        for e in entities:
            assert e.offset + e.length <= _utf16(text)
    assert " ".join(text.strip() for text, _ in parts).split(" ") == words
    assert parts[0][1][0].type == "bold" and parts[1][1][0].type == "bold"
    assert parts[1][1][0].offset == 0


def test_one_word_longer_than_a_message_is_still_cut_at_the_limit() -> None:
    """A single 9,000-letter word has no space to cut at: the limit cuts it, nothing lost."""
    parts = split_markdown("x" * 9000)
    assert [len(text) for text, _ in parts] == [4096, 4096, 808]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("42", 42),
        ("9223372036854775807", 2**63 - 1),
        ("9223372036854775808", None),
        ("0", None),
        ("-5", None),
        ("4a", None),
        ("٣", None),
        ("", None),
    ],
)
def test_parse_user_id(text: str, expected: int | None) -> None:
    """Only positive ids that fit a signed 64-bit integer (Telegram's user id range)."""
    assert parse_user_id(text) == expected


@pytest.mark.parametrize(
    ("name", "ok"),
    [
        ("core", True),
        ("team_2-x", True),
        ("list", False),
        ("*", False),
        ("a" * 33, False),
        ("dev\u200bs", False),
        ("\u202eevil", False),
        ("", False),
    ],
)
def test_team_names(name: str, ok: bool) -> None:
    """ASCII letters, digits, _ and -, 1-32 characters, never 'list'."""
    assert valid_team_name(name) is ok


def test_parse_limit_values_and_reasons() -> None:
    """Good arguments parse to µUSD; each bad one says what is wrong."""
    assert parse_limit(["global", "hour", "0.5"]) == LimitChange(
        Level.GLOBAL, "", Window.HOUR, 500_000
    )
    assert parse_limit(["user", "42", "day", "off"]) == LimitChange(
        Level.USER, "42", Window.DAY, None
    )
    assert parse_limit(["team", "core", "day", "1"]) == LimitChange(
        Level.TEAM, "core", Window.DAY, 1_000_000
    )
    assert parse_limit(["team", "li st", "day", "1"]) == TEAM_NAME_RULE
    for amount in ("-5", "1e308", "NaN", "99999999999999999999", "0.0000001", "1_000", "lots"):
        assert parse_limit(["global", "day", amount]) == AMOUNT_RULE, amount
    assert "user id" in str(parse_limit(["user", "99999999999999999999999", "day", "1"]))
    assert "window" in str(parse_limit(["global", "week", "1"]))
    assert str(parse_limit([])).startswith("Usage")


def test_digest_progress_steps_read_like_sentences() -> None:
    """Runner steps become readable text; final ones are flagged; every step and every
    run status has a text."""
    assert describe_step(ProgressStep(Step.FETCHED, count=5)) == ("fetched 5 posts", False)
    summarising = ProgressStep(Step.SUMMARISED, count=3, total=20)
    assert describe_step(summarising) == ("summarising 3/20", False)
    assert describe_step(ProgressStep(Step.DELIVERED)) == ("delivered", True)
    deferred = describe_step(ProgressStep(Step.DEFERRED, reason=RefusalReason.LIMIT))
    assert deferred == (
        "postponed by the budget (limit); it will go out when the limit resets",
        True,
    )
    wait = describe_step(ProgressStep(Step.DELIVERY_RETRY, retry_after_s=2.5))
    assert wait == ("Telegram asked to wait 2.5 s before sending", False)
    assert all(describe_step(ProgressStep(step))[0] for step in Step)
    assert describe_status(RunStatus.FAILED_DELIVERY) == "could not be delivered"
    assert all(describe_status(status) for status in RunStatus)


def test_timezone_names_are_matched_without_case() -> None:
    """/tz europe/berlin means Europe/Berlin; junk is not a zone."""
    assert canonical_zone("europe/berlin") == "Europe/Berlin"
    assert canonical_zone("Mars/Base") is None


@pytest.mark.parametrize(
    ("text", "visible"), [("hi", True), ("   ", False), ("\u200b\u200b", False), ("\ufeff x", True)]
)
def test_visible_text(text: str, visible: bool) -> None:
    """Whitespace and zero-width characters alone are not a message."""
    assert has_visible(text) is visible
