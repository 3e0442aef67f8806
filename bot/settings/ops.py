"""The settings of the operator's notices: alerts before the caps and spend reports
(docs/decisions/074-alerts-before-the-caps.md, 075-spend-reports.md).

A mixin of :class:`bot.settings.env.Settings` (one flat name per field, as every
setting: docs/decisions/060-settings-stay-flat.md). ``.env.example`` and
``docs/configuration.md`` describe each.
"""

from __future__ import annotations

from decimal import Decimal, InvalidOperation
from typing import Annotated

from pydantic import field_validator
from pydantic_settings import BaseSettings, NoDecode

from bot.settings.checks import check_digest_time

__all__ = ["WEEKDAYS", "OpsNoticeSettings", "parse_alert_at"]

#: REPORT_WEEKLY's values, Monday first (``date.weekday()`` is the index).
WEEKDAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
_WEEKDAY_NAMES = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
#: The most thresholds ALERT_AT may list.
MAX_THRESHOLDS = 10


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
    """ALERT_AT, REPORT_TIME, REPORT_WEEKLY (see ``.env.example``)."""

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
