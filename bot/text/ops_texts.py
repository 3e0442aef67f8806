"""The texts of the operator's notices: alerts before the caps and spend reports.

gettext msgids in English, translated in ``locales/ru``; rendered inside the admin's
locale (their /lang choice, else English: :meth:`bot.ops.admin_notices.AdminNotifier.tell`).
Amounts are :func:`budget.policy.money.usd` (six decimals, as ``/budget`` writes them);
times are local in BUDGET_TZ with the zone's name (:func:`bot.text.templates.format_reset`).
"""

from __future__ import annotations

from datetime import UTC
from decimal import Decimal

from aiogram.utils.i18n import gettext as _
from aiogram.utils.i18n import ngettext

from bot.ops.alerts import LimitAlert
from bot.ops.kpis import Kpis, uptime_text
from bot.ops.reconciliations import LastReconciliation
from bot.ops.reports import SpendReport
from bot.text.templates import format_reset
from budget.kernel.shown import echoed
from budget.policy.money import usd
from budget.policy.windows import zone
from budget.types import Level, Window

__all__ = ["alert_text", "report_text"]


def _percent(fraction: Decimal) -> str:
    return f"{(fraction * 100).normalize():f}%"


def _limit_name(level: Level, scope: str, window: Window) -> str:
    hourly = window is Window.HOUR
    if level is Level.TEAM:
        return (_("team {team} hourly limit") if hourly else _("team {team} daily limit")).format(
            team=scope
        )
    if level is Level.PROVIDER:
        return _("provider account {key} daily limit").format(key=scope)
    return _("global hourly limit") if hourly else _("global daily limit")


def alert_text(alert: LimitAlert, tz: str) -> str:
    """One threshold of one limit (see :class:`bot.ops.alerts.LimitAlert`)."""
    lines = [
        _("⚠️ Spend alert: the {limit} is at {percent}.").format(
            limit=_limit_name(alert.level, alert.scope, alert.window),
            percent=_percent(alert.threshold),
        ),
        _("Counted: {used} of {limit} (settled {settled}, held {held}).").format(
            used=usd(alert.used_musd),
            limit=usd(alert.limit_musd),
            settled=usd(alert.settled_musd),
            held=usd(alert.held_musd),
        ),
        _("Burn rate: {rate} per hour (average since {start}).").format(
            rate=usd(alert.burn_musd_per_hour),
            start=format_reset(alert.window_start, tz, with_date=alert.window is Window.MONTH),
        ),
    ]
    resets = format_reset(alert.resets_at, tz, with_date=alert.window is Window.MONTH)
    if alert.reached:
        if alert.held_musd:
            lines.append(
                _(
                    "The limit is reached: new paid calls it counts are refused until held "
                    "money is released or the window resets at {resets}; free tiers go on."
                ).format(resets=resets)
            )
        else:
            lines.append(
                _(
                    "The limit is reached: new paid calls it counts are refused until the "
                    "window resets at {resets}; free tiers go on."
                ).format(resets=resets)
            )
    elif alert.projected_at is not None:
        lines.append(
            _(
                "At this rate the limit is reached at about {at}, before the window "
                "resets at {resets}."
            ).format(at=format_reset(alert.projected_at, tz), resets=resets)
        )
    else:
        lines.append(
            _("At this rate the limit is not reached before the window resets at {resets}.").format(
                resets=resets
            )
        )
    if alert.top:
        lines.append(
            (
                _("Top spenders this hour (settled): {list}")
                if alert.window is Window.HOUR
                else _("Top spenders today (settled): {list}")
            ).format(list=", ".join(f"{uid} {usd(musd)}" for uid, musd in alert.top))
        )
    return "\n".join(lines)


def _kpi_line(kpis: Kpis) -> str:
    return _(
        "Users: {users} ({active} active); digests sent: {digests} ({span} on these days); "
        "channels followed: {channels}; uptime of this process: {uptime}."
    ).format(
        users=kpis.users,
        active=kpis.active_users,
        digests=kpis.digests_sent,
        span=kpis.digests_sent_in_span,
        channels=kpis.channels,
        uptime=uptime_text(kpis.uptime_s),
    )


def report_text(report: SpendReport) -> str:
    """A daily or weekly report (see :mod:`bot.ops.reports`)."""
    p = report.period
    if p.kind == "weekly":
        head = _("📊 Weekly spend report, {first} to {last} ({tz})").format(
            first=p.first.isoformat(), last=p.last.isoformat(), tz=p.tz
        )
    else:
        head = _("📊 Daily spend report for {day} ({tz})").format(day=p.first.isoformat(), tz=p.tz)
    lines = [head, ""]
    lines.append(
        ngettext(
            "Money spent: {spent}. Free tiers: {calls} call, {saved} at list price (not spent).",
            "Money spent: {spent}. Free tiers: {calls} calls, {saved} at list price (not spent).",
            report.free_calls,
        ).format(
            spent=usd(report.spent_musd), calls=report.free_calls, saved=usd(report.saved_musd)
        )
    )
    lines.append(_("By provider:"))
    for k in report.keys:
        tier = _("paid") if k.paid else _("free")
        lines.append(
            ngettext(
                "• {name} ({tier}): {calls} call, settled {settled}, list {list}",
                "• {name} ({tier}): {calls} calls, settled {settled}, list {list}",
                k.calls,
            ).format(
                name=k.name,
                tier=tier,
                calls=k.calls,
                settled=usd(k.settled_musd),
                list=usd(k.list_musd),
            )
        )
    if report.top_users:
        lines.append(
            _("Top users: {list}").format(
                list=", ".join(f"{uid} {usd(m)}" for uid, m in report.top_users)
            )
        )
    if report.top_teams:
        lines.append(
            _("Top teams: {list}").format(
                list=", ".join(f"{name} {usd(m)}" for name, m in report.top_teams)
            )
        )
    refusals = ", ".join(f"{r} {n}" for r, n in report.refusals.items())
    lines.append(_("Refusals: {list}").format(list=refusals or _("none")))
    lines.append(
        _(
            "Estimated bookings: {count} ({money}); still uncorrected (expired holds "
            "booked at their bound, no settle yet): {open} ({open_money})."
        ).format(
            count=report.estimated_calls,
            money=usd(report.estimated_musd),
            open=report.uncorrected_calls,
            open_money=usd(report.uncorrected_musd),
        )
    )
    if report.reconciliations is not None:
        lines += _reconciliation_lines(report.reconciliations, report.period.tz)
    if report.kpis is not None:
        lines += ["", _kpi_line(report.kpis)]
    return "\n".join(lines)


def _reconciliation_lines(last: list[LastReconciliation], tz: str) -> list[str]:
    lines = [_("Reconciliation with the providers' bills (the last /reconcile of each key):")]
    for rec in last:
        if rec.at is None or rec.start is None or rec.end is None:
            lines.append(_("• {key}: never reconciled").format(key=rec.key))
            continue
        result = _("every step matched") if rec.matched else _("differences found (see /reconcile)")
        lines.append(
            _(
                "• {key}: {at}, the period {start} – {end} UTC from {file}: {result}; "
                "ledger {ledger}, export {export}"
            ).format(
                key=rec.key,
                at=f"{rec.at.astimezone(zone(tz)):%Y-%m-%d %H:%M} {tz}",
                start=f"{rec.start.astimezone(UTC):%Y-%m-%d %H:%M}",
                end=f"{rec.end.astimezone(UTC):%Y-%m-%d %H:%M}",
                file=echoed(rec.file_name, 128),  # the uploader's name for it
                result=result,
                ledger=usd(rec.ledger_musd),
                export=usd(rec.export_musd),
            )
        )
    return lines
