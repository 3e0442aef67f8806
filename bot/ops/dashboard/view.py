"""What the dashboard shows, as JSON documents, from the calls ``/budget`` makes.

* :meth:`OperatorView.state` — the live panels, refreshed every few seconds: the kill
  switch, exposure and holds, every global, provider and team bucket of this hour and
  today against its limit, the cascade's keys (circuit, cooldown, free quota left, today's
  calls and spend), the top users and teams today, today's refusals by reason. Read from
  :meth:`budget.ledger.Ledger.status`, ``top_users``, ``team_status`` and
  :meth:`llm.cascade.cascade.Cascade.provider_status` — exactly what ``/budget`` reads —
  with each amount given twice: ``*_musd`` (integer µUSD, for bars) and as the text
  ``/budget`` prints (:func:`budget.policy.money.usd`), so the page never formats money.
* :meth:`OperatorView.series` — the two spend charts (:mod:`bot.ops.dashboard.series`),
  with the global hour and day limits as their limit lines.

Each document is a JSON object of panels under their own keys, with ``version``; a page
shows the panels it knows and ignores others, so later panels (alerts, shedding) are
added as keys without breaking a page that is open (docs/decisions/070-operator-dashboard.md).
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from bot.ops.dashboard.series import SpendBook, SpendPicture, SpendSeries
from bot.ops.kpis import KpiReader
from bot.text.templates import format_reset
from budget.errors import LedgerUnavailable
from budget.ledger import Ledger
from budget.policy.money import remaining_usd, usd
from budget.policy.windows import day_bounds
from budget.status import BucketStatus, KillState, LedgerStatus, TeamStatus
from budget.types import Level, Window
from llm.cascade.cascade import Cascade
from llm.cascade.types import ProviderStatus
from llm.providers.ratelimits import parse_rate_limits

__all__ = ["DOCUMENT_VERSION", "TOP_N", "OperatorView", "picture_json"]

log = logging.getLogger(__name__)

#: The shape of the documents; raised when a key changes meaning (added keys do not).
DOCUMENT_VERSION = 1
#: Users and teams listed by spend (as ``/budget``'s top list).
TOP_N = 10
#: Seconds between two refreshes of the live panels by the page.
REFRESH_S = 5


def _iso(at: datetime | None) -> str | None:
    return None if at is None else at.isoformat().replace("+00:00", "Z")


def bucket_json(b: BucketStatus, tz: str) -> dict[str, Any]:
    """One bucket as the page draws it (a bar with its limit line) and ``/budget`` writes
    it (the ``text`` amounts)."""
    scope = f" {b.scope}" if b.scope else ""
    text = {
        "settled": usd(b.settled_musd),
        "held": usd(b.held_musd),
        "limit": usd(b.limit_musd),
        "remaining": remaining_usd(b.remaining_musd),
        "resets": format_reset(b.resets_at, tz, with_date=b.window is Window.MONTH),
    }
    # the line /budget writes for the bucket, word for word
    text["line"] = (
        f"{b.level.value}{scope} {b.window.value}: settled {text['settled']}, "
        f"held {text['held']}, limit {text['limit']}, remaining {text['remaining']}, "
        f"resets {text['resets']}"
    )
    return {
        "id": f"{b.level.value}/{b.scope}/{b.window.value}",
        "level": b.level.value,
        "scope": b.scope,
        "window": b.window.value,
        "limit_musd": b.limit_musd,
        "settled_musd": b.settled_musd,
        "held_musd": b.held_musd,
        "remaining_musd": b.remaining_musd,
        "resets_at": _iso(b.resets_at),
        "text": text,
    }


def kill_json(k: KillState) -> dict[str, Any]:
    """The kill switch, with the sentence ``/budget`` opens with."""
    if not k.killed:
        text = "Kill switch: off"
    elif k.automatic:
        text = f"KILLED by the burn-rate trigger — {k.reason}"
    else:
        text = f"KILLED by admin {k.by}: {k.reason}"
    return {
        "killed": k.killed,
        "automatic": k.automatic,
        "by": k.by,
        "reason": k.reason,
        "changed_at": _iso(k.changed_at),
        "scope_kind": k.scope_kind,
        "scope": k.scope,
        "text": text,
    }


def _quota(p: ProviderStatus) -> dict[str, int | None]:
    """What the key's last rate-limit headers and its pacing say is left (``None`` =
    unknown: no call yet, or the provider sends no such header)."""
    limits = parse_rate_limits(p.last_rate_limits)
    return {
        "remaining_requests": limits.remaining_requests,
        "limit_requests": limits.limit_requests,
        "remaining_tokens": p.remaining_tokens,
        "limit_tokens": limits.limit_tokens,
    }


def providers_json(status: LedgerStatus, cascade: Cascade) -> list[dict[str, Any]]:
    """The configured keys in cascade order, as ``/budget``'s "Providers today" lines."""
    spend = {p.provider: p for p in status.providers}
    out = []
    for p in cascade.provider_status():
        if not p.present:
            continue
        sp = spend.get(p.name)
        settled = sp.settled_musd if sp else 0
        out.append(
            {
                "name": p.name,
                "model": p.model,
                "paid": p.paid,
                "enabled": p.enabled,
                "state": p.state,
                "cooldown_s": round(p.cooldown_remaining_s),
                "calls_today": sp.calls if sp else 0,
                "estimated_calls": sp.estimated_calls if sp else 0,
                "settled_musd": settled,
                "list_musd": sp.list_musd if sp else None,
                "held_musd": sp.held_musd if sp else 0,
                "quota": _quota(p),
                "text": {
                    "settled": usd(settled),
                    "list": usd(sp.list_musd) if sp else usd(0),
                },
            }
        )
    return out


def _team_row(team: TeamStatus) -> dict[str, Any]:
    """A team's spend today: its day bucket (what its limit counts), else its members'."""
    day = next((b for b in team.buckets if b.window is Window.DAY), None)
    if day is not None:
        settled, held = day.settled_musd, day.held_musd
    else:
        settled, held = sum(team.member_spend_today_musd.values()), 0
    return {
        "name": team.name,
        "members": len(team.members),
        "settled_musd": settled,
        "held_musd": held,
        "text": {"settled": usd(settled), "held": usd(held)},
    }


def series_json(series: SpendSeries) -> dict[str, Any]:
    """One chart: ``x`` Unix seconds of the slot starts, local ``labels``, a series
    per provider key, the limit line and the totals."""
    return {
        "x": [int(s.timestamp()) for s in series.starts],
        "labels": series.labels,
        "limit_musd": series.limit_musd,
        "providers": [
            {
                "name": p.provider,
                "paid_musd": p.paid_musd,
                "free_list_musd": p.free_list_musd,
                "calls": p.calls,
            }
            for p in series.providers
        ],
        "paid_total_musd": series.paid_total_musd(),
        "free_list_total_musd": series.free_list_total_musd(),
        "text": {
            "paid_total": usd(series.paid_total_musd()),
            "free_list_total": usd(series.free_list_total_musd()),
            "limit": usd(series.limit_musd),
        },
    }


def picture_json(picture: SpendPicture) -> dict[str, Any]:
    """The document of :meth:`OperatorView.series`."""
    return {
        "version": DOCUMENT_VERSION,
        "at": _iso(picture.at),
        "tz": picture.tz,
        "hourly": series_json(picture.hourly),
        "daily": series_json(picture.daily),
    }


def global_limit(status: LedgerStatus, window: Window) -> int | None:
    """The global limit of ``window`` now (µUSD; ``None`` = none)."""
    for b in status.buckets:
        if b.level is Level.GLOBAL and b.window is window:
            return b.limit_musd
    return None


class OperatorView:
    """The dashboard's documents (and ``/budget chart``'s picture).

    Args:
        ledger: the bot's ledger.
        cascade: the bot's cascade (its keys' circuits, cooldowns, headers).
        spend: the books' spend per slot.
        tz: BUDGET_TZ, the zone windows are cut in.
        kpis: the counts of the ``kpis`` panel (``None``: the panel is left out).

    Both reads may raise :class:`budget.errors.LedgerUnavailable` (the ledger fails
    closed), and :meth:`series` SQLAlchemy's errors when the books cannot be read.
    """

    __slots__ = ("_cascade", "_kpis", "_ledger", "_spend", "_tz")

    def __init__(
        self,
        ledger: Ledger,
        cascade: Cascade,
        spend: SpendBook,
        tz: str,
        kpis: KpiReader | None = None,
    ) -> None:
        self._ledger = ledger
        self._cascade = cascade
        self._spend = spend
        self._tz = tz
        self._kpis = kpis

    def __repr__(self) -> str:
        return f"OperatorView(tz={self._tz!r})"

    async def state(self) -> dict[str, Any]:
        """The live panels (see the module docstring)."""
        ledger = self._ledger
        status = await ledger.status()
        top = await ledger.top_users(TOP_N)
        teams = [await ledger.team_status(name) for name in sorted(status.teams)]
        try:
            await self._cascade.refresh()  # the deployment's circuits, when shared
        except LedgerUnavailable:
            log.warning("dashboard: shared key state unreadable; this process's view shown")
        buckets = [b for b in status.buckets if b.window in (Window.HOUR, Window.DAY)]
        buckets += [b for team in teams for b in team.buckets]
        team_rows = sorted((_team_row(t) for t in teams), key=_spend_order)
        kpis = None
        if self._kpis is not None:
            kpis = (await self._kpis.read(day_bounds(status.at, self._tz)[1])).as_json()
        return {
            "version": DOCUMENT_VERSION,
            "at": _iso(status.at),
            "tz": self._tz,
            "refresh_s": REFRESH_S,
            "kill": kill_json(status.kill),
            "scoped_kills": [kill_json(k) for k in status.scoped_kills],
            "exposure_musd": status.exposure_musd,
            "outstanding_holds": status.outstanding_holds,
            "buckets": [bucket_json(b, self._tz) for b in buckets],
            "providers": providers_json(status, self._cascade),
            "top_users": [
                {
                    "user_id": uid,
                    "settled_musd": settled,
                    "held_musd": held,
                    "text": {"settled": usd(settled), "held": usd(held)},
                }
                for uid, settled, held in top
            ],
            "top_teams": team_rows[:TOP_N],
            "refusals_today": dict(sorted(status.refusals_today.items())),
            "operations_today": status.operations_today,
            "requests_today": status.requests_today,
            "kpis": kpis,
            "text": {"exposure": usd(status.exposure_musd)},
        }

    async def picture(self) -> SpendPicture:
        """The two spend charts with the global hour and day limits now."""
        status = await self._ledger.status()
        return await self._spend.picture(
            global_limit(status, Window.HOUR), global_limit(status, Window.DAY)
        )

    async def series(self) -> dict[str, Any]:
        """The document of the two spend charts."""
        return picture_json(await self.picture())


def _spend_order(row: dict[str, Any]) -> tuple[int, str]:
    return (-(int(row["settled_musd"]) + int(row["held_musd"])), str(row["name"]))
