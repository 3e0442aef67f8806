"""The spend picture (the dashboard's main charts and ``/budget chart``): booked attempts
summed into the ledger's local hours and days, money apart from free calls at list
price, per provider key in cascade order; and the PNG drawn from it — money stacked
under the free calls, the limit line drawn only when it can be read beside the bars."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from bot.ops.chart import spend_chart_figure, spend_chart_png
from bot.ops.dashboard.series import (
    DAYS,
    HOURS,
    ProviderSeries,
    SpendPicture,
    SpendSeries,
    day_slots,
    hour_slots,
    sum_slots,
)
from budget.books.export import Attempt
from budget.policy.windows import hour_bounds

NOW = datetime(2026, 3, 29, 10, 30, tzinfo=UTC)  # Berlin moved to summer time at 01:00 UTC


def attempt(
    provider: str, at: datetime, cost: int, list_price: int, day_key: str = "2026-03-29"
) -> Attempt:
    return Attempt(
        hold_id=f"h-{provider}-{at.timestamp()}",
        operation_id="op",
        user_id=50,
        team=None,
        origin="chat",
        provider=provider,
        model="m",
        state="settled",
        granted_at=at.timestamp(),
        day_key=day_key,
        usage_input=10,
        usage_cached_input=0,
        usage_output=5,
        usage_reasoning=0,
        actual_musd=cost,
        list_actual_musd=list_price,
        estimated=0,
        late=0,
        price_version="v",
        input_tokens=10,
        max_tokens=1024,
        ceiling_musd=100,
        stopped=0,
        corr=False,
    )


def test_slots_are_the_ledgers_local_hours_and_days_across_a_dst_change() -> None:
    """24 hour starts an hour apart ending with the current local hour; 30 day keys
    ending today, the short day (23 h) among them."""
    hours = hour_slots(NOW, "Europe/Berlin")
    assert len(hours) == HOURS and hours[-1] == hour_bounds(NOW, "Europe/Berlin")[1]
    assert all(b - a == timedelta(hours=1) for a, b in itertools.pairwise(hours))
    days = day_slots(NOW, "Europe/Berlin")
    assert len(days) == DAYS and days[-1][0] == "2026-03-29" and days[0][0] == "2026-02-28"
    # 2026-03-29 began at 23:00 UTC the day before (CET), the 30th begins at 22:00 UTC
    assert days[-1][1] == datetime(2026, 3, 28, 23, 0, tzinfo=UTC)


def test_attempts_sum_per_key_money_apart_from_free_calls() -> None:
    """A paid attempt adds its cost (and nothing free); a free one ($0) its list price;
    each adds a call; an attempt outside every slot is left out."""
    hours = hour_slots(NOW, "UTC")
    keys = {hour_bounds(s, "UTC")[0]: i for i, s in enumerate(hours)}
    rows = [
        attempt("deepseek", NOW, 21, 21),
        attempt("deepseek", NOW - timedelta(minutes=20), 9, 9),
        attempt("groq", NOW - timedelta(hours=3), 0, 32),
        attempt("groq", NOW - timedelta(hours=30), 0, 99),  # outside the 24 hours
    ]
    found = sum_slots(rows, keys, "hour", HOURS, "UTC")
    assert found["deepseek"].paid_musd[-1] == 30 and found["deepseek"].free_list_musd[-1] == 0
    assert found["deepseek"].calls[-1] == 2
    assert found["groq"].free_list_musd[-4] == 32 and sum(found["groq"].paid_musd) == 0
    assert sum(found["groq"].calls) == 1
    by_day = sum_slots(rows, {"2026-03-29": 0}, "day", 1, "UTC")
    assert by_day["groq"].free_list_musd == [131]  # day keys are the holds' own


def _picture(limit_hour: int | None, limit_day: int | None) -> SpendPicture:
    hours = hour_slots(NOW, "UTC")
    days = day_slots(NOW, "UTC")
    paid = ProviderSeries("deepseek", [0] * 23 + [21], [0] * 24, [0] * 23 + [1])
    free = ProviderSeries("groq", [0] * 24, [0] * 23 + [32], [0] * 23 + [1])
    day_paid = ProviderSeries("deepseek", [0] * 29 + [21], [0] * 30, [0] * 29 + [1])
    return SpendPicture(
        NOW,
        "UTC",
        SpendSeries(hours, [f"{h:%H}:00" for h in hours], [free, paid], limit_hour),
        SpendSeries([s for _k, s in days], [k for k, _s in days], [day_paid], limit_day),
    )


def _ys(line: Any) -> list[float]:
    """A matplotlib line's y values as floats."""
    return [float(y) for y in line.get_ydata()]


def test_the_chart_stacks_money_under_free_calls_and_draws_a_readable_limit() -> None:
    pytest.importorskip("matplotlib")
    fig = spend_chart_figure(_picture(limit_hour=50, limit_day=2_000_000))
    hourly, daily = fig.axes
    hourly_legend, daily_legend = hourly.get_legend(), daily.get_legend()
    assert hourly_legend is not None and daily_legend is not None
    labels = [t.get_text() for t in hourly_legend.get_texts()]
    assert labels == [
        "deepseek (paid): $0.000021",
        "groq (free, at list price): $0.000032",
        "global limit $0.000050",
    ]
    paid_bar, free_bar = hourly.containers[0][-1], hourly.containers[1][-1]
    assert paid_bar.get_y() == 0 and paid_bar.get_height() == pytest.approx(21e-6)
    assert free_bar.get_y() == pytest.approx(21e-6) and free_bar.get_hatch() == "///"
    assert [_ys(line) for line in hourly.get_lines()] == [[50e-6, 50e-6]]
    day_labels = [t.get_text() for t in daily_legend.get_texts()]
    assert day_labels[-1] == "global limit $2.000000 (above the scale)"
    assert [_ys(line) for line in daily.get_lines()] == [[]]  # named, not drawn
    png = spend_chart_png(_picture(None, None))
    assert png.startswith(b"\x89PNG") and len(png) > 10_000
