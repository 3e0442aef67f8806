"""Window math in BUDGET_TZ: DST days, half-hour zones, the worked timeline."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from budget.policy.windows import day_bounds, hour_bounds, month_bounds, resets_at, window_keys
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


def test_berlin_march_is_743_hours_and_ends_at_local_midnight() -> None:
    """Calendar months in Berlin: March 2026 (spring DST) runs 28 Feb 23:00Z .. 31 Mar
    22:00Z, 743 hours; October 745; the second after 23:59:59 CEST is April."""
    key, start, end = month_bounds(datetime(2026, 3, 15, tzinfo=UTC), "Europe/Berlin")
    assert (key, start, end) == (
        "2026-03",
        datetime(2026, 2, 28, 23, tzinfo=UTC),
        datetime(2026, 3, 31, 22, tzinfo=UTC),
    )
    assert end - start == timedelta(hours=743)
    _, o_start, o_end = month_bounds(datetime(2026, 10, 15, tzinfo=UTC), "Europe/Berlin")
    assert o_end - o_start == timedelta(hours=745)
    last = window_keys(datetime(2026, 3, 31, 21, 59, 59, tzinfo=UTC), "Europe/Berlin")
    first = window_keys(datetime(2026, 3, 31, 22, tzinfo=UTC), "Europe/Berlin")
    assert (last.month_key, first.month_key) == ("2026-03", "2026-04")
    assert last.month_resets_at == datetime(2026, 3, 31, 22, tzinfo=UTC)
    assert resets_at(Window.MONTH, datetime(2026, 3, 31, 21, tzinfo=UTC), "Europe/Berlin") == (
        datetime(2026, 3, 31, 22, tzinfo=UTC)
    )


def test_the_year_turns_with_december() -> None:
    """The local date decides the month: 2026-12-31T14:30Z is 23:30 in Tokyo, month
    2026-12; 15:00Z is midnight there, month 2027-01."""
    assert month_bounds(datetime(2026, 12, 31, 14, 30, tzinfo=UTC), "Asia/Tokyo")[0] == "2026-12"
    key, start, _ = month_bounds(datetime(2026, 12, 31, 15, tzinfo=UTC), "Asia/Tokyo")
    assert (key, start) == ("2027-01", datetime(2026, 12, 31, 15, tzinfo=UTC))


def test_a_billing_cycle_day_and_a_day_the_month_lacks() -> None:
    """Start day 15: 14 March is in the cycle from 15 February, 15 March opens a new one;
    start day 31: February's cycle starts on the 28th (29th in a leap year), and a
    cycle starting 31 January ends on 28 February."""
    assert month_bounds(datetime(2026, 3, 14, 12, tzinfo=UTC), "UTC", 15)[0] == "2026-02-15"
    assert month_bounds(datetime(2026, 3, 15, 0, tzinfo=UTC), "UTC", 15)[0] == "2026-03-15"
    key, start, end = month_bounds(datetime(2026, 2, 10, tzinfo=UTC), "UTC", 31)
    assert (key, start, end) == (
        "2026-01-31",
        datetime(2026, 1, 31, tzinfo=UTC),
        datetime(2026, 2, 28, tzinfo=UTC),
    )
    assert month_bounds(datetime(2028, 2, 29, 1, tzinfo=UTC), "UTC", 31)[0] == "2028-02-29"
    assert month_bounds(datetime(2026, 1, 5, tzinfo=UTC), "UTC", 10)[0] == "2025-12-10"
    with pytest.raises(ValueError, match=r"1\.\.31"):
        month_bounds(datetime(2026, 1, 5, tzinfo=UTC), "UTC", 0)
