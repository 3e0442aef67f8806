"""The month window's settings: the monthly money limits of the global, user and team
levels and of DeepSeek's account, and the day the month starts on
(``docs/decisions/110-ledger-levels-and-months.md``).

A class of its own (:class:`MonthSettings`, one base of :class:`bot.settings.Settings`),
as ``docs/decisions/060-settings-stay-flat.md`` foresees; the names stay flat
(``BUDGET_GLOBAL_MONTHLY_USD``…) and are documented in ``.env.example``. ``*_usd`` are
decimal US dollars as written (µUSD only in the ledger); unset or empty: no limit.
"""

from __future__ import annotations

from decimal import Decimal

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings

__all__ = ["MonthSettings"]

#: The largest money limit an operator may write (USD), as for the hour and the day.
MAX_USD = Decimal(1_000_000)


class MonthSettings(BaseSettings):
    """The month window (module docstring).

    Attributes:
        budget_global_monthly_usd / budget_user_monthly_usd / budget_team_monthly_usd:
            the levels' monthly limits.
        budget_month_start_day: the day of the month the window starts on, in
            ``BUDGET_TZ`` (1: calendar months; past a short month's end: its last day).
        deepseek_monthly_cap_usd: the paid anchor's account, per month.
    """

    budget_global_monthly_usd: Decimal | None = Field(None, ge=0, le=MAX_USD)
    budget_user_monthly_usd: Decimal | None = Field(None, ge=0, le=MAX_USD)
    budget_team_monthly_usd: Decimal | None = Field(None, ge=0, le=MAX_USD)
    budget_month_start_day: int = Field(1, ge=1, le=31)
    deepseek_monthly_cap_usd: Decimal | None = Field(None, ge=0, le=MAX_USD)

    @field_validator(
        "budget_global_monthly_usd",
        "budget_user_monthly_usd",
        "budget_team_monthly_usd",
        "deepseek_monthly_cap_usd",
        mode="before",
    )
    @classmethod
    def _empty_is_none(cls, value: object) -> object:
        return None if value == "" else value
