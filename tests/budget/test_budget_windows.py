"""Window math in BUDGET_TZ: DST days, half-hour zones, the worked timeline."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from budget.policy.windows import day_bounds, hour_bounds, resets_at, window_keys
from budget.types import Window


def test_berlin_spring_day_has_23_hours() -> None:
    """2026-03-29 in Berlin runs 23:00Z → 22:00Z (clocks jump 02:00 → 03:00)."""
    key, start, end = day_bounds(datetime(2026, 3, 29, 12, tzinfo=UTC), "Europe/Berlin")
    assert key == "2026-03-29"
    assert start == datetime(2026, 3, 28, 23, tzinfo=UTC)
    assert end == datetime(2026, 3, 29, 22, tzinfo=UTC)
    assert end - start == timedelta(hours=23)


def test_berlin_autumn_day_has_25_hours_and_two_0200_hours() -> None:
    """2026-10-25 in Berlin lasts 25 hours; the repeated 02:00 hour gets two keys."""
    key, start, end = day_bounds(datetime(2026, 10, 25, 12, tzinfo=UTC), "Europe/Berlin")
    assert (key, end - start) == ("2026-10-25", timedelta(hours=25))
    first = hour_bounds(datetime(2026, 10, 25, 0, 30, tzinfo=UTC), "Europe/Berlin")
    second = hour_bounds(datetime(2026, 10, 25, 1, 30, tzinfo=UTC), "Europe/Berlin")
    assert first[0] == "2026-10-25T00:00Z" and second[0] == "2026-10-25T01:00Z"
    assert first[2] == second[1]


def test_berlin_spring_hour_after_the_gap() -> None:
    """At 01:30 CET the hour resets at 03:00 CEST = 01:00Z, one real hour later."""
    _, start, end = hour_bounds(datetime(2026, 3, 29, 0, 30, tzinfo=UTC), "Europe/Berlin")
    assert (start, end) == (
        datetime(2026, 3, 29, 0, tzinfo=UTC),
        datetime(2026, 3, 29, 1, tzinfo=UTC),
    )


def test_half_hour_offset_zone() -> None:
    """Kolkata (+05:30): 10:17 local is in the hour 04:30Z–05:30Z."""
    key, start, end = hour_bounds(datetime(2026, 1, 14, 4, 47, tzinfo=UTC), "Asia/Kolkata")
    assert key == "2026-01-14T04:30Z"
    assert end - start == timedelta(hours=1)


def test_worked_timeline_day_of_a_late_settle() -> None:
    """23:59:58 Berlin belongs to the 14th; 00:00:03 to the 15th; reset at local midnight."""
    start = window_keys(datetime(2026, 1, 14, 22, 59, 58, tzinfo=UTC), "Europe/Berlin")
    after = window_keys(datetime(2026, 1, 14, 23, 0, 3, tzinfo=UTC), "Europe/Berlin")
    assert (start.day_key, after.day_key) == ("2026-01-14", "2026-01-15")
    assert start.day_resets_at == datetime(2026, 1, 14, 23, tzinfo=UTC)
    assert resets_at(
        Window.HOUR, datetime(2026, 1, 14, 22, 59, 58, tzinfo=UTC), "Europe/Berlin"
    ) == (datetime(2026, 1, 14, 23, tzinfo=UTC))


def test_midnight_skipped_by_dst() -> None:
    """Santiago skips 00:00 on its spring change: the day starts at the first real instant."""
    key, start, end = day_bounds(datetime(2026, 9, 6, 12, tzinfo=UTC), "America/Santiago")
    assert key == "2026-09-06"
    assert end - start == timedelta(hours=23)


def test_naive_datetime_is_rejected() -> None:
    """Window math needs aware datetimes."""
    with pytest.raises(ValueError, match="aware"):
        window_keys(datetime(2026, 1, 1), "UTC")  # noqa: DTZ001 - the point of the test
    with pytest.raises(ValueError):
        window_keys(datetime(2026, 1, 1, tzinfo=UTC), "UTC").key(Window.MINUTE)
