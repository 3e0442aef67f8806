"""bot.chat.notices.RateNotices: one rate refusal told per user per window, on the
injected clock, in bounded memory (docs/decisions/305-one-rate-refusal-per-window.md)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from bot.chat.notices import RateNotices
from tests.support.clocks import ManualClock

START = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)


def test_a_refusal_is_told_once_until_it_resets_then_again() -> None:
    """The module's timeline: told at 12:00:05 (holding until 12:01:00), silent at
    12:00:20 and 12:00:40, told again at 12:01:10; another user is told on his own."""
    clock = ManualClock(START)
    notices = RateNotices(clock)
    clock.advance(5)
    assert notices.first(7, START + timedelta(seconds=60))
    for at in (20, 40):
        clock.set(START + timedelta(seconds=at))
        assert not notices.first(7, START + timedelta(seconds=60))
    assert notices.first(8, START + timedelta(seconds=60))
    clock.set(START + timedelta(seconds=70))
    assert notices.first(7, START + timedelta(seconds=120))
    assert not notices.first(7, START + timedelta(seconds=120))


def test_an_unknown_reset_is_always_told_and_memory_stays_bounded() -> None:
    """``resets_at=None`` is told every time and remembered not at all; past the bound
    the user told longest ago is forgotten first (told again at his next refusal)."""
    clock = ManualClock(START)
    notices = RateNotices(clock, max_tracked=2)
    assert notices.first(1, None) and notices.first(1, None)
    until = START + timedelta(seconds=60)
    assert notices.first(1, until) and notices.first(2, until) and notices.first(3, until)
    assert repr(notices) == "RateNotices(tracked=2)"
    assert notices.first(1, until), "the oldest was forgotten"
    assert not notices.first(3, until)
