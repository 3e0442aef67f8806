"""Admin commands: /budget, /kill, /unkill, /limit, /team, /providers, /digest_now.

The router's first filter checks ADMIN_IDS, before any argument is read: for anyone
else — and for any message sent on behalf of a chat (``sender_chat``) — no handler here
matches, so the update falls through to the fallback router and gets the same reply as
a typo ("unknown command" in private chats, nothing in groups) — nothing leaks, nothing
changes. A command addressed to another bot (``/kill@other_bot``) does not match
aiogram's ``Command`` filter (it compares the mention with our username from getMe).
Admin reports are in English.
"""

from __future__ import annotations

import asyncio
import logging
import re
from dataclasses import dataclass
from zoneinfo import ZoneInfo

from aiogram import Bot, Router
from aiogram.exceptions import TelegramAPIError
from aiogram.filters import Command, CommandObject, Filter
from aiogram.types import BufferedInputFile, Message

from bot.chat.delivery import send_text
from bot.chat.payer import is_on_behalf_of_chat
from bot.chat.streaming import StreamRegistry
from bot.middlewares.rate import NOT_RATE_LIMITED
from bot.ops.chart import CHART_MISSING, chart_available, spend_chart_png
from bot.ops.dashboard.view import OperatorView
from bot.ops.killswitch import reset_kill, trip_kill
from bot.ops.signals import POLL_S as SIGNAL_POLL_S
from bot.settings import Settings
from bot.storage.repos import Intake
from bot.text.templates import format_reset
from budget.books.stops import StopBook, StopTotals
from budget.errors import HoldRefused, LedgerUnavailable
from budget.kernel.clock import Clock
from budget.ledger import Ledger
from budget.policy.money import parse_usd, usd
from budget.policy.windows import day_bounds
from budget.status import BucketStatus, KillState, LedgerStatus, TeamStatus, UserStatus
from budget.types import Level, Window
from llm.cascade.cascade import Cascade
from scheduler.runner import DigestRunner
from scheduler.tables import RunStatus
from scheduler.types import ProgressStep, Step

__all__ = ["AdminView", "IsAdmin", "create_admin_router"]

log = logging.getLogger(__name__)

BUDGET_USAGE = "Usage: /budget [user ID | team NAME | chart | export [YYYY-MM-DD | YYYY-MM] [zone]]"
LIMIT_USAGE = "Usage: /limit <global|team NAME|user ID> <hour|day> <usd|off>"
TEAM_USAGE = "Usage: /team <NAME> add|remove <user id>, or /team list"
TEAM_NAME_RULE = "Team names are 1-32 letters, digits, _ or - (and not 'list')."
USER_ID_RULE = "The user id must be a positive Telegram user id."
CHART_CAPTION = (
    "Spend by provider: per hour, last 24 h, and per day, last 30 days (USD). Money is "
    "solid; free calls at list price are hatched (not spent); dashed: the global limit."
)
AMOUNT_RULE = "The amount is USD with at most 6 decimals, from 0 to 1000000, e.g. 0.50 (or 'off')."

#: Telegram user ids are positive and fit a signed 64-bit integer (Bot API: "User.id").
MAX_USER_ID = 2**63 - 1
#: Seconds /kill hard waits for the streams it cut to settle before it reports exposure.
CUT_SETTLE_WAIT_S = 5.0
_TEAM_NAME = re.compile(r"[A-Za-z0-9_-]{1,32}")


def _kill_origin(state: KillState, tz: str) -> str:
    """Who tripped a kill switch, why and when (``by admin 1 at 2026-12-01 03:00 UTC:
    runaway costs``), for the reply to a second /kill."""
    who = "by the burn-rate trigger" if state.automatic else f"by admin {state.by}"
    when = ""
    if state.changed_at is not None:
        when = f" at {state.changed_at.astimezone(ZoneInfo(tz)):%Y-%m-%d %H:%M} {tz}"
    return f"{who}{when}: {state.reason}"


def parse_user_id(text: str) -> int | None:
    """A Telegram user id, or ``None`` for anything else (junk, 0, out of range)."""
    if not text.isascii() or not text.isdigit():
        return None
    value = int(text)
    return value if 0 < value <= MAX_USER_ID else None


def valid_team_name(name: str) -> bool:
    """Team names: ASCII letters, digits, ``_`` and ``-``, 1–32 long, not ``list``."""
    return bool(_TEAM_NAME.fullmatch(name)) and name != "list"


@dataclass(frozen=True, slots=True)
class AdminView:
    """What admin reports show of the settings (no secrets)."""

    tz: str
    has_paid_anchor: bool

    def __init__(self, settings: Settings) -> None:
        object.__setattr__(self, "tz", settings.budget_tz)
        object.__setattr__(self, "has_paid_anchor", "deepseek" in settings.provider_keys())


class IsAdmin(Filter):
    """True only for a person in ADMIN_IDS writing as themselves.

    A message with ``sender_chat`` set (an anonymous group admin, a channel, a linked
    channel's post) never passes, whatever its ``from`` says: Telegram shows all of
    them under shared service ids (see :mod:`bot.chat.payer`).
    """

    def __init__(self, admin_ids: frozenset[int]) -> None:
        self._ids = admin_ids

    async def __call__(self, message: Message) -> bool:
        if is_on_behalf_of_chat(message) or message.from_user is None:
            return False
        return not message.from_user.is_bot and message.from_user.id in self._ids


def _bucket(b: BucketStatus, tz: str) -> str:
    scope = f" {b.scope}" if b.scope else ""
    return (
        f"{b.level.value}{scope} {b.window.value}: settled {usd(b.settled_musd)}, "
        f"held {usd(b.held_musd)}, limit {usd(b.limit_musd)}, remaining {usd(b.remaining_musd)}, "
        f"resets {format_reset(b.resets_at, tz)}"
    )


def render_budget(
    status: LedgerStatus,
    top: list[tuple[int, int, int]],
    cascade: Cascade,
    tz: str,
    messages_today: int,
    teams: list[TeamStatus] | None = None,
    stops: StopTotals | None = None,
) -> str:
    """The /budget report (``teams``: each team's status, for its buckets; ``stops``:
    today's stopped streamed answers, from the ledger's holds)."""
    k = status.kill
    lines = [f"📒 Budget at {status.at:%Y-%m-%d %H:%M} UTC (windows cut in {tz})"]
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
    lines.append("")
    for b in status.buckets:
        if b.window in (Window.HOUR, Window.DAY):
            lines.append("• " + _bucket(b, tz))
    if status.teams:
        lines.append("")
        lines.append("Teams: " + ", ".join(f"{n} ({len(m)})" for n, m in status.teams.items()))
        for team in teams or []:
            lines.extend("• " + _bucket(b, tz) for b in team.buckets)
    if top:
        lines.append("")
        lines.append("Top users today:")
        for user_id, settled, held in top:
            lines.append(f"• {user_id}: settled {usd(settled)}, held {usd(held)}")
    lines.append("")
    lines.append("Providers today:")
    spend = {p.provider: p for p in status.providers}
    for p in cascade.provider_status():
        if not p.present:
            continue
        sp = spend.get(p.name)
        calls = sp.calls if sp else 0
        estimated = f" ({sp.estimated_calls} estimated)" if sp and sp.estimated_calls else ""
        money = (
            f"settled {usd(sp.settled_musd)}, list {usd(sp.list_musd)}"
            if sp
            else f"settled {usd(0)}"
        )
        cooldown = f" ({p.cooldown_remaining_s:.0f}s)" if p.cooldown_remaining_s > 0 else ""
        flags = "" if p.enabled else " DISABLED"
        paid = " paid" if p.paid else ""
        lines.append(
            f"• {p.name}{paid}{flags}: {calls} calls{estimated}, {money}, "
            f"circuit {p.state}{cooldown}"
        )
    paid_names = {p.name for p in cascade.provider_status() if p.paid}
    paid_today = sum(p.calls for p in status.providers if p.provider in paid_names)
    stats = cascade.stats()
    lines.append(f"Paid-anchor calls today: {paid_today} (since start: {stats.paid_anchor_calls})")
    origin = ", ".join(f"{o} {usd(m)}" for o, m in sorted(status.spend_by_origin_musd.items()))
    lines.append(f"Spend by origin: {origin or '—'}")
    per_msg = f"{status.requests_today / messages_today:.2f}" if messages_today else "—"
    lines.append(
        f"Messages today: {messages_today}; LLM requests: {status.requests_today} "
        f"({per_msg} per message)"
    )
    refusals = ", ".join(f"{r} {n}" for r, n in sorted(status.refusals_today.items()))
    lines.append(f"Refusals today: {refusals or 'none'}")
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
    return "\n".join(lines)


def render_user(status: UserStatus, tz: str) -> str:
    """/budget user <id>."""
    lines = [f"👤 User {status.user_id}" + (f" (team {status.team})" if status.team else "")]
    lines.append(
        f"Settled today {usd(status.settled_today_musd)}; in flight {status.inflight}; "
        f"holds {status.outstanding_holds}; messages today {status.messages_today}"
    )
    if status.killed is not None and status.killed.killed:
        lines.append(f"⛔ killed: {status.killed.reason}")
    lines.extend("• " + _bucket(b, tz) for b in status.buckets if b.window is not Window.MINUTE)
    return "\n".join(lines)


def render_team(status: TeamStatus, tz: str) -> str:
    """/budget team <name>."""
    lines = [f"👥 Team {status.name}: {len(status.members)} members"]
    if status.killed is not None and status.killed.killed:
        lines.append(f"⛔ killed: {status.killed.reason}")
    lines.extend("• " + _bucket(b, tz) for b in status.buckets)
    for uid, musd in sorted(status.member_spend_today_musd.items(), key=lambda x: -x[1]):
        lines.append(f"• {uid}: {usd(musd)} today")
    return "\n".join(lines)


#: /digest_now edits its progress message at most this often (seconds): Telegram
#: limits edits of one message like any other message to a chat.
PROGRESS_EDIT_INTERVAL_S = 2.0

_STEPS: dict[Step, str] = {
    Step.STARTED: "started",
    Step.FETCHED: "fetched {count} posts",
    Step.SUMMARISED: "summarising {count}/{total}",
    Step.DEFERRED: "postponed by the budget ({reason}); it will go out when the limit resets",
    Step.EMPTY: "nothing new to send",
    Step.DELIVERED: "delivered",
    Step.DELIVERY_RETRY: "Telegram asked to wait {retry_after_s:g} s before sending",
    Step.RECIPIENT_GONE: "the user has blocked the bot; marked inactive",
    Step.ALREADY_SENT: "today's digest already ran",
    Step.NO_PROFILE: "this user has never written to the bot",
    Step.ELSEWHERE: "another bot process is making or sending today's digest now",
}

_STATUSES: dict[RunStatus, str] = {
    RunStatus.PENDING: "in progress",
    RunStatus.DEFERRED: "postponed by the budget; it will go out when the limit resets",
    RunStatus.READY: "generated; delivery pending",
    RunStatus.SENT: "sent",
    RunStatus.EMPTY: "nothing new to send",
    RunStatus.FAILED_DELIVERY: "could not be delivered",
}


def describe_step(progress: ProgressStep) -> tuple[str, bool]:
    """A runner progress step → (readable text, is it final)."""
    reason = progress.reason.value if progress.reason is not None else ""
    text = _STEPS[progress.step].format(
        count=progress.count,
        total=progress.total,
        reason=reason,
        retry_after_s=progress.retry_after_s,
    )
    return text, progress.step.final


def describe_status(status: RunStatus) -> str:
    """A digest run's status after /digest_now, as text."""
    return _STATUSES[status]


def _parse_limit(args: list[str]) -> tuple[Level, str, Window, int | None] | str:
    """``global hour 0.5`` / ``team NAME day off`` / ``user 42 day 1.00``; a string is
    the reason the arguments were refused."""
    if args[:1] == ["global"] and len(args) == 3:
        level, scope, rest = Level.GLOBAL, "", args[1:]
    elif args[:1] == ["team"] and len(args) == 4:
        if not valid_team_name(args[1]):
            return TEAM_NAME_RULE
        level, scope, rest = Level.TEAM, args[1], args[2:]
    elif args[:1] == ["user"] and len(args) == 4:
        uid = parse_user_id(args[1])
        if uid is None:
            return USER_ID_RULE
        level, scope, rest = Level.USER, str(uid), args[2:]
    else:
        return LIMIT_USAGE
    windows = {"hour": Window.HOUR, "day": Window.DAY}
    if rest[0] not in windows:
        return "The window is 'hour' or 'day'.\n" + LIMIT_USAGE
    if rest[1] == "off":
        return level, scope, windows[rest[0]], None
    amount = parse_usd(rest[1])
    if amount is None:
        return AMOUNT_RULE
    return level, scope, windows[rest[0]], amount


def create_admin_router(admin_ids: frozenset[int]) -> Router:
    """The admin router; every handler is behind :class:`IsAdmin`."""
    router = Router(name="admin")
    router.message.filter(IsAdmin(admin_ids))

    async def reply(bot: Bot, message: Message, text: str, clock: Clock) -> None:
        await send_text(bot, message.chat.id, text, clock=clock)

    @router.message(Command("budget"))
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
        args = (command.args or "").split()
        tz = settings_view.tz
        try:
            if args[:1] == ["chart"]:
                if not chart_available():
                    await reply(bot, message, CHART_MISSING, clock)
                    return
                # the dashboard's main picture, from the same figures (bot/ops/chart.py)
                png = await asyncio.to_thread(spend_chart_png, await operator_view.picture())
                await bot.send_photo(
                    message.chat.id,
                    BufferedInputFile(png, filename="spend.png"),
                    caption=CHART_CAPTION,
                )
                return
            if len(args) == 2 and args[0] == "user":
                uid = parse_user_id(args[1])
                if uid is None:
                    await reply(bot, message, USER_ID_RULE, clock)
                    return
                await reply(bot, message, render_user(await ledger.user_status(uid), tz), clock)
                return
            if len(args) == 2 and args[0] == "team":
                if args[1] not in await ledger.teams():
                    text = f"No team {args[1]!r}; /team list shows the teams."
                    await reply(bot, message, text, clock)
                    return
                await reply(bot, message, render_team(await ledger.team_status(args[1]), tz), clock)
                return
            if args:
                await reply(bot, message, BUDGET_USAGE, clock)
                return
            status = await ledger.status()
            top = await ledger.top_users(10)
            day_key, day_start, _end = day_bounds(clock.now(), tz)
            messages_today = await intake.count_today(day_start)
            teams = [await ledger.team_status(name) for name in sorted(status.teams)]
            stops = await stop_book.totals(day_key) if stop_book is not None else None
            text = render_budget(status, top, cascade, tz, messages_today, teams, stops)
            await reply(bot, message, text, clock)
        except HoldRefused:
            await reply(bot, message, "⚠️ The ledger is unavailable.", clock)

    # the admin check again as the handler's own first filter: the update rate's
    # exemption (bot/middlewares/rate.py) tests a handler's own filters before the router's
    @router.message(IsAdmin(admin_ids), Command("kill"), flags=NOT_RATE_LIMITED)
    async def on_kill(
        message: Message,
        bot: Bot,
        clock: Clock,
        command: CommandObject,
        ledger: Ledger,
        settings_view: AdminView,
        streams: StreamRegistry | None = None,
    ) -> None:
        words = (command.args or "").strip().split(maxsplit=1)
        hard = bool(words) and words[0].lower() == "hard"
        reason = words[1] if hard and len(words) > 1 else "" if hard else (command.args or "")
        reason = reason.strip() or "manual"
        by = message.from_user.id if message.from_user else None
        # the first kill's reason, admin and time stay on the books: a second /kill
        # (e.g. a /kill hard after a /kill) only adds its cuts
        tripped = await trip_kill(ledger, reason, by=by, hard=hard)
        before_state, exposure = tripped.already, tripped.exposure_musd
        if before_state is not None:
            origin = _kill_origin(before_state, settings_view.tz)
            head = f"⛔ The kill switch was already ON ({origin}); that reason is kept."
        else:
            head = f"⛔ Kill switch ON{', hard' if hard else ''} ({reason})."
        if not hard:
            await reply(
                bot,
                message,
                f"{head} New LLM work is refused; work in flight finishes. "
                f"Exposure (outstanding holds): {usd(exposure)}",
                clock,
            )
            return
        cut, waiting = streams.stop_counted("kill") if streams is not None else (0, 0)
        elsewhere = ""
        if streams is not None and streams.kill_watch is not None:
            try:  # the other replicas cut theirs at their next look (bot.ops.signals)
                await streams.kill_watch.raise_here()
                elsewhere = f"; the other replicas cut theirs within {SIGNAL_POLL_S:g} s"
            except LedgerUnavailable:
                log.warning("/kill hard: the other replicas could not be told")
                elsewhere = "; the other replicas could not be told (database unavailable)"
        unsettled = await streams.wait_stopped(CUT_SETTLE_WAIT_S) if streams is not None else 0
        after = (await ledger.status()).exposure_musd
        settled = (
            "settled at the tokens received"
            if not unsettled
            else f"{unsettled} not settled after {CUT_SETTLE_WAIT_S:g} s"
        )
        when = "before the cuts" if before_state is not None else "when killed"
        queued = (
            f"; {waiting} answer(s) still waiting for a model call cancelled (no call made)"
            if waiting
            else ""
        )
        await reply(
            bot,
            message,
            f"{head} New LLM work is refused; {cut} streamed answer(s) in flight cut "
            f"({settled}){queued}{elsewhere}. Exposure {when}: {usd(exposure)}; "
            f"now: {usd(after)}",
            clock,
        )

    @router.message(Command("unkill"))
    async def on_unkill(message: Message, bot: Bot, clock: Clock, ledger: Ledger) -> None:
        by = message.from_user.id if message.from_user else None
        stuck = await reset_kill(ledger, by=by)
        if stuck is None:
            await reply(bot, message, "The kill switch is already off.", clock)
            return
        status = await ledger.status()
        await reply(
            bot,
            message,
            f"✅ Kill switch OFF. Outstanding holds: {status.outstanding_holds} "
            f"({usd(stuck)} held)" + (" — no holds are stuck." if stuck == 0 else "."),
            clock,
        )

    @router.message(Command("limit"))
    async def on_limit(
        message: Message, bot: Bot, clock: Clock, command: CommandObject, ledger: Ledger
    ) -> None:
        parsed = _parse_limit((command.args or "").split())
        if isinstance(parsed, str):
            await reply(bot, message, parsed, clock)
            return
        level, scope, window, amount = parsed
        by = message.from_user.id if message.from_user else None
        await ledger.set_limit(level, scope, window, amount, by=by)
        what = f"{level.value}{' ' + scope if scope else ''} {window.value}"
        await reply(
            bot,
            message,
            f"Limit set: {what} = {usd(amount) if amount is not None else 'off'}",
            clock,
        )

    @router.message(Command("team"))
    async def on_team(
        message: Message, bot: Bot, clock: Clock, command: CommandObject, ledger: Ledger
    ) -> None:
        args = (command.args or "").split()
        if args == ["list"]:
            teams = await ledger.teams()
            text = "\n".join(f"{n}: {', '.join(map(str, m))}" for n, m in sorted(teams.items()))
            await reply(bot, message, text or "No teams.", clock)
            return
        if len(args) != 3 or args[1] not in ("add", "remove"):
            await reply(bot, message, TEAM_USAGE, clock)
            return
        if not valid_team_name(args[0]):
            await reply(bot, message, TEAM_NAME_RULE, clock)
            return
        parsed_uid = parse_user_id(args[2])
        if parsed_uid is None:
            await reply(bot, message, USER_ID_RULE, clock)
            return
        name, action, uid = args[0], args[1], parsed_uid
        if action == "add":
            left = await ledger.team_add(name, uid)
            moved = f" (moved from {left})" if left and left != name else ""
            await reply(bot, message, f"User {uid} is in team {name}{moved}.", clock)
        else:
            removed = await ledger.team_remove(name, uid)
            text = (
                f"User {uid} removed from {name}." if removed else f"User {uid} is not in {name}."
            )
            await reply(bot, message, text, clock)

    @router.message(Command("providers"))
    async def on_providers(
        message: Message,
        bot: Bot,
        clock: Clock,
        command: CommandObject,
        cascade: Cascade,
        ledger: Ledger,
    ) -> None:
        args = (command.args or "").split()
        if len(args) == 2 and args[0] == "enable":
            known = {p.name for p in cascade.provider_status() if p.present}
            if args[1] not in known:
                names = ", ".join(sorted(known))
                await reply(bot, message, f"Unknown provider {args[1]!r}; keys: {names}.", clock)
            elif await cascade.enable_key(args[1]):
                await reply(bot, message, f"{args[1]} enabled.", clock)
            else:
                await reply(bot, message, f"{args[1]} is already enabled.", clock)
            return
        if args:
            await reply(bot, message, "Usage: /providers [enable NAME | prices]", clock)
            return
        lines = ["🔌 Providers (cascade order):"]
        try:
            await cascade.refresh()  # the deployment's circuits, when shared
        except LedgerUnavailable:
            log.warning("/providers: shared key state unreadable; this process's view shown")
        statuses = cascade.provider_status()
        calls_today = {sp.provider: sp.calls for sp in (await ledger.status()).providers}
        for p in statuses:
            if not p.present:
                lines.append(f"• {p.name}: no key")
                continue
            state = "enabled" if p.enabled else "DISABLED (auth failure)"
            cooldown = (
                f", cooldown {p.cooldown_remaining_s:.0f}s" if p.cooldown_remaining_s > 0 else ""
            )
            headers = ", ".join(f"{k}={v}" for k, v in sorted(p.last_rate_limits.items()))
            lines.append(
                f"• {p.name} ({p.model}{', paid' if p.paid else ', free'}): {state}, "
                f"circuit {p.state}{cooldown}, calls today {calls_today.get(p.name, 0)}"
                + (f"\n    last headers: {headers}" if headers else "")
            )
        if not any(p.paid and p.present for p in statuses):
            lines.append("No paid anchor configured: running free-only.")
        await reply(bot, message, "\n".join(lines), clock)

    @router.message(Command("digest_now"))
    async def on_digest_now(
        message: Message, bot: Bot, clock: Clock, command: CommandObject, runner: DigestRunner
    ) -> None:
        arg = (command.args or "").strip()
        if arg:
            target = parse_user_id(arg)
            if target is None:
                await reply(bot, message, "Usage: /digest_now [user id]", clock)
                return
        else:
            target = message.from_user.id if message.from_user else 0
        progress_msg = await bot.send_message(message.chat.id, f"Digest for {target}: starting…")
        last_edit = [clock.monotonic() - PROGRESS_EDIT_INTERVAL_S]
        shown = [""]

        async def show(text: str, *, force: bool) -> None:
            now = clock.monotonic()
            if text == shown[0] or (not force and now - last_edit[0] < PROGRESS_EDIT_INTERVAL_S):
                return
            last_edit[0], shown[0] = now, text
            try:
                await bot.edit_message_text(
                    f"Digest for {target}: {text}",
                    chat_id=message.chat.id,
                    message_id=progress_msg.message_id,
                )
            except TelegramAPIError:  # progress is cosmetic; the digest goes on
                log.debug("progress edit failed", exc_info=True)

        last_step = [Step.STARTED]

        async def progress(step: ProgressStep) -> None:
            last_step[0] = step.step
            text, final = describe_step(step)
            await show(text, force=final)

        try:
            outcome = await runner.run_now(target, progress)
        except HoldRefused as exc:
            await show(f"refused by the ledger ({exc.refusal.reason})", force=True)
            return
        if last_step[0] is Step.ALREADY_SENT:
            # nothing ran now: say how today's run ended earlier, not "— 0 posts"
            await show(f"already done today ({describe_status(outcome.status)})", force=True)
            return
        if last_step[0] in (Step.ELSEWHERE, Step.NO_PROFILE):
            return  # this process made nothing: the step's line is the whole answer
        await show(
            f"{describe_status(outcome.status)} — {outcome.posts} posts, "
            f"{outcome.llm_calls} LLM calls, {outcome.cache_hits} from the cache, "
            f"{outcome.paid_calls} paid",
            force=True,
        )

    return router
