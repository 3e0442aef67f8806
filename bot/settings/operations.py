"""The operator's settings: retention of old rows, shedding features as spend nears the
global limits, and the drill. A base of :class:`bot.settings.env.Settings` (one flat
env name per field, ``docs/decisions/060-settings-stay-flat.md``); each is documented in
``.env.example`` and ``docs/configuration.md``.
"""

from __future__ import annotations

from decimal import Decimal, InvalidOperation
from itertools import pairwise
from typing import Self

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from budget.retention import DEFAULT_BATCH, MIN_DAYS

__all__ = ["SHED_FEATURES", "OperatorSettings", "parse_shed_at", "parse_shed_order"]

#: The features shedding can switch off (``SHED_ORDER`` names some of them, in order):
#: digests that would be paid for, photos/voice/documents, streamed answers (a whole
#: answer is sent at once), and long answers (chat answers are capped at a quarter of
#: CHAT_MAX_OUTPUT_TOKENS).
SHED_FEATURES = ("paid_digests", "media", "streaming", "long_answers")


def parse_shed_order(value: str) -> tuple[str, ...]:
    """``SHED_ORDER``: comma-separated feature names (:data:`SHED_FEATURES`), each once;
    empty: shedding off.

    Raises:
        ValueError: an unknown or repeated name.
    """
    names = tuple(part.strip().lower() for part in value.split(",") if part.strip())
    unknown = [n for n in names if n not in SHED_FEATURES]
    if unknown:
        raise ValueError(f"unknown feature {unknown[0]!r}: use {', '.join(SHED_FEATURES)}")
    if len(set(names)) != len(names):
        raise ValueError("a feature is named twice")
    return names


def parse_shed_at(value: str) -> tuple[Decimal, ...]:
    """``SHED_AT``: comma-separated fractions of a global limit, rising, each in (0, 1].

    Raises:
        ValueError: not a number, out of range, or not rising.
    """
    try:
        fractions = tuple(Decimal(p.strip()) for p in value.split(",") if p.strip())
    except InvalidOperation:
        raise ValueError("fractions such as 0.6,0.7,0.8,0.9 expected") from None
    if any(not (0 < f <= 1) for f in fractions):
        raise ValueError("each fraction must be above 0 and at most 1")
    if any(b <= a for a, b in pairwise(fractions)):
        raise ValueError("the fractions must rise")
    return fractions


class OperatorSettings(BaseSettings):
    """Retention, shedding and the drill (module docstring)."""

    model_config = SettingsConfigDict(
        env_file=".env", env_file_encoding="utf-8", extra="ignore", case_sensitive=False
    )

    # --- retention (docs/decisions/140-retention-keeps-sums.md) ------------------------
    # ledger days of per-attempt rows, events, intake records and chat history kept;
    # 0 keeps everything
    retention_days: int = Field(90, ge=0, le=36_500)
    retention_batch_rows: int = Field(DEFAULT_BATCH, ge=1, le=100_000)

    @field_validator("retention_days")
    @classmethod
    def _retention_days(cls, value: int) -> int:
        if 0 < value < MIN_DAYS:
            raise ValueError(
                f"must be 0 (keep everything) or at least {MIN_DAYS}: the dashboard's daily"
                " chart reads 30 days of attempts"
            )
        return value

    # --- shedding (docs/decisions/141-shedding-in-a-set-order.md) -------------------
    # features switched off in this order as a global window's spend passes SHED_AT
    shed_order: str = "paid_digests,media,streaming,long_answers"
    # the fractions of a global limit (held included) at which each feature goes off
    shed_at: str = "0.6,0.7,0.8,0.9"
    shed_check_seconds: float = Field(15.0, gt=0, le=3_600)

    @field_validator("shed_order")
    @classmethod
    def _shed_order(cls, value: str) -> str:
        return ",".join(parse_shed_order(value))

    @field_validator("shed_at")
    @classmethod
    def _shed_at(cls, value: str) -> str:
        parse_shed_at(value)
        return value

    @model_validator(mode="after")
    def _shed_lengths(self) -> Self:
        order, at = parse_shed_order(self.shed_order), parse_shed_at(self.shed_at)
        if order and len(at) != len(order):
            raise ValueError(
                f"SHED_AT names {len(at)} fractions for the {len(order)} features of"
                " SHED_ORDER: give one fraction per feature"
            )
        return self

    def shed_steps(self) -> tuple[tuple[str, ...], tuple[Decimal, ...]]:
        """SHED_ORDER's features and SHED_AT's fractions, parsed."""
        return parse_shed_order(self.shed_order), parse_shed_at(self.shed_at)
