"""/budget: the ledger's state now (kill switches, buckets, teams, top users, providers,
today's figures), ``/budget user ID``, ``/budget team NAME`` and ``/budget chart`` (the
operator dashboard's main picture: spend by provider per hour for 24 h and per day for 30
days, :mod:`bot.ops.chart`). ``/budget export`` is the books router's
(:mod:`bot.handlers.books`)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from aiogram import Bot
from aiogram.filters import CommandObject
from aiogram.types import BufferedInputFile, Message

from bot.handlers.admin.base import (
    USER_ID_RULE,
    AdminView,
    parse_user_id,
    reply,
    valid_team_name,
)
from bot.ops.chart import CHART_MISSING, chart_available, spend_chart_png
from bot.ops.dashboard.view import OperatorView
from bot.ops.limit_overrides import runtime_overrides
from bot.storage.repos import Intake
from bot.text.templates import format_reset
from budget.books.stops import StopBook, StopTotals
from budget.errors import HoldRefused
from budget.kernel.clock import Clock
from budget.kernel.shown import echoed
from budget.ledger import Ledger
from budget.policy.money import remaining_usd, usd
from budget.policy.wallet import WalletState
from budget.policy.windows import day_bounds
from budget.status import BucketStatus, LedgerStatus, TeamStatus, UserStatus
from budget.types import Level, Window
from llm.cascade.cascade import Cascade

__all__ = ["on_budget", "render_budget", "render_team", "render_user"]

CHART_CAPTION = (
    "Spend by provider: per hour, last 24 h, and per day, last 30 days (USD). Money is "
    "solid; free calls at list price are hatched (not spent); dashed: the global limit."
)
BUDGET_USAGE = (
    "Usage: /budget [user ID | team NAME | chat ID | plan NAME | chart"
    " | export [YYYY-MM-DD | YYYY-MM] [zone]]"
)


async def on_budget(
    message: Message,
    bot: Bot,
    clock: Clock,
    command: CommandObject,
    ledger: Ledger,
    cascade: Cascade,
    settings_view: AdminView,
    intake: Intake,
    operator_view: OperatorView,
    stop_book: StopBook | None = None,
) -> None:
    """/budget [user ID | team NAME | chart]."""
    args = (command.args or "").split()
    tz = settings_view.tz
    try:
        if args[:1] == ["chart"]:
            await _send_chart(message, bot, clock, operator_view)
            return
        text = await _report(args, clock, ledger, cascade, tz, intake, stop_book)
    except HoldRefused:
        text = "⚠️ The ledger is unavailable."
    await reply(bot, message, text, clock)


async def _send_chart(message: Message, bot: Bot, clock: Clock, view: OperatorView) -> None:
    """The dashboard's main picture, from the same figures (drawn in a worker thread)."""
    if not chart_available():
        await reply(bot, message, CHART_MISSING, clock)
        return
    png = await asyncio.to_thread(spend_chart_png, await view.picture())
    await bot.send_photo(
        message.chat.id,
        BufferedInputFile(png, filename="spend.png"),
        caption=CHART_CAPTION,
    )


async def _report(
    args: list[str],
    clock: Clock,
    ledger: Ledger,
    cascade: Cascade,
    tz: str,
    intake: Intake,
    stop_book: StopBook | None,
) -> str:
    """The text answering ``/budget`` with ``args`` (a usage line for anything else).

    Raises:
        budget.errors.HoldRefused: the ledger is unavailable.
    """
    if len(args) == 2 and args[0] == "user":
        uid = parse_user_id(args[1])
        if uid is None:
            return USER_ID_RULE
        return render_user(await ledger.user_status(uid), tz, await ledger.wallet(uid))
    if len(args) == 2 and args[0] == "team":
        known = args[1] in await ledger.teams()
        team = await ledger.team_status(args[1]) if known or valid_team_name(args[1]) else None
        if team is None or not (known or any(b.limit_musd is not None for b in team.buckets)):
            return f"No team '{echoed(args[1])}'; /team list shows the teams."
        return render_team(team, tz)  # a team with no members left but limits: shown
    if len(args) == 2 and args[0] in ("chat", "plan"):
        return await _payer(args[0], args[1], ledger, tz)
    if args:
        return BUDGET_USAGE
    status = await ledger.status()
    top = await ledger.top_users(10)
    day_key, day_start, _end = day_bounds(clock.now(), tz)
    messages_today = await intake.count_today(day_start)
    refused = await intake.count_refused_today(day_start)
    teams = [await ledger.team_status(name) for name in sorted(status.teams)]
    stops = await stop_book.totals(day_key) if stop_book is not None else None
    return render_budget(
        status,
        top,
        cascade,
        tz,
        messages_today,
        teams,
        stops,
        messages_refused=refused,
        overrides=runtime_overrides(status, ledger.config),
    )


def _bucket(b: BucketStatus, tz: str) -> str:
    scope = f" {b.scope}" if b.scope else ""
    return (
        f"{b.level.value}{scope} {b.window.value}: settled {usd(b.settled_musd)}, "
        f"held {usd(b.held_musd)}, limit {usd(b.limit_musd)}, "
        f"remaining {remaining_usd(b.remaining_musd)}, "
        f"resets {format_reset(b.resets_at, tz, with_date=b.window is Window.MONTH)}"
    )


def render_budget(
    status: LedgerStatus,
    top: list[tuple[int, int, int]],
    cascade: Cascade,
    tz: str,
    messages_today: int,
    teams: list[TeamStatus] | None = None,
    stops: StopTotals | None = None,
    *,
    messages_refused: int = 0,
    overrides: Sequence[str] = (),
) -> str:
    """The /budget report (``teams``: each team's status, for its buckets; ``stops``:
    today's stopped streamed answers, from the ledger's holds; ``messages_refused``:
    today's messages answered with any refusal template; ``overrides``: the runtime
    global limits used instead of their settings, :mod:`bot.ops.limit_overrides`)."""
    lines = [f"📒 Budget at {status.at:%Y-%m-%d %H:%M} UTC (windows cut in {tz})"]
    lines += _kill_lines(status)
    lines += _bucket_lines(status, top, tz, teams or [])
    lines += ["⚙️ " + line for line in overrides]
    lines += _provider_lines(status, cascade)
    lines += _day_lines(status, cascade, (messages_today, messages_refused), stops)
    return "\n".join(lines)


def _kill_lines(status: LedgerStatus) -> list[str]:
    """The kill switches and what is exposed if killed now."""
    lines: list[str] = []
    k = status.kill
    if k.killed:
        if k.automatic:
            lines.append(f"⛔ KILLED by the burn-rate trigger — {k.reason}")
        else:
            lines.append(f"⛔ KILLED by admin {k.by}: {k.reason}")
    else:
        lines.append("Kill switch: off")
    for s in status.scoped_kills:
        if s.killed:
            lines.append(f"⛔ killed {s.scope_kind} {s.scope}: {s.reason}")
    lines.append(
        f"Outstanding holds: {status.outstanding_holds}; exposure if killed now: "
        f"{usd(status.exposure_musd)}"
    )
    return lines


def _bucket_lines(
    status: LedgerStatus, top: list[tuple[int, int, int]], tz: str, teams: list[TeamStatus]
) -> list[str]:
    """The hour and day buckets (the month's where it has a limit), the teams' and the
    top users of the day."""
    lines = [""]
    for b in status.buckets:
        monthly = b.window is Window.MONTH and b.limit_musd is not None
        if b.window in (Window.HOUR, Window.DAY) or monthly:
            lines.append("• " + _bucket(b, tz))
    if status.teams:
        lines.append("")
        lines.append("Teams: " + ", ".join(f"{n} ({len(m)})" for n, m in status.teams.items()))
        for team in teams:
            lines.extend("• " + _bucket(b, tz) for b in team.buckets)
    if top:
        lines.append("")
        lines.append("Top users today:")
        for user_id, settled, held in top:
            lines.append(f"• {user_id}: settled {usd(settled)}, held {usd(held)}")
    return lines


def _provider_lines(status: LedgerStatus, cascade: Cascade) -> list[str]:
    """Each configured provider's calls and spend today, and its circuit."""
    lines = [""]
    lines.append("Providers today:")
    spend = {p.provider: p for p in status.providers}
    for p in cascade.provider_status():
        if not p.present:
            continue
        sp = spend.get(p.name)
        calls = sp.calls if sp else 0
        estimated = f" ({sp.estimated_calls} estimated)" if sp and sp.estimated_calls else ""
        models = ""
        if sp and sp.calls_by_model:
            models = "; calls by model: " + ", ".join(f"{m} {n}" for m, n in sp.calls_by_model)
        money = (
            f"settled {usd(sp.settled_musd)}, list {usd(sp.list_musd)}"
            if sp
            else f"settled {usd(0)}"
        )
        cooldown = f" ({p.cooldown_remaining_s:.0f}s)" if p.cooldown_remaining_s > 0 else ""
        flags = "" if p.enabled else " DISABLED"
        paid = " paid" if p.paid else ""
        lines.append(
            f"• {p.name}{paid}{flags}: {calls} call{'' if calls == 1 else 's'}{estimated}, "
            f"{money}, "
            f"circuit {p.state}{cooldown}{models}"
        )
    return lines


def _day_lines(
    status: LedgerStatus, cascade: Cascade, messages: tuple[int, int], stops: StopTotals | None
) -> list[str]:
    """Today's figures: paid-anchor calls, spend by origin, requests per message,
    refusals, stops, the estimate's accuracy and the expired holds (``messages``: today's
    messages taken in, and those of them refused)."""
    messages_today, refused = messages
    lines: list[str] = []
    paid_names = {p.name for p in cascade.provider_status() if p.paid}
    paid_today = sum(p.calls for p in status.providers if p.provider in paid_names)
    stats = cascade.stats()
    lines.append(f"Paid-anchor calls today: {paid_today} (since start: {stats.paid_anchor_calls})")
    origin = ", ".join(f"{o} {usd(m)}" for o, m in sorted(status.spend_by_origin_musd.items()))
    lines.append(f"Spend by origin: {origin or '—'}")
    per_msg = f"{status.requests_today / messages_today:.2f}" if messages_today else "—"
    lines.append(
        # every origin's requests (budget_requests): a digest's count too, so say so
        f"Messages today: {messages_today}; LLM requests today, digests' included:"
        f" {status.requests_today} ({per_msg} per message)"
    )
    refusals = ", ".join(f"{r} {n}" for r, n in sorted(status.refusals_today.items()))
    # the ledger's refusal events (holds refused, digests' too); a message refused before
    # any hold (a file, a recording, a length) is in the messages' count only
    lines.append(f"Ledger refusals today: {refusals or 'none'}")
    lines.append(f"Messages refused today: {refused} (any refusal template, the ledger's too)")
    if status.by_plan.spend_musd or status.by_plan.refusals:
        plans = sorted(set(status.by_plan.spend_musd) | {p for p, _ in status.by_plan.refusals})
        parts = []
        for plan in plans:
            refused = sum(n for (p, _), n in status.by_plan.refusals.items() if p == plan)
            spent = usd(status.by_plan.spend_musd.get(plan, 0))
            parts.append(f"{plan} {spent}, {refused} refused")
        lines.append("By plan: " + "; ".join(parts))
    if stops is not None:
        lines.append(
            f"Stopped answers today: {stops.stopped}; output tokens not generated: "
            f"{stops.tokens_not_generated}; held by ceilings but saved by the stops: "
            f"{usd(stops.saved_musd)}"
        )
    e = status.estimate
    if e.count:
        lines.append(
            f"Estimate (actual/ceiling): median {e.median_ratio:.2f}, worst {e.worst_ratio:.2f}, "
            f"over ceiling {e.over_ceiling} of {e.count}"
        )
    if status.expired_unreconciled_today:
        lines.append(
            f"Expired holds booked at their bound (ceiling + admission margin; no settle yet): "
            f"{status.expired_unreconciled_today}, {usd(status.expired_booked_musd_today)}"
        )
    if status.expired_today or status.late_settled_musd_today:
        lines.append(
            f"Expired holds today: {status.expired_today}; booked late: "
            f"{usd(status.late_settled_musd_today)}"
        )
    return lines


def render_user(status: UserStatus, tz: str, wallet: WalletState | None = None) -> str:
    """/budget user <id> (``wallet``: theirs, shown once a payment credited it)."""
    lines = [f"👤 User {status.user_id}" + (f" (team {status.team})" if status.team else "")]
    lines.append(
        f"Settled today {usd(status.settled_today_musd)}; in flight {status.inflight}; "
        f"holds {status.outstanding_holds}; messages today {status.messages_today}"
    )
    if status.killed is not None and status.killed.killed:
        lines.append(f"⛔ killed: {status.killed.reason}")
    lines.extend("• " + _bucket(b, tz) for b in status.buckets if b.window is not Window.MINUTE)
    if wallet is not None and wallet.payments:
        lines.append(
            f"• wallet: {remaining_usd(wallet.left_musd)} left of {usd(wallet.credited_musd)}"
            f" credited by {wallet.payments} payment(s); spent {usd(wallet.spent_musd)},"
            f" held {usd(wallet.held_musd)}"
        )
    return "\n".join(lines)


async def _payer(kind: str, name: str, ledger: Ledger, tz: str) -> str:
    """/budget chat <id> and /budget plan <name>."""
    if kind == "chat":
        if not (name.startswith("-") and name[1:].isdigit()):
            return "The chat id is a group's id, negative (e.g. -1001234567890)."
        status = await ledger.payer_status(Level.CHAT, name)
        head = f"👥 Group {name}: {status.members} members spent in it today"
    else:
        if name not in ledger.config.plans:
            return f"No plan '{echoed(name)}'; /plan list shows the plans."
        status = await ledger.payer_status(Level.PLAN, name)
        head = (
            f"🏷 Plan {name}: {status.members} users put on it by name"
            " (the default plan's newcomers are not counted)"
        )
    lines = [head]
    lines.extend("• " + _bucket(b, tz) for b in status.buckets)
    spend = sorted(status.spend_today_musd.items(), key=lambda x: -x[1])
    # a negative payer is a chat writing as itself (sender_chat), not a member: shown apart
    for uid, musd in [(u, m) for u, m in spend if u >= 0][:20]:
        lines.append(f"• {uid}: {usd(musd)} today")
    for chat_id, musd in [(u, m) for u, m in spend if u < 0][:20]:
        lines.append(
            f"• {chat_id} (a chat writing as itself: a channel or anonymous admins; "
            f"not a member): {usd(musd)} today"
        )
    return "\n".join(lines)


def render_team(status: TeamStatus, tz: str) -> str:
    """/budget team <name>."""
    lines = [f"👥 Team {status.name}: {len(status.members)} members"]
    if not status.members and any(b.limit_musd is not None for b in status.buckets):
        # docs/decisions/297-a-team-keeps-its-limits-without-members.md
        lines.append(
            f"No members now; its limits stay and bind anyone added again "
            f"(/limit team {status.name} <window> off removes one)."
        )
    if status.killed is not None and status.killed.killed:
        lines.append(f"⛔ killed: {status.killed.reason}")
    lines.extend("• " + _bucket(b, tz) for b in status.buckets)
    for uid, musd in sorted(status.member_spend_today_musd.items(), key=lambda x: -x[1]):
        lines.append(f"• {uid}: {usd(musd)} today")
    return "\n".join(lines)
