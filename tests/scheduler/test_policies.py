"""Pure policies: due instants across DST, pacing decisions."""

from __future__ import annotations

from datetime import UTC, date, datetime, time
from zoneinfo import ZoneInfo

from llm.types import Capacity
from scheduler.due import Due, due_instant, todays_due
from scheduler.timing import decide

BERLIN = ZoneInfo("Europe/Berlin")


def test_due_instant_normal_gap_fold() -> None:
    """Winter 09:00 → 08:00 UTC; spring gap 02:30 → 01:00 UTC; fall fold 02:30 → 00:30 UTC."""
    assert due_instant(date(2026, 1, 5), time(9, 0), BERLIN) == datetime(
        2026, 1, 5, 8, 0, tzinfo=UTC
    )
    assert due_instant(date(2026, 3, 29), time(2, 30), BERLIN) == datetime(
        2026, 3, 29, 1, 0, tzinfo=UTC
    )
    assert due_instant(date(2026, 10, 25), time(2, 30), BERLIN) == datetime(
        2026, 10, 25, 0, 30, tzinfo=UTC
    )


def test_todays_due_uses_local_date() -> None:
    """23:30 UTC is already the next local day in Berlin; not due before the local time."""
    now = datetime(2026, 1, 5, 23, 30, tzinfo=UTC)
    assert todays_due(now, time(0, 15), BERLIN) == Due(
        date(2026, 1, 6),
        datetime(2026, 1, 5, 23, 15, tzinfo=UTC),
    )
    assert todays_due(now, time(9, 0), BERLIN) is None


def test_pacing_share_wait_and_paid() -> None:
    """Fits within share → send free; not → wait for the earliest reset; past deadline → paid."""
    caps = [
        Capacity("groq", True, 1100, 1020.0, False),
        Capacity("cerebras", True, 0, 1045.0, False),
        Capacity("mistral", False, None, 1300.0, False),
        Capacity("deepseek", True, None, None, True),
    ]
    d = decide(caps, 800, share=0.8, now_mono=1000.0, seconds_to_deadline=600)
    assert d.send and not d.allow_paid and d.provider == "groq"
    d = decide(caps, 1000, share=0.8, now_mono=1000.0, seconds_to_deadline=600)
    assert not d.send and d.wait_s == 20.0
    d = decide(caps, 1000, share=0.8, now_mono=1000.0, seconds_to_deadline=10)
    assert d.send and d.allow_paid
    d = decide(caps, 1000, share=0.8, now_mono=1021.0, seconds_to_deadline=600)
    assert d.send and d.provider == "groq", "a reading older than its reset is stale"
