"""The texts of the anomaly alerts: a suspected loop, a free quota running out, a cost
regression, a spend forecast (:mod:`bot.ops.anomaly_watch`).

gettext msgids in English, translated in ``locales/ru``; rendered in each admin's locale
(:meth:`bot.ops.admin_notices.AdminNotifier.tell`). Amounts are
:func:`budget.policy.money.usd`; times local in BUDGET_TZ with the zone's name.
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from zoneinfo import ZoneInfo

from aiogram.utils.i18n import gettext as _
from aiogram.utils.i18n import ngettext

from bot.ops.anomalies import CostRegression, LoopSuspicion, SpendForecast
from bot.ops.quota import QuotaForecast
from bot.text.templates import format_reset
from budget.policy.money import usd

__all__ = ["cost_text", "forecast_text", "loop_text", "quota_text"]


def _when(at: datetime, tz: str) -> str:
    return f"{at.astimezone(ZoneInfo(tz)):%Y-%m-%d %H:%M} {tz}"


def loop_text(found: LoopSuspicion, tz: str) -> str:
    """Calls nobody typed while no message arrived (see :class:`LoopSuspicion`)."""
    minutes = int((found.until - found.since).total_seconds() // 60)
    lines = [
        ngettext(
            "🔁 Loop suspected: {calls} call in the last {minutes} min and no message from anyone.",
            "🔁 Loop suspected: {calls} calls in the last {minutes} min and no message "
            "from anyone.",
            found.calls,
        ).format(calls=found.calls, minutes=minutes),
        _(
            "Digest calls: {digests}; retries and follow-up calls of chat answers: {retries}."
        ).format(digests=found.digest_calls, retries=found.retry_calls),
        _("Their money: booked {booked}, still held {held}.").format(
            booked=usd(found.booked_musd), held=usd(found.held_musd)
        ),
    ]
    if found.last_message_at is None:
        lines.append(_("No message has been taken in before either."))
    else:
        lines.append(
            _("The last message was taken in at {at}.").format(at=_when(found.last_message_at, tz))
        )
    lines.append(_("/budget shows the spend; /kill refuses new work until /unkill."))
    return "\n".join(lines)


def quota_text(found: QuotaForecast, tz: str) -> str:
    """A free key's daily requests running out (see :class:`QuotaForecast`)."""
    head = _(
        "⏳ The free requests of {key} run out at about {at} at the current rate "
        "({rate} per hour, {left} left)."
    ).format(
        key=found.key,
        at=format_reset(found.runs_out_at, tz),
        rate=found.per_hour,
        left=found.remaining,
    )
    if found.fallback is None:
        tail = _("After that no other key is left for chat.")
    elif found.fallback_paid:
        tail = _("After that chat goes to {key} (paid).").format(key=found.fallback)
    else:
        tail = _("After that chat goes to {key} (free).").format(key=found.fallback)
    return f"{head}\n{tail}"


def cost_text(found: CostRegression, ratio: Decimal) -> str:
    """A model's cost per answered message today against its baseline."""
    return "\n".join(
        [
            _(
                "📈 Cost regression on {model}: {today} per answered message today, "
                "{baseline} over the 7 days before (alert at {ratio}×)."
            ).format(
                model=found.model,
                today=usd(found.today_per_answer_musd),
                baseline=usd(found.baseline_per_answer_musd),
                ratio=f"{ratio.normalize():f}",
            ),
            _(
                "Today: {answers} answers, {cost}; the 7 days before: {base_answers} "
                "answers, {base_cost}."
            ).format(
                answers=found.today.answers,
                cost=usd(found.today.cost_musd),
                base_answers=found.baseline.answers,
                base_cost=usd(found.baseline.cost_musd),
            ),
        ]
    )


def forecast_text(found: SpendForecast, tz: str) -> str:
    """The spend a window reaches at its average rate, over its limit."""
    if found.window == "day":
        head = _(
            "🔮 Spend forecast: at the rate since the day began, today's spend reaches about "
            "{forecast} by {end}, over the global daily limit of {limit}."
        )
    else:
        head = _(
            "🔮 Spend forecast: at the rate since the month began, this month's spend reaches "
            "about {forecast} by {end}, over the month's alert figure of {limit} "
            "(MONTH_ALERT_USD; not a cap)."
        )
    return "\n".join(
        [
            head.format(
                forecast=usd(found.forecast_musd),
                end=_when(found.end, tz),
                limit=usd(found.limit_musd),
            ),
            _("Counted so far: {used}; at this rate {limit} is reached at about {at}.").format(
                used=usd(found.used_musd),
                limit=usd(found.limit_musd),
                at=_when(found.reached_at, tz),
            ),
        ]
    )
