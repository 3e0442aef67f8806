"""Checks made before the bot migrates or starts: can the database file be written,
and can the settings work with the price card and the models' limits. Each returns
``None`` or one line naming what cannot work.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from bot.app.wiring import provider_models
from bot.settings import Settings
from budget.errors import BudgetConfigError
from budget.kernel.clock import Clock
from budget.plans import PlansFileError, load_plans
from budget.policy.money import usd, usd_to_musd
from budget.pricing.prices import PriceCard, parse_overrides
from llm.model_caps import max_output_tokens

__all__ = ["check_database", "check_settings"]


def check_database(path: Path) -> str | None:
    """``None`` when the SQLite file at ``path`` can be created, opened and written;
    else why not (one line). Blocking: run in a thread."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(path, timeout=5)
        try:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("ROLLBACK")
        finally:
            conn.close()
    except (OSError, sqlite3.Error) as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


def check_settings(settings: Settings, clock: Clock) -> str | None:
    """Cross-checks that need the price card and the models' limits, made before any
    migration. Returns ``None``, or one line naming the setting that cannot work.

    * A paid model without a price (``PRICE_OVERRIDES``).
    * ``OPERATION_MAX_USD`` below the smallest hold a chat message can need on every
      paid model (no input, the smaller of ``DEGRADED_MIN_OUTPUT_TOKENS`` and
      ``CHAT_MAX_OUTPUT_TOKENS`` out): every paid answer would be refused, blaming a cap
      the user cannot change.
    * ``CHAT_MAX_OUTPUT_TOKENS`` above the documented output limit of every configured
      model (``llm.model_caps``; checked only when every model's limit is known).
    * ``PLANS_FILE``: unreadable, or a plan or field that cannot work (the line names the
      file, the plan and the field: :mod:`budget.plans`).
    """
    try:
        load_plans(settings.plans_file)
    except PlansFileError as exc:
        return f"configuration error: {exc}"
    try:
        prices = PriceCard(
            provider_models(settings),
            overrides=parse_overrides(settings.price_overrides)
            if settings.price_overrides
            else None,
            max_call_seconds=settings.provider_timeout_seconds,
        )
    except (BudgetConfigError, ValueError) as exc:
        return f"configuration error: {exc}"
    models = provider_models(settings)
    now = clock.now()
    cap_musd = usd_to_musd(settings.operation_max_usd) or 0
    limits = [(max_output_tokens(m.provider, m.model), m) for m in models]
    known = [(limit, m) for limit, m in limits if limit is not None]
    if known and len(known) == len(limits):
        largest, model = max(known, key=lambda pair: pair[0])
        if settings.chat_max_output_tokens > largest:
            return (
                f"configuration error in CHAT_MAX_OUTPUT_TOKENS: "
                f"{settings.chat_max_output_tokens} is beyond every configured model's output "
                f"limit (the largest is {largest} on {model.provider}:{model.model})"
            )
    # The smallest hold any chat message can need: no input at all and the fewest output
    # tokens the degradation ladder would still send. Below it, every paid answer is
    # refused, whatever the message.
    smallest_output = min(settings.degraded_min_output_tokens, settings.chat_max_output_tokens)
    paid = [
        (prices.ceiling_musd(m.provider, m.model, 0, smallest_output, now), m)
        for m in models
        if not prices.is_free(m.provider)
    ]
    if paid:
        cheapest, model = min(paid, key=lambda pair: pair[0])
        if cap_musd < cheapest:
            return (
                f"configuration error in OPERATION_MAX_USD: ${settings.operation_max_usd:f} is "
                f"below the smallest chat hold ({usd(cheapest)}: {smallest_output} output "
                f"tokens on {model.provider}:{model.model}): every paid answer would be refused"
            )
    return None
