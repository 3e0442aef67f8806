"""The settings of the operator's notices: alerts before the caps and spend reports
(docs/decisions/074-alerts-before-the-caps.md, 075-spend-reports.md).

A mixin of :class:`bot.settings.env.Settings` (one flat name per field, as every
setting: docs/decisions/060-settings-stay-flat.md). ``.env.example`` and
``docs/configuration.md`` describe each.
"""

from __future__ import annotations

from decimal import Decimal, InvalidOperation
from typing import Annotated

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, NoDecode

from bot.settings.checks import check_digest_time

__all__ = ["WEEKDAYS", "OpsNoticeSettings", "parse_alert_at"]

#: REPORT_WEEKLY's values, Monday first (``date.weekday()`` is the index).
WEEKDAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
_WEEKDAY_NAMES = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
#: The most thresholds ALERT_AT may list.
MAX_THRESHOLDS = 10
#: The ceiling of MONTH_ALERT_USD (as every ``*_USD`` setting's).
MAX_USD = Decimal(1_000_000)


def parse_alert_at(value: object) -> object:
    """``ALERT_AT`` as written (``"0.5, 0.8, 1.0"``; empty: no alerts) → the sorted,
    distinct fractions as a tuple of :class:`~decimal.Decimal` in ``(0, 1]``.

    Raises:
        ValueError: a part that is no decimal, out of ``(0, 1]``, or more than
            :data:`MAX_THRESHOLDS` parts.
    """
    if not isinstance(value, str):
        return value
    parts = [p.strip() for p in value.split(",") if p.strip()]
    if len(parts) > MAX_THRESHOLDS:
        raise ValueError(f"ALERT_AT lists at most {MAX_THRESHOLDS} fractions")
    out: set[Decimal] = set()
    for part in parts:
        try:
            fraction = Decimal(part) if len(part) <= 8 else Decimal("NaN")
        except InvalidOperation:
            fraction = Decimal("NaN")
        if not fraction.is_finite() or not Decimal(0) < fraction <= Decimal(1):
            raise ValueError(
                "ALERT_AT must be comma-separated fractions in (0, 1], e.g. 0.5,0.8,1.0"
            )
        out.add(fraction)
    return tuple(sorted(out))


class OpsNoticeSettings(BaseSettings):
    """ALERT_AT, REPORT_TIME, REPORT_WEEKLY and the anomaly alerts' figures
    (docs/decisions/180-anomaly-alerts.md; see ``.env.example``)."""

    # fractions of every global, team and provider-account limit told to the admins once
    # per window when the spend counted against the limit (settled + held) reaches them
    alert_at: Annotated[tuple[Decimal, ...], NoDecode] = (
        Decimal("0.5"),
        Decimal("0.8"),
        Decimal("1.0"),
    )
    # the daily spend report's local time in BUDGET_TZ (empty: no reports)
    report_time: str = "09:00"
    # the weekday of the weekly report (mon … sun; empty: none), at REPORT_TIME
    report_weekly: str = ""
    # a loop is suspected at this many calls of digests and retries in LOOP_ALERT_MINUTES
    # with no message taken in (0: no loop alerts)
    loop_alert_calls: int = Field(30, ge=0, le=100_000)
    loop_alert_minutes: int = Field(10, ge=1, le=1440)
    # a free key's daily requests told when they run out within this many minutes at
    # the current rate (0: no quota forecast)
    quota_alert_minutes: int = Field(120, ge=0, le=1440)
    # a model's cost per answered message today at this many times its 7-day baseline
    # is told (0: no cost alerts), once both sides answered COST_ALERT_MIN_ANSWERS
    cost_alert_ratio: Decimal = Field(Decimal("1.5"), ge=0, le=1000)
    cost_alert_min_answers: int = Field(10, ge=1, le=1_000_000)
    # the month's spend forecast is told when it passes this (an alert figure, not a
    # cap; 0: no month forecast)
    month_alert_usd: Decimal = Field(Decimal(0), ge=0, le=MAX_USD)

    @field_validator("alert_at", mode="before")
    @classmethod
    def _parse_alert_at(cls, value: object) -> object:
        return parse_alert_at(value)

    @field_validator("report_time")
    @classmethod
    def _report_time(cls, value: str) -> str:
        return value.strip() and check_digest_time(value)

    @field_validator("report_weekly")
    @classmethod
    def _report_weekly(cls, value: str) -> str:
        written = value.strip().lower()
        if not written:
            return ""
        if written not in WEEKDAYS and written not in _WEEKDAY_NAMES:
            raise ValueError("REPORT_WEEKLY must be a weekday (mon … sun) or empty")
        return written[:3]
